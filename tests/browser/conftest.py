"""A headless Debian chromium driven by Playwright, one per module.

No browser is ever downloaded (`playwright install` is never run): the tests use the system
`chromium` (apt, see `.ci/run`) or the one `DASHBOARD_CHROMIUM` names. Without one, or without
the playwright package, every test here is skipped with the reason, which pytest's `-ra`
summary prints.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

SCREENSHOTS = ROOT / "docs" / "screenshots"


def system_chromium() -> str | None:
    named = os.environ.get("DASHBOARD_CHROMIUM")
    if named:
        return named if Path(named).exists() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("browser tests need the playwright package (pip install -e '.[test]')")
    executable = system_chromium()
    if executable is None:
        pytest.skip("browser tests need Debian's chromium (apt-get install chromium; "
                    "or set DASHBOARD_CHROMIUM to a Chromium binary): none found")
    async with async_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        chromium = await playwright.chromium.launch(
            executable_path=executable, headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield chromium
        finally:
            await chromium.close()


async def snap(page: Any, name: str) -> None:
    """Save a screenshot for the docs (docs/screenshots/) when DASHBOARD_SCREENSHOTS=1 (never in CI runs,
    so they do not dirty the tree)."""
    if os.environ.get("DASHBOARD_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
