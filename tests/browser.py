"""The headless browser the page-of-the-plan tests drive: the distribution's Chromium (hack/install-browser.sh
installs it; `make test` runs that), through Playwright, which never downloads a browser of its own here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("GANGSOLVE_CHROMIUM", "/usr/bin/chromium"))
# As root (CI, containers) Chromium runs only without its sandbox; /dev/shm may be small in a container.
ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
VIEWPORT = {"width": 1280, "height": 800}


def chromium() -> str:
    """The browser's path; a test without it skips and says why, except under CI, where it must run."""
    missing = None
    if not os.access(CHROMIUM, os.X_OK):
        missing = f"{CHROMIUM} is missing: hack/install-browser.sh installs Debian's chromium (as root, with apt-get)"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            missing = "playwright is not installed: make sync"
    if missing is None:
        return str(CHROMIUM)
    if os.environ.get("CI"):
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing)


def screenshots() -> Path | None:
    """Where to save screenshots of the page (GANGSOLVE_SCREENSHOTS, e.g. docs/images), or None."""
    where = os.environ.get("GANGSOLVE_SCREENSHOTS")
    if not where:
        return None
    path = Path(where)
    path.mkdir(parents=True, exist_ok=True)
    return path
