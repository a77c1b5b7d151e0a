"""Facts that hand-written docs pages state and the code decides, checked against the code so
that the pages cannot drift from it."""

from __future__ import annotations

import re

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
