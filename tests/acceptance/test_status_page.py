"""The status page of the admin listener through `mtad run`, in headless Chromium:
a wrong token is refused, the right one logs in (an HttpOnly, SameSite=Strict
cookie that reads the API but changes nothing), the page shows the queue's counts
as the API gives them, and a tenant paused from the command line, with no
JavaScript error in the console."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as shown
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser import chromium
from tests.running import Mtad, admin_call, free_port

pytestmark = pytest.mark.slow
TOKEN = "an-admin-token-of-the-page-test"
# What the browser's console may say: the API's 401 before the login and at the
# wrong token, and the 404 of /v1/campaigns where no campaign route is (yet).
EXPECTED = re.compile(r"/v1/\S+ - Failed to load resource: .* 401|/page/login - Failed to load resource: .* 401"
                      r"|/v1/campaigns - Failed to load resource: .* 404")  # fmt: skip


def _with_cookie(port: int, method: str, path: str, cookie: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=b"{}" if method == "POST"
                                     else None, headers={"Cookie": f"mtad_admin={cookie}"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code


def _counted(driver: WebDriver, selector: str, attribute: str) -> dict[str, str]:
    return {e.get_attribute(attribute) or "": e.get_attribute("data-count") or ""
            for e in driver.find_elements(By.CSS_SELECTOR, selector)}  # fmt: skip


def test_the_status_page_shows_what_the_api_says(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    token_file = tmp_path / "admin.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    daemon: Mtad = mtad_factory(
        f'dsn = "{dsn}"', f'[admin]\nlisten = "127.0.0.1:{port}"\ntoken_file = "{token_file}"\n'
    )
    daemon.start()  # accepts only: what is submitted stays queued
    for i in range(6):
        status, answer = admin_call(port, "POST", "/v1/messages", {
            "from": "app@example.org", "to": [f"reader{i}@one.test", f"reader{i}@two.test"], "subject": f"n{i}",
            "text": "hello",
        }, TOKEN)  # fmt: skip
        assert status == 202, answer
    _, by_state = admin_call(port, "GET", "/v1/queue/summary?by=state", token=TOKEN)
    assert by_state["total"]["total"] == 12

    with chromium(tmp_path / "profile") as driver:
        wait = WebDriverWait(driver, 30)
        driver.get(f"http://127.0.0.1:{port}/")
        wait.until(shown.visibility_of_element_located((By.ID, "login")))
        driver.find_element(By.ID, "token").send_keys("not-the-admin-token-at-all")
        driver.find_element(By.ID, "login-submit").click()
        wait.until(shown.text_to_be_present_in_element((By.ID, "login-error"), "Wrong token"))
        assert driver.get_cookie("mtad_admin") is None
        assert not driver.find_element(By.ID, "status").is_displayed()

        driver.find_element(By.ID, "token").clear()
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "login-submit").click()
        wait.until(shown.visibility_of_element_located((By.ID, "status")))
        cookie = driver.get_cookie("mtad_admin")
        assert cookie is not None
        assert cookie["httpOnly"]
        assert cookie["sameSite"] == "Strict"
        assert not cookie["secure"]  # plain HTTP here
        assert TOKEN not in cookie["value"]
        assert _with_cookie(port, "GET", "/v1/queue/summary", cookie["value"]) == 200
        assert _with_cookie(port, "POST", "/v1/tenants/default/pause", cookie["value"]) == 401  # no change by cookie

        total = wait.until(lambda d: d.find_element(By.ID, "queue-total").get_attribute("data-total") or None)
        _, overview = admin_call(port, "GET", "/v1/queue/overview", token=TOKEN)
        assert total == str(overview["total"]["total"]) == str(by_state["total"]["total"]) == "12"
        assert (
            _counted(driver, "#queue-states li", "data-state")
            == {line["key"]: str(line["total"]) for line in by_state["lines"]}
            == {"queued": "12"}
        )
        _, by_group = admin_call(port, "GET", "/v1/queue/summary?by=provider", token=TOKEN)
        assert (
            _counted(driver, "#queue-groups tbody tr", "data-group")
            == {line["key"]: str(line["total"]) for line in by_group["lines"]}
            == {"-": "12"}
        )
        assert "test-node" in driver.find_element(By.ID, "node-list").text
        assert "live" in driver.find_element(By.ID, "node-list").text

        paused = daemon.cli("tenants", "pause", "default", "--reason", "seen on the page")
        assert paused.returncode == 0, paused.stderr
        held = wait.until(shown.presence_of_element_located((By.CSS_SELECTOR, '#held-list li[data-tenant="default"]')))
        assert "PAUSED" in held.text
        assert "seen on the page" in held.text

        driver.save_screenshot(str(tmp_path / "status-page.png"))
        said = driver.get_log("browser")  # type: ignore[no-untyped-call]
    assert (tmp_path / "status-page.png").stat().st_size > 0
    unexpected = [e for e in said if e["level"] in ("SEVERE", "WARNING") and not EXPECTED.search(e["message"])]
    assert not unexpected, unexpected
    assert daemon.stop() == 0
