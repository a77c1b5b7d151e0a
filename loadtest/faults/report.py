"""The figures of a fault run as a text table (printed, and kept beside the JSON)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.faults.checker import MAX_RECOVERY_S, MUST_BE_ZERO

_FAULT_COLUMNS = ("fault", "target", "survived", "heal_s", "recovery_s", "http_500",
                  "http_5xx", "unanswered", "transport_errors", "writes_lost")
# HA runs (loadtest/faults/ha.py) also measure the first push committed after each fault;
# a freeze, its length, the promotion and the pause of writes after it.
_HA_COLUMNS = ("first_queued_s", "longest_push_s", "longest_s")
_FREEZE_COLUMNS = ("stopped_s", "promoted_s", "pause_after_promotion_s",
                   "committed_while_frozen")


_KIND_COLUMNS = ("fault", "injected", "survived", "max_heal_s", "max_recovery_s", "http_500",
                 "http_5xx", "unanswered", "writes_lost")


def by_kind(faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds: dict[str, dict[str, Any]] = {}
    for f in faults:
        k = kinds.setdefault(f["fault"], {"fault": f["fault"], "injected": 0, "survived": 0,
                                          "max_heal_s": None, "max_recovery_s": None,
                                          "http_500": 0, "http_5xx": 0, "unanswered": 0,
                                          "writes_lost": 0})
        k["injected"] += 1
        k["survived"] += bool(f.get("survived"))
        for src, dst in (("heal_s", "max_heal_s"), ("recovery_s", "max_recovery_s")):
            if f.get(src) is not None:
                k[dst] = max(k[dst] or 0.0, f[src])
        for key in ("http_500", "http_5xx", "unanswered", "writes_lost"):
            k[key] += f.get(key) or 0
    return list(kinds.values())


def table(result: dict[str, Any]) -> str:
    f = result["figures"]
    outcome = "PASSED" if result["passed"] else "FAILED: " + ", ".join(result["failed_figures"])
    lines = [f"fault run {result['run_id']}: {outcome}",
             "command: " + " ".join(result.get("argv") or []), "",
             f"{'figure':<28} {'value':>8}  must be"]
    for name in (*MUST_BE_ZERO, "wake_missed", "drain_timed_out"):
        if name in f:
            lines.append(f"{name:<28} {f[name]:>8}  0")
    rec = f.get("max_recovery_s")
    lines.append(f"{'max_recovery_s':<28} {rec if rec is not None else '-':>8}  "
                 f"<= {result.get('max_recovery_bound_s', MAX_RECOVERY_S):g}")
    lines.append("")
    lines.append("detail: " + ", ".join(
        f"{k}={f[k]}" for k in ("writes_lost", "undelivered", "pop_gaps", "pops_past_cursor",
                                "producer_order") if k in f))
    lines.append("counts: " + ", ".join(f"{k}={v}" for k, v in f.get("counts", {}).items()))
    if result.get("drain_s") is not None:
        lines.append(f"drain: {result['drain_s']} s")
    if "wake" in result:
        lines.append("cross-broker wake-ups: " + ", ".join(
            f"{k}={v}" for k, v in result["wake"].items()))
    lines += ["", "per kind of fault (sums; heal and recovery are the worst case):",
              "  ".join(f"{c:>12}" for c in _KIND_COLUMNS)]
    for row in by_kind(result["faults"]):
        lines.append("  ".join(f"{'-' if row[c] is None else row[c]!s:>12}"
                               for c in _KIND_COLUMNS))
    columns = _FAULT_COLUMNS + (_HA_COLUMNS if any("first_queued_s" in row
                                                    for row in result["faults"]) else ()) + (
        _FREEZE_COLUMNS if any("promoted_s" in row for row in result["faults"]) else ())
    lines += ["", "per fault (figures of requests that met its window):",
              "  ".join(f"{c:>12}" for c in columns) + "  outside restart"]
    for row in result["faults"]:
        cells = ["-" if row.get(c) is None else str(row.get(c)) for c in columns]
        lines.append("  ".join(f"{c:>12}" for c in cells) + "  "
                     + str(row.get("outside_restart") or "-"))
    return "\n".join(lines)


def publish(text: str, json_path: str) -> None:
    """Print the table, keep it beside the JSON as .txt, say where both are."""
    print(text)
    Path(json_path).with_suffix(".txt").write_text(text + "\n")
    print(f"written: {json_path}")


if __name__ == "__main__":  # re-render a run's table: python -m loadtest.faults.report X.json
    import json
    import sys

    print(table(json.loads(Path(sys.argv[1]).read_text())))
