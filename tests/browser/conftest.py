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


async def walk_pages(page: Any, url: str, pages: int, field: str = "transactionId") -> list[str]:
    """Open the view at `url` and follow its pager's "next" until it is disabled (at most
    `pages` pages): the cell `field` of every row shown, in order."""
    from playwright.async_api import expect

    seen: list[str] = []
    await page.goto(url)
    for _ in range(pages):
        await page.wait_for_selector("#view[data-loads]:not([data-loads='0'])")
        rows = page.locator(f"tr[data-key] [data-field='{field}']")
        await expect(rows.first).to_be_visible()
        seen += await rows.all_inner_texts()
        following = page.locator("[data-page='next']")
        if await following.is_disabled():
            break
        loads = await page.locator("#view").get_attribute("data-loads")
        await following.click()
        await page.wait_for_selector(f"#view:not([data-loads='{loads}'])")
    return seen
