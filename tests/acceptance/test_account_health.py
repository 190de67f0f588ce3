"""A mailbox's health decides, through `mtad run`: an account pool with a health
floor relays through two mailboxes at a smarthost sink; a recipient refusal takes
the account that sent it below the floor, and it rests (an account_state event, a
log line, a metric, `mtad accounts ls`) until its health is back as the 24 hours
move on, while the other account sends the mail that follows."""

from __future__ import annotations

import json
import os
import smtplib
import urllib.request
from datetime import datetime, timedelta
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mtad.base import vault
from mtad.submission import tls_context
from tests import pg, waiting
from tests.acceptance.mailboxes import add_accounts
from tests.mail import email
from tests.running import Mtad
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow

NAMES = ["box0", "box1"]


def submit(port: int, recipient: str, subject: str) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        message = email(subject)
        message["X-Mtad-Account-Pool"] = "outreach"
        client.sendmail("app@example.org", [recipient], message.as_bytes(policy=SMTP))


def resting_changes(daemon: Mtad) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.http_port}/metrics", timeout=10) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    return sum(s.value for s in families["mtad_account_state_changes"].samples
               if s.name.endswith("_total") and s.labels == {"pool": "outreach", "state": "resting"})  # fmt: skip


def test_an_account_below_its_health_floor_rests_and_the_other_sends(
    mtad_factory: Any, dsn: str, tls_files: tuple[Path, Path], tmp_path: Path
) -> None:
    logins = {f"{name}@example.com": f"pw-{name}" for name in NAMES}
    key = vault.Vault.new_key()
    (tmp_path / "accounts.key").write_bytes(key)
    trusting = {**os.environ, "SSL_CERT_FILE": str(tls_files[0])}  # the smarthost's self-signed certificate
    with ThreadedSink(("127.0.0.1",), tls=tls_context(*tls_files), logins=logins) as smarthost:
        add_accounts(dsn, key, smarthost.port, NAMES)
        # A fresh account's first refusal takes it to 50: (0 sends + 1) / (0 sends + 1 + 1 bounce).
        extra = f'[accounts]\nkey_file = "{tmp_path / "accounts.key"}"\n[account_pools.outreach]\nhealth_floor = 60\n'
        delivery = 'enabled = true\npoll_interval = "250ms"\nlease_duration = "10s"\nshutdown_timeout = "10s"'
        daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, env=trusting, delivery=delivery).start()

        submit(daemon.smtp_port, "reject-1@example.net", "refused")  # 550 5.1.1 at RCPT
        [moved] = waiting.eventually(lambda: pg.rows(dsn, "SELECT at, data FROM events WHERE kind = 'account_state'"))
        state = json.loads(moved["data"])
        rested = state["name"]
        assert (state["from"], state["to"], state["health"], state["floor"]) == ("active", "resting", 50, 60)
        [bounce] = pg.rows(dsn, "SELECT at FROM events WHERE kind = 'account_bounce'")
        # Back at the floor when the bounce leaves the 24 hours: only then may it send again.
        assert datetime.fromisoformat(state["until"]) == bounce["at"] + timedelta(hours=24)
        daemon.wait_for_log(lambda records: any(r["event"] == "account_state_changed" and r["state"] == "resting"
                                                for r in records))  # fmt: skip
        assert resting_changes(daemon) == 1
        [shown] = [json.loads(line) for line in daemon.cli("accounts", "ls", "--json").stdout.splitlines()
                   if json.loads(line)["name"] == rested]  # fmt: skip
        assert (shown["state"], shown["health"], shown["reason"]) == (
            "resting",
            50,
            "health 50 is below the floor of 60",
        )

        # The mail that follows goes through the other account, while the first rests.
        for n in range(2):
            submit(daemon.smtp_port, f"reader{n}@example.net", f"news {n}")
        received = smarthost.wait_for(2)
        [other] = [name for name in NAMES if name != rested]
        assert [m.login for m in received] == [f"{other}@example.com"] * 2
        waiting.eventually(
            lambda: pg.rows(dsn, "SELECT 1 FROM deliveries WHERE state = 'delivered'"), lambda rows: len(rows) == 2
        )
        assert resting_changes(daemon) == 1  # rested once: it was not chosen again
        assert daemon.stop() == 0
