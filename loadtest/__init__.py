"""Load generator and benchmark harness for the broker (docs: docs/benchmarks/index.md).

Run `python -m loadtest --help`. Every broker figure is reported as a ratio to ceilings
(L-SQL, L-HTTP) measured in the same run, and no throughput is reported for a run that fails
the correctness gate.
"""
