"""The status page of the admin listener through `mtad run`, in headless Chromium:
a wrong token is refused, the right one logs in (an HttpOnly, SameSite=Strict
cookie that reads the API but changes nothing), the page shows the queue's counts
as the API gives them, a tenant paused from the command line, and the rate of
what a delivering node sent as /v1/rate counts it, with no JavaScript error in
the console."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as shown
from selenium.webdriver.support.ui import WebDriverWait

from tests import waiting
from tests.browser import chromium
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.running import Mtad, admin_call, delivering, free_port
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow
TOKEN = "an-admin-token-of-the-page-test"
# What the browser's console may say: the API's 401 before the login and at the
# wrong token, and the 404 of /v1/campaigns where no campaign route is (yet).
EXPECTED = re.compile(r"/v1/\S+ - Failed to load resource: .* 401|/page/login - Failed to load resource: .* 401"
                      r"|/v1/campaigns - Failed to load resource: .* 404")  # fmt: skip


def _admin(tmp_path: Path) -> tuple[int, str]:
    """A free port for the admin listener and its [admin] table, the token in tmp_path."""
    token_file = tmp_path / "admin.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    return port, f'[admin]\nlisten = "127.0.0.1:{port}"\ntoken_file = "{token_file}"\n'


def _log_in(driver: WebDriver, port: int) -> WebDriverWait[WebDriver]:
    wait: WebDriverWait[WebDriver] = WebDriverWait(driver, 30)
    driver.get(f"http://127.0.0.1:{port}/")
    wait.until(shown.visibility_of_element_located((By.ID, "login")))
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.ID, "login-submit").click()
    wait.until(shown.visibility_of_element_located((By.ID, "status")))
    return wait


def _unexpected(driver: Chrome) -> list[dict[str, Any]]:
    """What the console said beyond the EXPECTED."""
    said = driver.get_log("browser")  # type: ignore[no-untyped-call]
    return [e for e in said if e["level"] in ("SEVERE", "WARNING") and not EXPECTED.search(e["message"])]


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
        wait: WebDriverWait[WebDriver] = WebDriverWait(driver, 30)
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
        assert not _unexpected(driver)
    assert (tmp_path / "status-page.png").stat().st_size > 0
    assert daemon.stop() == 0


@NEEDS_DNSMASQ
def test_the_page_shows_the_rate_of_what_was_delivered(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink, tmp_path: Path
) -> None:
    port, admin = _admin(tmp_path)
    options = delivering(dns, sink)
    options["extra"] += admin
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **options).start()
    for i in range(5):
        status, answer = admin_call(port, "POST", "/v1/messages", {
            "from": "app@example.org", "to": [f"reader{i}@sink.test"], "subject": f"n{i}", "text": "hello",
        }, TOKEN)  # fmt: skip
        assert status == 202, answer
    sink.wait_for(5)
    rate = waiting.eventually(lambda: admin_call(port, "GET", "/v1/rate", token=TOKEN)[1],
                              lambda r: sum(m["delivered"] for m in r["minutes"]) == 5)  # fmt: skip
    with chromium(tmp_path / "profile") as driver:
        wait = _log_in(driver, port)
        wait.until(shown.text_to_be_present_in_element((By.ID, "rate-hour"), "5"))
        lines = driver.find_elements(By.CSS_SELECTOR, "#rate-chart polyline")
        assert [line.get_attribute("class") for line in lines] == ["delivered", "deferred", "bounced"]
        points = [p.split(",") for p in (lines[0].get_attribute("points") or "").split()]
        assert len(points) == 60  # a point a minute, the minutes with none at 0
        assert min(float(y) for _, y in points) == 4  # the busiest minute at the top (100 - 96)
        assert [m["delivered"] for m in rate["minutes"]] in ([5], [4, 1], [3, 2], [2, 3], [1, 4])
        assert not _unexpected(driver)
    assert daemon.stop() == 0


def test_the_page_shows_a_campaign_paused_from_the_command_line(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    port, admin = _admin(tmp_path)
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', admin).start()  # accepts only: the campaign keeps waiting
    for i in range(4):
        status, answer = admin_call(port, "POST", "/v1/messages", {
            "from": "app@example.org", "to": [f"reader{i}@one.test"], "subject": f"n{i}", "text": "hello",
            "campaign": "spring",
        }, TOKEN)  # fmt: skip
        assert status == 202, answer
    with chromium(tmp_path / "profile") as driver:
        wait = _log_in(driver, port)
        row = '#campaign-list tr[data-campaign="spring"]'
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute("data-label") == "SENDING")
        _, listed = admin_call(port, "GET", "/v1/campaigns", token=TOKEN)
        [spring] = listed["campaigns"]
        assert driver.find_element(By.CSS_SELECTOR, row).text.split()[-4:-2] == [str(spring["queued"]),
                                                                                 str(spring["deliveries"])]  # fmt: skip
        paused = daemon.cli("campaigns", "pause", "spring")
        assert paused.returncode == 0, paused.stderr
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute("data-label") == "PAUSED")
        driver.save_screenshot(str(tmp_path / "campaign-paused.png"))
        assert not _unexpected(driver)
    assert daemon.stop() == 0
