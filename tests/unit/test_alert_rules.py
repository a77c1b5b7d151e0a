"""The Prometheus alert rules (deploy/prometheus/alerts.yml) under promtool, Debian's package
`prometheus` (.ci/run installs it): the file is valid, and each rule fires on a synthetic
series of the trouble it names and stays quiet on a healthy one (alerts_test.yml). Without
promtool these tests fail, by design: shipped rules must not go untested silently."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support import ROOT

RULES = ROOT / "deploy" / "prometheus"


def _promtool(*args: str, cwd: Path = RULES) -> str:
    promtool = shutil.which("promtool")
    assert promtool is not None, (
        "promtool is not installed (Debian package prometheus; .ci/run installs it)")
    done = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_file_is_valid() -> None:
    out = _promtool("check", "rules", "alerts.yml")
    assert "SUCCESS: 13 rules found" in out, out


def test_each_rule_fires_on_trouble_and_stays_quiet_when_healthy() -> None:
    out = _promtool("test", "rules", "alerts_test.yml")
    assert "SUCCESS" in out, out


def test_a_rule_that_never_fires_fails_its_test(tmp_path: Path) -> None:
    """The rule tests can fail: the same tests against a copy where one rule is silenced."""
    rules = (RULES / "alerts.yml").read_text()
    expr = "expr: max without (instance) (1 - queen_file_buffer_db_healthy) == 1"
    assert expr in rules
    (tmp_path / "alerts.yml").write_text(rules.replace(expr, "expr: vector(0) > 1"))
    shutil.copy(RULES / "alerts_test.yml", tmp_path / "alerts_test.yml")
    promtool = shutil.which("promtool")
    assert promtool is not None
    done = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "QueenDatabaseUnreachable" in done.stdout + done.stderr
