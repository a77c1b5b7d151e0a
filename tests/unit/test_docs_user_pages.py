"""User pages speak to users: what the site shows on the pages about using, operating,
deploying and securing the broker names no work item of the project, no benchmark run id,
no result file and no test file. That material belongs to the architecture, contributing and
benchmark pages (benchmarks/history.md keeps the runs), which this checks for work items
only. Pages are read as the site renders them (the hook drops the `no-run:` reasons the docs
test reads)."""

from __future__ import annotations

import re
from pathlib import Path

from docsgen.hooks import on_page_markdown
from tests.support import ROOT

DOCS = ROOT / "docs"
# Written for the people who build and measure the broker.
PROJECT_PAGES = ("architecture", "contributing", "benchmarks")
# Being rewritten by a parallel change of the project (its test paths go with it): remove
# the entry once that change has landed.
NOT_YET: set[str] = set()

WORK_ITEM = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
INTERNAL = {
    "a work item": WORK_ITEM,
    "a benchmark run id": re.compile(r"\b20\d{6}-\d{6}\b"),
    "a result file": re.compile(r"loadtest/results"),
    "a test file": re.compile(r"\btests/"),
}


def _rendered(page: Path) -> str:
    return on_page_markdown(page.read_text())


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _user_pages() -> list[Path]:
    return [p for p in sorted(DOCS.rglob("*.md"))
            if p.relative_to(DOCS).parts[0] not in PROJECT_PAGES and _name(p) not in NOT_YET]


def _findings(pages: list[Path], patterns: dict[str, re.Pattern[str]]) -> list[str]:
    found = []
    for page in pages:
        for number, line in enumerate(_rendered(page).splitlines(), 1):
            for what, pattern in patterns.items():
                if match := pattern.search(line):
                    found.append(f"{_name(page)} line {number}: {what} ({match.group(0)!r})")
    return found


def test_user_pages_name_no_work_item_run_result_file_or_test_file() -> None:
    pages = _user_pages()
    assert len(pages) > 30
    assert not _findings(pages, INTERNAL), "\n".join(_findings(pages, INTERNAL))


def test_no_page_names_a_work_item_of_the_project() -> None:
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    findings = _findings(pages, {"a work item": WORK_ITEM})
    assert not findings, "\n".join(findings)


def test_the_patterns_catch_what_they_are_for() -> None:
    line = ("Before this (issue 29), run `20261205-063638-ha` in "
            "`loadtest/results/x.txt`; `tests/faults/test_ha_smoke.py`.")
    assert [what for what, p in INTERNAL.items() if p.search(line)] == list(INTERNAL)
    assert not any(p.search("the ready set's target, 2026-12-05, tests of it")
                   for p in INTERNAL.values())
