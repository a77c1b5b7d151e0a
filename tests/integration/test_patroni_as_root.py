"""`python -m broker.patroni node|witness` run as root becomes PostgreSQL's system user and
runs Patroni with the same Python. With that Python where the user cannot reach it (pyenv
under /root, mode 700), it stops at once naming the directory in the way and the fix; before,
Patroni died with a bare PermissionError.

The unreachable Python is made here as a symlink to this interpreter in a directory of mode
700: executing it needs the user to pass that directory, as with /root/.pyenv. The example
the High availability page shows, a virtualenv outside /root made with pyenv's Python, is
made as a symlink in an open directory to one under /root.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.embedded import SYSTEM_USER
from tests.doc_blocks import blocks
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
    started = time.monotonic()
    status, err = _run_as_root(hidden_python, member, tmp_path)
    took = time.monotonic() - started
    assert status != 0, err
    assert "Traceback" not in err, err
    assert f"In its way: {hidden_python.parent}" in err, err
    assert f"setfacl -m u:{SYSTEM_USER}:rx {hidden_python.parent}" in err, err
    assert "ordinary user instead of root" in err, err
    assert took < 30, took  # at once, not after Patroni's own retries


def _run_as_root(python: Path, member: list[str], tmp_path: Path) -> tuple[int, str]:
    """`python -m broker.patroni MEMBER`; answer its exit status and standard error. The
    interpreter behind `python` finds this checkout and this environment's packages (a
    virtualenv's too) on PYTHONPATH."""
    paths = [str(ROOT), *site.getsitepackages()]
    env = {**os.environ, "QUEEN_HA_DIR": str(tmp_path / "ha"),
           "QUEEN_HA_BASE_PORT": "31440", "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run([str(python), "-m", "broker.patroni", *member], cwd=ROOT, env=env,
                          capture_output=True, timeout=120, check=False)
    return done.returncode, done.stderr.decode()


def _documented_refusal() -> str:
    page = (ROOT / "docs" / "deploying" / "high-availability.md").read_text()
    found, _ = blocks(page, "high-availability.md")
    return next(b.code for b in found if b.code.startswith("broker.patroni: run as root"))


def test_the_refusal_the_high_availability_page_shows_is_what_the_command_prints(
        tmp_path: Path) -> None:
    """The page's example: a virtualenv's python (outside /root) that is a symlink to pyenv's
    Python under /root. Made here as a temporary directory under /root holding the
    interpreter, and a virtualenv-like directory whose python links to it."""
    from broker.patroni import unreachable_paths
    from core.embedded import _prepare_for_system_user

    _prepare_for_system_user(SYSTEM_USER, [])
    root = Path("/root")
    if unreachable_paths(SYSTEM_USER, [root / "x"]) != [root]:
        pytest.skip("PostgreSQL's system user may pass /root on this machine")
    shown = _documented_refusal()
    match = re.search(r"with this Python: (\S+)\.$", shown, re.MULTILINE)
    assert match, shown
    inner = Path(tempfile.mkdtemp(prefix="queen-doc-python-", dir=root))
    try:
        (inner / "python3").symlink_to(Path(sys.executable).resolve())
        venv_python = tmp_path / match[1].lstrip("/")
        venv_python.parent.mkdir(parents=True)
        venv_python.symlink_to(inner / "python3")
        for directory in [venv_python.parent, *venv_python.parents]:
            if directory == tmp_path.parent:
                break
            directory.chmod(0o755)
        status, err = _run_as_root(venv_python, ["witness"], tmp_path)
    finally:
        shutil.rmtree(inner)
    assert status != 0, err
    assert err.strip() == shown.strip().replace(match[1], str(venv_python))


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
