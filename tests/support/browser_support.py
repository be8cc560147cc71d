"""Headless Chromium for the browser tests (JupyterLab in tests/notebooks/test_browser.py, the website in
tests/notebooks/test_site.py): Debian's Chromium driven through Playwright, never a downloaded browser.

Where $BERTCOURSE_REQUIRE_BROWSER is set (CI) a missing Chromium, Playwright or site extra fails the test
instead of skipping it. The fixtures are registered for tests/notebooks/ by its conftest.py.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def missing(reason: str) -> None:
    """Skip for `reason`, or fail where $BERTCOURSE_REQUIRE_BROWSER says the browser tests must run."""
    if os.environ.get("BERTCOURSE_REQUIRE_BROWSER"):
        pytest.fail(f"{reason} (BERTCOURSE_REQUIRE_BROWSER is set)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing("the playwright package is not installed: pip install -e '.[dev]'")
    path = os.environ.get("BERTCOURSE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path or not Path(path).is_file():
        missing(f"Chromium not found ({path or 'not on PATH'}): apt-get install chromium, or set BERTCOURSE_CHROMIUM")
    return path


@pytest.fixture(scope="module")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()
