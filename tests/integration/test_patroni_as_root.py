"""`python -m broker.patroni node|witness` run as root becomes PostgreSQL's system user and
runs Patroni with the same Python. With that Python where the user cannot reach it (pyenv
under /root, mode 700), it stops at once naming the directory in the way and the fix; before,
Patroni died with a bare PermissionError (issue 29).

The unreachable Python is made here as a symlink to this interpreter's binary in a directory
of mode 700: executing it needs the user to pass that directory, as with /root/.pyenv. When
this interpreter runs in a virtualenv (as in CI: one made from Debian's /usr/bin/python3),
that binary is the base interpreter, which has none of the project's packages: the test then
starts a virtualenv outside that directory whose python links to it, as a virtualenv made
from pyenv's Python is (its packages and PostgreSQL's binaries within the user's reach, the
interpreter not).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.embedded import SYSTEM_USER
from tests.support import ROOT

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="run as root only: the switch to PostgreSQL's user is root's")


@dataclass(frozen=True)
class HiddenPython:
    python: Path  # what to run: this interpreter with the packages it has here
    wall: Path    # the directory of mode 700 on the way to its binary


@pytest.fixture
def hidden_python() -> Iterator[HiddenPython]:
    """This interpreter, its binary reached through a directory only root may pass (temporary
    directories, not under pytest's tmp_path, whose parents the HA layout opens up for the
    system user)."""
    made: list[Path] = []
    try:
        wall = Path(tempfile.mkdtemp(prefix="queen-hidden-python-"))
        made.append(wall)
        wall.chmod(0o700)
        binary = wall / "python3"
        binary.symlink_to(Path(sys.executable).resolve())
        if sys.prefix == sys.base_prefix:  # not a virtualenv: the binary has the packages
            yield HiddenPython(binary, wall)
            return
        # Python finds its virtualenv by the pyvenv.cfg beside the parent of the path it was
        # started by, and the packages in that parent's lib/.
        venv = Path(tempfile.mkdtemp(prefix="queen-venv-"))
        made.append(venv)
        venv.chmod(0o755)
        (venv / "bin").mkdir()
        (venv / "bin" / "python3").symlink_to(binary)
        shutil.copy(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
        (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
        yield HiddenPython(venv / "bin" / "python3", wall)
    finally:
        for path in made:
            shutil.rmtree(path)


@pytest.mark.parametrize("member", [["witness"], ["node", "pg1"]])
def test_run_as_root_with_a_python_its_user_cannot_reach_it_stops_at_once_naming_it(
        member: list[str], hidden_python: HiddenPython, tmp_path: Path) -> None:
    env = {**os.environ, "QUEEN_HA_DIR": str(tmp_path / "ha"),
           "QUEEN_HA_BASE_PORT": "31440", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run([str(hidden_python.python), "-m", "broker.patroni", *member],
                          cwd=ROOT, env=env, capture_output=True, timeout=120, check=False)
    took = time.monotonic() - started
    err = done.stderr.decode()
    assert done.returncode != 0, err
    assert "Traceback" not in err, err
    assert f"In its way: {hidden_python.wall}." in err, err
    assert f"setfacl -m u:{SYSTEM_USER}:rx {hidden_python.wall}," in err, err
    assert "ordinary user instead of root" in err, err
    assert took < 30, took  # at once, not after Patroni's own retries


# Looked up, not imported (see tests/faults/test_ha_smoke.py). The README's test command
# installs the test extra only; CI installs the ha extra too.
@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("patroni", "pysyncobj")),
                    reason="the ha extra is not installed (pip install -e '.[ha]')")
def test_the_check_passes_for_a_python_the_user_can_reach() -> None:
    """This machine's interpreter is reachable for the system user (the HA tests run
    Patroni with it): the check lets it through."""
    from broker.patroni import check_reachable, unreachable_paths
    from core.embedded import _prepare_for_system_user

    _prepare_for_system_user(SYSTEM_USER, [])  # the user exists
    if unreachable_paths(SYSTEM_USER, [Path(sys.executable)]):
        pytest.skip("this machine's Python is out of the system user's reach")
    check_reachable(SYSTEM_USER, ["-m", "patroni"])  # returns: no SystemExit
