"""Webhooks through `mtad run` and `mtad webhooks`: an endpoint added from the
command line gets the tenant's events, signed so that the standardwebhooks package
verifies them; a test event on demand; a replay."""

from __future__ import annotations

import json
import smtplib
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from tests.hooks import Receiver
from tests.mail import email
from tests.running import Mtad

pytestmark = pytest.mark.slow


def test_a_tenant_hears_of_its_mail_by_webhook(mtad_factory: Any, dsn: str, tmp_path: Path, receiver: Receiver) -> None:
    (tmp_path / "accounts.key").write_text(mtad_factory(f'dsn = "{dsn}"').cli("accounts", "key").stdout)
    extra = (f'[accounts]\nkey_file = "{tmp_path / "accounts.key"}"\n'
             '[webhooks]\nallow_networks = ["127.0.0.0/8"]\npoll = "200ms"\n')  # fmt: skip
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', extra).start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/mtad"
    added = daemon.cli("webhooks", "add", "default", url, "--events", "received")
    assert added.returncode == 0, added.stderr
    secret = added.stdout.rsplit(": ", 1)[1].strip()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["someone@example.net"], email("hello").as_bytes(policy=SMTP))
    [(headers, body)] = receiver.wait_for(["received"])
    event = Webhook(secret).verify(body, headers)
    assert (event["data"]["tenant"], event["data"]["sender"]) == ("default", "app@example.org")

    tested = daemon.cli("webhooks", "test", "1")
    assert (tested.returncode, tested.stdout.strip()) == (0, f"webhook endpoint 1 ({url}) took the test event")
    replayed = daemon.cli("webhooks", "replay", "default", "--since", "1h")
    assert replayed.stdout.strip() == "1 webhook request(s) written for tenant default; the running nodes send them"
    got = receiver.wait_for(["received", "test", "received"])
    [listed] = [json.loads(line) for line in daemon.cli("webhooks", "ls", "--json").stdout.splitlines()]
    # The event and its replay (the test event is no request of the outbox); the last may not be recorded yet.
    assert (listed["delivered"] + listed["pending"], listed["dead"]) == (2, 0)
    assert json.loads(got[2][1])["data"]["event_id"] == event["data"]["event_id"]  # the same event again
    assert daemon.stop() == 0
