"""Facts that hand-written docs pages state and the code decides, checked against the code so
that the pages cannot drift from it."""

from __future__ import annotations

import re

import yaml

from broker.auth.access import Access
from broker.table import ENDPOINTS
from core.auth_settings import DEFAULT_SKIP_PATHS
from tests.support import ROOT

DOCS = ROOT / "docs"


def _code_spans(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


def test_the_security_page_lists_every_public_route() -> None:
    page = (DOCS / "security" / "index.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| PUBLIC |"))
    paths = _code_spans(row.split("|")[2])
    assert paths == {e.path for e in ENDPOINTS if e.access is Access.PUBLIC}


def test_the_tokens_page_names_the_default_skip_paths() -> None:
    page = (DOCS / "security" / "tokens.md").read_text()
    sentence = page.split("`JWT_SKIP_PATHS` (by default", 1)[1].split(")", 1)[0]
    assert _code_spans(sentence) == set(DEFAULT_SKIP_PATHS)


def test_the_upgrades_page_speaks_of_no_release_the_project_has_not_made() -> None:
    """The project publishes no releases: every commit of main is a version someone may run,
    and the upgrade tests build their databases with earlier commits' code
    (tests/released.py). Until a release exists, the page promises nothing about one."""
    page = (DOCS / "operating" / "upgrades.md").read_text()
    assert "release" not in page.lower()


def test_the_results_page_dates_its_figures_and_says_they_predate_the_ready_set() -> None:
    """Figures of a benchmark are figures of one day's code: the page says which day, and
    that the ready set (2026-12-05) came after it."""
    page = (DOCS / "benchmarks" / "results.md").read_text()
    head = page.split("\n\n", 3)[:3]
    assert re.search(r"\b2026-12-02\b", " ".join(head)), head
    assert "before the ready set" in " ".join(head).replace("**", "")


def _using_it_pages() -> list[str]:
    """The pages of the site's "Using it" section (mkdocs.yml), as paths under docs/."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    section = next(entry["Using it"] for entry in nav if "Using it" in entry)
    return [next(iter(page.values())) for page in section]


def test_the_home_page_links_every_page_of_using_it() -> None:
    home = (DOCS / "index.md").read_text()
    pages = _using_it_pages()
    assert "guide/kafka.md" in pages
    assert [p for p in pages if f"]({p}" not in home] == []


def test_the_readme_features_table_links_every_capability_of_using_it() -> None:
    """Acknowledging is part of the Consuming row (its page links the acks page)."""
    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Features", 1)[1].split("\n## ", 1)[0]
    missing = [p for p in _using_it_pages() if f"](docs/{p})" not in table]
    assert missing == ["guide/acks.md"]
    assert "](acks.md)" in (DOCS / "guide" / "consuming.md").read_text()
