"""The browser fixtures (tests/support/browser_support.py) for the tests of this folder."""

from browser_support import browser, chromium  # noqa: F401 - registered as fixtures here
