"""The set-up commands: the README has two (run the broker, run the tests), the getting-started
page shows the same two, and CI runs the test command verbatim (.ci/run, in a shell whose
python3 is Debian's, which refuses `pip install` outside a virtualenv: PEP 668)."""

from __future__ import annotations

from pathlib import Path

from tests.doc_blocks import blocks
from tests.support import ROOT

README = ROOT / "README.md"
GETTING_STARTED = ROOT / "docs" / "getting-started" / "index.md"
CI = ROOT / ".ci" / "run"
# The no-run reasons that mark them (tests/doc_blocks.py).
_KINDS = {"the set-up command itself": "serve", "the test command itself": "test"}


def _commands(page: Path) -> list[tuple[str, str]]:
    found, problems = blocks(page.read_text(), str(page.relative_to(ROOT)))
    assert not problems, problems
    return [(kind, block.code.strip()) for block in found if block.decision == "skip"
            for reason, kind in _KINDS.items() if block.reason.startswith(reason)]


def test_the_readme_has_one_command_to_run_the_broker_and_one_to_run_the_tests() -> None:
    commands = _commands(README)
    assert [kind for kind, _ in commands] == ["serve", "test"], commands
    assert all("\n" not in command for _, command in commands), commands


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    [test] = [command for kind, command in _commands(README) if kind == "test"]
    assert test in CI.read_text().splitlines(), f"{CI} does not run {test!r} as a line of its own"


def test_the_getting_started_page_shows_the_readme_commands() -> None:
    assert _commands(GETTING_STARTED) == _commands(README)


def test_both_install_into_a_virtualenv_they_make_first() -> None:
    """What CI's run of the test command proves on Debian's Python holds for the other one:
    the same virtualenv, made before anything is installed."""
    commands = dict(_commands(README))
    venv = "python3 -m venv .venv && . .venv/bin/activate && python3 -m pip install -e "
    assert commands["serve"] == venv + ". && queen-broker serve", commands
    assert commands["test"] == venv + "'.[test]' && python3 -m pytest", commands
