"""The admin API through `mtad run`: off without a token, on with one; a message
injected over HTTP is delivered like one submitted over SMTP; a token file that
will not do is refused naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import waiting
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.running import Mtad, admin_call, delivering, free_port
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]
TOKEN = "an-admin-token-of-the-acceptance-test"


def call(port: int, method: str, path: str, body: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
    return admin_call(port, method, path, body, token)


def test_a_message_injected_over_http_is_delivered(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink, tmp_path: Path
) -> None:
    token_file = tmp_path / "admin.token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    options = delivering(dns, sink)
    options["extra"] += f'[admin]\nlisten = "127.0.0.1:{port}"\ntoken_file = "{token_file}"\n'
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **options).start()
    assert daemon.ready is not None
    assert daemon.ready["admin"] == f"127.0.0.1:{port}"
    assert call(port, "GET", "/v1/queue", token=None)[0] == 401
    status, answer = call(port, "POST", "/v1/messages", {
        "from": "app@example.org", "to": ["reader@sink.test"], "subject": "over HTTP", "text": "hello",
    })  # fmt: skip
    assert status == 202, answer
    [received] = sink.wait_for(1)
    assert received.recipients == ["reader@sink.test"]
    assert b"Subject: over HTTP" in received.data
    waiting.eventually(lambda: call(port, "GET", f"/v1/queue/{answer['queue_id']}")[1]["deliveries"][0]["state"],
                       lambda state: state == "delivered")  # fmt: skip
    assert daemon.stop() == 0


def test_without_a_token_there_is_no_api_and_a_bad_token_file_is_refused(mtad_factory: Any, dsn: str,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"').start()
    assert daemon.ready is not None
    assert daemon.ready["admin"] is None
    assert daemon.stop() == 0
    short = tmp_path / "short.token"
    short.write_text("tiny")
    broken = mtad_factory(f'dsn = "{dsn}"', f'[admin]\ntoken_file = "{short}"\n')
    checked = broken.cli("check-config")
    assert checked.returncode != 0
    assert "[admin] token_file:" in checked.stderr + checked.stdout
