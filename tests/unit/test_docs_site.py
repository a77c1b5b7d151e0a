"""The site's configuration (mkdocs.yml): the address its pages are built for, and the
sections of its navigation."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.support import ROOT


def _config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    return config


def test_the_site_is_built_for_the_root_of_the_address_mkdocs_serve_uses() -> None:
    """The 404 page is served for any path, so its links are absolute from site_url's path;
    `mkdocs serve` mounts the site at that path, on dev_addr (127.0.0.1:8000 by default)."""
    config = _config()
    url = urlsplit(config["site_url"])
    assert (url.scheme, url.netloc, url.path) == (
        "http", config.get("dev_addr", "127.0.0.1:8000"), "/")


def test_contributing_is_a_section_of_its_own() -> None:
    sections = {name: pages for entry in _config()["nav"] for name, pages in entry.items()}
    contributing = [next(iter(p.values())) for p in sections["Contributing"]]
    assert contributing[0] == "contributing/index.md"
    assert all(page.startswith("contributing/") for page in contributing)
    assert not any(next(iter(p.values())).startswith("contributing/")
                   for p in sections["Architecture"])
