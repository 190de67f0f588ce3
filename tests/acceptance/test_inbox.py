"""The sending mailboxes' inboxes, through `mtad run` and `mtad accounts`: mail
relayed through a mailbox bounces into its inbox (Dovecot), and a recipient
replies there; mtad reads both over IMAP, suppresses the bounced address, lowers
the mailbox's health and records the reply."""

from __future__ import annotations

import json
import smtplib
from collections.abc import Iterator
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from mtad.base import vault
from mtad.submission import tls_context
from tests import imap, pg, waiting
from tests.mail import email
from tests.reports import dsn as bounce_report
from tests.running import Mtad
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, pytest.mark.skipif(imap.missing() is not None, reason=str(imap.missing()))]

ALICE = "alice@example.org"


@pytest.fixture
def dovecot(tls_files: tuple[Path, Path]) -> Iterator[imap.Dovecot]:
    server = imap.Dovecot(tls_files)  # the smarthost's certificate: the pool's one CA file trusts both
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_bounces_and_replies_come_back_to_the_sending_mailbox(
    mtad_factory: Any, dsn: str, tls_files: tuple[Path, Path], dovecot: imap.Dovecot, tmp_path: Path
) -> None:
    dovecot.user(ALICE, "pw")
    (tmp_path / "accounts.key").write_bytes(vault.Vault.new_key())
    extra = (f'[accounts]\nkey_file = "{tmp_path / "accounts.key"}"\n'
             f'[account_pools.outreach]\nca_file = "{tls_files[0]}"\n')  # fmt: skip
    delivery = 'enabled = true\npoll_interval = "250ms"\nlease_duration = "10s"\nshutdown_timeout = "10s"'
    with ThreadedSink(("127.0.0.1",), tls=tls_context(*tls_files), logins={ALICE: "pw"}) as smarthost:
        cli: Mtad = mtad_factory(f'dsn = "{dsn}"', extra)
        added = cli.cli("accounts", "add", "alice", "--address", ALICE, "--pool", "outreach", "--host", "localhost",
                        "--port", str(smarthost.port), "--login", ALICE, "--imap-host", "localhost",
                        "--imap-port", str(dovecot.port), stdin="pw\n")  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert f"its inbox is read at localhost:{dovecot.port}" in added.stdout
        gmail = cli.cli("accounts", "add", "bob", "--address", "bob@example.org", "--pool", "outreach", "--host",
                        "smtp.gmail.com", "--login", "bob@example.org", stdin="pw\n")  # fmt: skip
        assert "its inbox is read at imap.gmail.com:993" in gmail.stdout
        assert cli.cli("accounts", "disable", "bob").returncode == 0  # it sends nothing here
        assert cli.cli("accounts", "inbox", "bob", "--imap-host", "none").stdout.strip() == (
            "account bob: its inbox is no longer read"
        )
        bad_port = cli.cli("accounts", "inbox", "bob", "--imap-host", "imap.example.org", "--imap-port", "0")
        assert bad_port.returncode == 2
        assert "expected a port 1-65535" in bad_port.stderr

        daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, delivery=delivery).start()
        with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
            for recipient, message_id in (("gone@example.net", "<m1@example.org>"),
                                          ("friend@example.net", "<m2@example.org>")):  # fmt: skip
                message = email("relayed", message_id)
                message["X-Mtad-Account-Pool"] = "outreach"
                client.sendmail("app@example.org", [recipient], message.as_bytes(policy=SMTP))
        assert len(smarthost.wait_for(2)) == 2
        waiting.eventually(lambda: pg.rows(dsn, "SELECT 1 FROM deliveries WHERE state = 'delivered'"),
                           lambda delivered: len(delivered) >= 2)  # fmt: skip

    # Back in the mailbox: a DSN that quotes the original's headers, and a person's reply.
    dovecot.deliver(ALICE, bounce_report("gone@example.net", "<m1@example.org>", to=ALICE))
    reply = (b"From: Friend <friend@example.net>\nTo: alice@example.org\nSubject: Re: relayed\n"
             b"In-Reply-To: <m2@example.org>\nMessage-ID: <re-1@example.net>\n\nThanks, will do.\n")  # fmt: skip
    dovecot.deliver(ALICE, reply)
    daemon.wait_for_log(lambda records: sum(1 for r in records if r.get("event") == "inbox_message"
                                            and r.get("outcome") == "recorded") == 2)  # fmt: skip
    waiting.eventually(lambda: pg.rows(dsn, "SELECT 1 FROM suppressions WHERE address = 'gone@example.net'"))
    [row] = pg.rows(dsn, "SELECT state::text, reason::text FROM deliveries WHERE recipient = 'gone@example.net'")
    assert (row["state"], row["reason"]) == ("bounced", "async_bounce")
    [suppressed] = pg.rows(dsn, "SELECT reason FROM suppressions WHERE address = 'gone@example.net'")
    assert suppressed["reason"] == "hard_bounce"
    tail = daemon.cli("events", "tail", "--json", "--kind", "replied")
    replied = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [(e["data"]["recipient"], e["data"]["via"], e["data"]["account"]) for e in replied] == [
        ("friend@example.net", "inbox", "alice")
    ]
    shown = json.loads(daemon.cli("accounts", "show", "alice", "--json").stdout)
    assert shown["inbox"] == f"localhost:{dovecot.port}"
    assert shown["inbox_read_at"] is not None
    assert shown["inbox_error"] is None
    assert shown["health"] < 100  # the mailbox sent to an address that takes no mail
    assert all(flags == "" for flags in dovecot.flags(ALICE))  # nothing marked as read
    assert daemon.stop() == 0
