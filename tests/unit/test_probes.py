"""The cost probes' shared runner (loadtest/probes/rounds.py) and their one command."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest import cli
from loadtest.probes import PROBES
from loadtest.probes.rounds import Rounds, in_turn

ROOT = Path(__file__).resolve().parent.parent.parent


def test_variants_take_turns_going_first() -> None:
    assert [in_turn(("a", "b", "c"), r) for r in range(3)] == [
        ["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]


def test_a_result_holds_every_round_and_the_same_run_ratios(tmp_path: Path) -> None:
    rounds = Rounds("example", argparse.Namespace(out=tmp_path, rounds=3))
    for new, old in ((110.0, 100.0), (90.0, 100.0), (300.0, 200.0)):
        rounds.add("new msg/s", new)
        rounds.add("old msg/s", old)
        rounds.end_round()
    rounds.ratio("new / old", "new msg/s", "old msg/s")
    rounds.difference("new - old", "new msg/s", "old msg/s")
    rounds.detail("note", {"k": 1})
    assert rounds.finish() == 0
    [written] = tmp_path.glob("probe-example-*.json")
    result = json.loads(written.read_text())
    assert result["figures"] == {"new msg/s": [110.0, 90.0, 300.0],
                                 "old msg/s": [100.0, 100.0, 200.0]}
    assert result["medians"] == {"new msg/s": 110.0, "old msg/s": 100.0}
    # The ratio of the rounds, not of the medians (110 / 100 = 1.1 would be).
    ratio = result["compared"]["new / old"]
    assert ratio["per_round"] == [1.1, 0.9, 1.5] and ratio["median"] == 1.1
    assert ratio["range"] == [0.9, 1.5]
    assert result["compared"]["new - old"]["median"] == 10.0
    assert result["rounds"] == 3 and result["details"] == {"note": {"k": 1}}
    text = written.with_suffix(".txt").read_text()
    assert "new / old  1.100 (median of the rounds' ratios, 0.900 .. 1.500)" in text


def test_every_probe_answers_help_through_the_one_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The command itself once, as a user runs it; then every probe through the same entry,
    # loadtest.cli.main, in this process: an interpreter per probe made this test 10-20 s
    # of start-ups, and each probe's help is its own parser whatever the process.
    first, *rest = PROBES
    done = subprocess.run([sys.executable, "-m", "loadtest", "probe", first, "--help"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, (first, done.stderr)
    helps = {first: done.stdout}
    for name in rest:
        with pytest.raises(SystemExit) as exited:
            cli.main(["probe", name, "--help"])
        assert exited.value.code == 0, name
        helps[name] = capsys.readouterr().out
    for name, text in helps.items():
        assert f"python -m loadtest probe {name}" in text, name
        assert "--rounds" in text and "--out" in text, name


@pytest.mark.timeout(300)
def test_a_probe_runs_and_writes_its_result(tmp_path: Path) -> None:
    """The in-process probe, CI-sized: every figure of two rounds, JSON and text."""
    done = subprocess.run(
        [sys.executable, "-m", "loadtest", "probe", "encryption_layout", "--rounds", "2",
         "--budget", "0.001", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stderr
    [written] = tmp_path.glob("probe-encryption_layout-*.json")
    result = json.loads(written.read_text())
    assert result["rounds"] == 2
    assert all(len(values) == 2 for values in result["figures"].values())
    assert "1000 msgs segment / plain read one" in result["compared"]
    assert "1000 msgs message / plain stored bytes" in result["details"]
    assert written.with_suffix(".txt").read_text() in done.stdout


def test_path_cost_counts_its_reading_of_the_server_as_the_servers_not_the_brokers() -> None:
    # The server's reading (psutil over /proc) runs in the measuring process: counted inside
    # that process's window, it was charged to the request measured. Here a reading that
    # burns 40 ms of CPU around no work at all must leave the window's own CPU near zero.
    import time

    from loadtest.probes.path_cost import CpuWindow

    def costly_reading() -> float:
        started = time.process_time()
        while time.process_time() - started < 0.04:
            pass
        return 0.0

    own, by_server = CpuWindow(costly_reading, own_cpu=time.process_time).close()
    assert own < 0.02, f"the server's reading was counted as this process's: {own:.3f} s"
    assert by_server == 0.0


@pytest.mark.timeout(120)
def test_the_http_stack_probe_measures_each_variant_across_connections(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI-sized: one round, two sizes, each client thread's requests over three connections
    (the probe opens a new one before hypercorn's keep-alive limit closes the old)."""
    from loadtest.probes import http_stack

    monkeypatch.setattr(http_stack, "PER_CONNECTION", 50)
    status = http_stack.main(["--rounds", "1", "--sizes", "1", "10", "--requests", "300",
                              "--connections", "2", "--out", str(tmp_path)])
    assert status == 0
    [written] = tmp_path.glob("probe-http_stack-*.json")
    result = json.loads(written.read_text())
    assert set(result["figures"]) == {f"{v} {s} µs/request" for v in http_stack.VARIANTS
                                      for s in (1, 10)}
    assert all(values[0] > 0 for values in result["figures"].values())
    assert {"starlette / asgi, 10 messages", "null / asgi, 1 messages"} <= set(
        result["compared"])


@pytest.mark.timeout(120)
def test_the_large_messages_probe_measures_both_checkouts(tmp_path: Path) -> None:
    """CI-sized: one round, this checkout on both sides (`--root` itself), small messages;
    every phase's figures for each side, their ratios, and every message delivered."""
    from loadtest.probes import large_messages

    status = large_messages.main([
        "--rounds", "1", "--root", str(ROOT), "--small", "3", "--small-bytes", "50000",
        "--large", "2", "--large-bytes", "400000", "--passes", "1", "--out", str(tmp_path)])
    assert status == 0
    [written] = tmp_path.glob("probe-large_messages-*.json")
    result = json.loads(written.read_text())
    assert set(result["figures"]) == {f"{side} {figure}" for side in ("this", "other")
                                      for figure in large_messages.FIGURES}
    medians = result["medians"]
    for side in ("this", "other"):
        assert medians[f"{side} batch first answer messages"] == 5  # far below the budget
        assert medians[f"{side} batch pops"] == 1
        assert medians[f"{side} segments"] >= 1
        assert medians[f"{side} single pops peak RSS MB"] > 10
    assert result["compared"]["segments: this / other"]["median"] == 1.0  # the same code
    assert "large pop CPU ms: this / other" in result["compared"]


def test_the_http_stack_probe_fails_when_a_client_thread_fails() -> None:
    """A server that closes every connection at once answers nothing: the probe must say
    so, not divide the CPU it read by requests that were never answered."""
    import socket
    import threading

    from loadtest.probes import http_stack

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def close_each() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.close()

    closer = threading.Thread(target=close_each, daemon=True)
    closer.start()
    try:
        with pytest.raises(ConnectionError):  # closed, or reset, by the server
            http_stack.send_concurrently(listener.getsockname()[1],
                                         http_stack.push_request(1), 3, 2)
    finally:
        stop.set()
        closer.join(5)
        listener.close()


def test_append_cost_installs_another_checkouts_append_under_its_own_name() -> None:
    from loadtest.probes.append_cost import append_function

    sql = append_function(ROOT, "append_partitions_other")
    assert sql.startswith("CREATE OR REPLACE FUNCTION queen.append_partitions_other(")
    assert sql.endswith("END $$;") and "queen.append_partitions(" not in sql
    # The whole body: the last statement of the function is in it.
    assert "UPDATE queen.log_partitions" in sql and sql.count("$$") == 2
