"""Headless Chromium for the tests of the status page: Debian's chromium and
chromedriver (the Makefile installs them), a fresh profile, the console kept."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ARGUMENTS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,1600",
)  # fmt: skip


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """A headless Chromium driven by chromedriver, its profile in `profile`; quit at the end.
    Fails (never skips) without Debian's chromium and chromium-driver."""
    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.fail("the status page is tested in Debian's chromium and chromium-driver, not installed here: "
                    "`make test` installs them as root (apt-get install chromium chromium-driver)")  # fmt: skip
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (*ARGUMENTS, f"--user-data-dir={profile}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    try:
        yield chrome
    finally:
        chrome.quit()
