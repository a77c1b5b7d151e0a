"""`python -m broker.patroni node|witness` run as root becomes PostgreSQL's system user and
runs Patroni with the same Python. With that Python where the user cannot reach it (pyenv
under /root, mode 700), it stops at once naming the directory in the way and the fix; before,
Patroni died with a bare PermissionError (issue 29).

The unreachable Python is made here as a symlink to this interpreter in a directory of mode
700: executing it needs the user to pass that directory, as with /root/.pyenv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.embedded import SYSTEM_USER
from tests.support import ROOT

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="run as root only: the switch to PostgreSQL's user is root's")


@pytest.fixture
def hidden_python() -> Iterator[Path]:
    """This interpreter, reached through a directory only root may pass (not under pytest's
    tmp_path, whose parents the HA layout opens up for the system user)."""
    hidden = Path(tempfile.mkdtemp(prefix="queen-hidden-python-"))
    try:
        hidden.chmod(0o700)
        python = hidden / "python3"
        python.symlink_to(Path(sys.executable).resolve())
        yield python
    finally:
        shutil.rmtree(hidden)


@pytest.mark.parametrize("member", [["witness"], ["node", "pg1"]])
def test_run_as_root_with_a_python_its_user_cannot_reach_it_stops_at_once_naming_it(
        member: list[str], hidden_python: Path, tmp_path: Path) -> None:
    env = {**os.environ, "QUEEN_HA_DIR": str(tmp_path / "ha"),
           "QUEEN_HA_BASE_PORT": "31440", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run([str(hidden_python), "-m", "broker.patroni", *member], cwd=ROOT,
                          env=env, capture_output=True, timeout=120, check=False)
    took = time.monotonic() - started
    err = done.stderr.decode()
    assert done.returncode != 0, err
    assert "Traceback" not in err, err
    assert f"In its way: {hidden_python.parent}" in err, err
    assert f"setfacl -m u:{SYSTEM_USER}:rx {hidden_python.parent}" in err, err
    assert "ordinary user instead of root" in err, err
    assert took < 30, took  # at once, not after Patroni's own retries


def test_the_check_passes_for_a_python_the_user_can_reach() -> None:
    """This machine's interpreter is reachable for the system user (the HA tests run
    Patroni with it): the check lets it through."""
    from broker.patroni import check_reachable, unreachable_paths
    from core.embedded import _prepare_for_system_user

    _prepare_for_system_user(SYSTEM_USER, [])  # the user exists
    if unreachable_paths(SYSTEM_USER, [Path(sys.executable)]):
        pytest.skip("this machine's Python is out of the system user's reach")
    check_reachable(SYSTEM_USER, ["-m", "patroni"])  # returns: no SystemExit
