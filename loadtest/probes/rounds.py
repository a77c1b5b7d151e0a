"""What every probe shares: its options, rounds that alternate the variants compared, and one
result format.

A probe measures one feature's cost by running its variants in turn, round after round, in
the same run (so drift on a shared machine hits them alike), and reports same-run ratios:
the median of the per-round ratios with their range, never a figure compared with another
run's. `Rounds` collects the figures round by round and writes them, with the medians, the
ratios, the command line and the machine's load, as `probe-<name>-<run>.json` and `.txt`
under loadtest/results/ (or `--out`); the text is also printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil  # type: ignore[import-untyped]

from loadtest.launch import ROOT

RESULTS = ROOT / "loadtest" / "results"
# PostgreSQL without fsync, for comparisons of the broker's own work (not broker benchmarks).
FAST_DATABASE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

T = TypeVar("T")


def arguments(probe: str, description: str, *, seconds: float | None = None,
              rounds: int = 3, connections: int | None = 32,
              fast_database: bool = True) -> argparse.ArgumentParser:
    """A probe's parser with the options every probe has (`--rounds`, `--out`), and those of
    the load-driving ones: `--workers`, `--connections`, `--seconds`, `--fast-database`."""
    parser = argparse.ArgumentParser(prog=f"python -m loadtest probe {probe}",
                                     description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="results directory (default loadtest/results)")
    if connections is not None:
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--connections", type=int, default=connections)
    if seconds is not None:
        parser.add_argument("--seconds", type=float, default=seconds)
    if fast_database:
        parser.add_argument("--fast-database", action="store_true",
                            help="PostgreSQL without fsync, so the disk's jitter does not drown "
                                 "the difference between what is compared (not a broker "
                                 "benchmark)")
    return parser


def in_turn(variants: Sequence[T], round_index: int) -> list[T]:
    """The variants in the order a round runs them: reversed every other round, so none
    always goes first."""
    return list(variants) if round_index % 2 == 0 else list(reversed(variants))


def figures_from_checkout(root: Path, script: str, options: Sequence[str], *,
                          timeout: float) -> dict[str, float]:
    """Run a probe's worker (`script --worker options`) with checkout `root` first on the
    path, and read the JSON figures it prints last. The script is this checkout's, so a
    checkout without it can be measured; its broker, core and loadtest are `root`'s."""
    command = [sys.executable, script, "--worker", *options]
    env = {**os.environ, "PYTHONPATH": str(root), "LOG_LEVEL": "warning"}
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                          check=False, timeout=timeout)
    if done.returncode != 0:
        name = Path(script).stem
        raise RuntimeError(f"{name} worker in {root} failed: {done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and everything below it (exited children excluded)."""
    total = 0.0
    root = psutil.Process(pid)
    for proc in (root, *root.children(recursive=True)):
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


@dataclass(frozen=True)
class Ratio:
    label: str
    numerator: str
    denominator: str
    difference: bool = False  # numerator - denominator instead of a quotient


class Rounds:
    """The figures of one probe run, round by round; see the module's docstring."""

    def __init__(self, probe: str, args: argparse.Namespace) -> None:
        self.probe = probe
        self.args = args
        self.run_id = time.strftime("%Y%m%d-%H%M%S")
        self.figures: dict[str, list[float]] = {}
        self.ratios: list[Ratio] = []
        self.details: dict[str, Any] = {}  # what a probe reports besides its figures
        self._load_at_start = os.getloadavg()
        self._round = 0

    def add(self, figure: str, value: float) -> None:
        """The value of `figure` in the current round."""
        self.figures.setdefault(figure, []).append(float(value))

    def end_round(self) -> None:
        """Print the round's figures (progress, on stderr)."""
        self._round += 1
        current = {name: round(values[-1], 3) for name, values in self.figures.items()
                   if len(values) == self._round}
        print(f"{self.probe} round {self._round}: {json.dumps(current)}", file=sys.stderr,
              flush=True)

    def ratio(self, label: str, numerator: str, denominator: str) -> None:
        """Report numerator / denominator, round by round (figures of the same rounds)."""
        self.ratios.append(Ratio(label, numerator, denominator))

    def difference(self, label: str, minuend: str, subtrahend: str) -> None:
        """Report minuend - subtrahend, round by round."""
        self.ratios.append(Ratio(label, minuend, subtrahend, difference=True))

    def against_checkout(self, other: Path | None, figures: Sequence[str]) -> None:
        """Report each `this <figure> µs/msg` against `other <figure> µs/msg`, the figures of
        another checkout measured in the same rounds (none without one)."""
        if other is None:
            return
        for figure in figures:
            self.ratio(f"{figure}: this / other", f"this {figure} µs/msg",
                       f"other {figure} µs/msg")
        self.detail("other", str(other.resolve()))

    def detail(self, key: str, value: Any) -> None:
        self.details[key] = value

    def result(self) -> dict[str, Any]:
        medians = {name: statistics.median(v) for name, v in self.figures.items() if v}
        compared: dict[str, Any] = {}
        for r in self.ratios:
            pairs = list(zip(self.figures.get(r.numerator, []),
                             self.figures.get(r.denominator, [])))
            per_round = [a - b if r.difference else (a / b if b else float("nan"))
                         for a, b in pairs]
            if per_round:
                compared[r.label] = {
                    "of": r.numerator, "to": r.denominator,
                    "kind": "difference" if r.difference else "ratio",
                    "median": statistics.median(per_round), "per_round": per_round,
                    "range": [min(per_round), max(per_round)]}
        return {"probe": self.probe, "run_id": self.run_id, "argv": sys.argv,
                "args": {k: str(v) if isinstance(v, Path) else v
                         for k, v in vars(self.args).items()},
                "machine": {"cpus": os.cpu_count(), "load_avg_start": self._load_at_start,
                            "load_avg_end": os.getloadavg()},
                "rounds": self._round, "figures": self.figures, "medians": medians,
                "compared": compared, "details": self.details}

    def finish(self) -> int:
        """Write the JSON and the text, print the text; the probe's exit status (0)."""
        result = self.result()
        out: Path = getattr(self.args, "out", RESULTS)
        out.mkdir(parents=True, exist_ok=True)
        stem = out / f"probe-{self.probe}-{self.run_id}"
        text = render(result)
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
        stem.with_suffix(".txt").write_text(text)
        print(text)
        print(f"written: {stem}.json, {stem}.txt")
        return 0


def render(result: dict[str, Any]) -> str:
    """The text of a result: medians with their range, then the same-run comparisons."""
    machine = result["machine"]
    head = (f"probe {result['probe']} ({result['run_id']}), {result['rounds']} round(s); "
            f"load average {machine['load_avg_start'][0]:.1f} -> "
            f"{machine['load_avg_end'][0]:.1f} on {machine['cpus']} CPUs (compare ratios "
            "within this run, not figures across runs)")
    lines = [head, ""]
    width = max((len(name) for name in result["figures"]), default=0)
    for name, values in result["figures"].items():
        if values:
            lines.append(f"{name:<{width}}  median {result['medians'][name]:12.3f}  "
                         f"range {min(values):.3f} .. {max(values):.3f}")
    if result["compared"]:
        lines.append("")
        width = max(len(label) for label in result["compared"])
        for label, c in result["compared"].items():
            lines.append(f"{label:<{width}}  {c['median']:.3f} (median of the rounds' "
                         f"{'differences' if c['kind'] == 'difference' else 'ratios'}, "
                         f"{c['range'][0]:.3f} .. {c['range'][1]:.3f})")
    for key, value in result["details"].items():
        lines.append(f"{key}: {json.dumps(value, default=str)}")
    return "\n".join(lines) + "\n"
