"""What comes back, through `mtad run`: mail leaves with a VERP sender and a one-click
link; a DSN to the VERP address on the inbound listener bounces the delivery and
suppresses the recipient; a click on the link unsubscribes; a relay attempt on the
inbound listener is refused. Soft bounces suppress once repeated `soft_after`
times; a delay notice and a DMARC failure report suppress nothing."""

from __future__ import annotations

import json
import os
import re
import smtplib
import urllib.error
import urllib.request
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from tests import pg, waiting
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.mail import email
from tests.reports import arf
from tests.reports import dsn as bounce_report
from tests.running import Mtad, delivering, free_port, hearing
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]


def test_bounces_complaints_and_unsubscribes_come_back(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink, tmp_path: Path
) -> None:
    inbound, heard = hearing(tmp_path)
    web, key = free_port(), tmp_path / "unsubscribe.key"
    key.write_bytes(os.urandom(32).hex().encode())
    options = delivering(dns, sink)
    options["extra"] += heard + (
        f'[unsubscribe]\nlisten = ["127.0.0.1:{web}"]\nurl = "https://unsub.example.org"\n'
        f'key_file = "{key}"\n[tenants."default"]\nlist_unsubscribe = true\n'
    )
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **options).start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["gone@sink.test", "reader@sink.test"],
                        email("news", "<news-1@example.org>").as_bytes(policy=SMTP))  # fmt: skip
    received = {m.recipients[0]: m for m in sink.wait_for(2)}
    assert sorted(received) == ["gone@sink.test", "reader@sink.test"]  # a transaction each
    gone = received["gone@sink.test"]
    assert re.fullmatch(r"b-[0-9a-f]+-[a-z2-7]{16}@bounces\.example\.org", gone.sender)
    link = re.search(rb"List-Unsubscribe: <https://unsub\.example\.org(/unsubscribe/[A-Za-z0-9_-]+)>",
                     received["reader@sink.test"].data)  # fmt: skip
    assert link is not None

    # A bounce comes back after the delivery is recorded (the sink's 250 comes first).
    waiting.eventually(lambda: pg.rows(dsn, "SELECT 1 FROM deliveries WHERE state = 'delivered'"),
                       lambda delivered: len(delivered) >= 2)  # fmt: skip
    # The inbound listener takes the bounce to the VERP address, and refuses to relay.
    with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as client:
        report = bounce_report("gone@sink.test", "<news-1@example.org>", to=gone.sender)
        client.sendmail("", [gone.sender], report.replace(b"\n", b"\r\n"))  # smtplib sends bytes as they are
        client.mail("someone@example.net")
        code, text = client.rcpt("victim@example.com")
        assert (code, text[:5]) == (550, b"5.7.1")
    # One click on the reader's link.
    url = f"http://127.0.0.1:{web}{link.group(1).decode()}"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert b'name="List-Unsubscribe" value="One-Click"' in response.read()  # a form that posts the pair
    one_click = b"List-Unsubscribe=One-Click"
    with urllib.request.urlopen(urllib.request.Request(url, data=one_click, method="POST"), timeout=10) as response:
        assert response.status == 200
    tampered = urllib.request.Request(f"http://127.0.0.1:{web}/unsubscribe/AAAA", data=one_click, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(tampered, timeout=10)
    assert refused.value.code == 400
    refused.value.close()

    # The consumer suppresses both; the bounced delivery's outcome moved.
    rows = waiting.eventually(lambda: pg.rows(dsn, "SELECT address, reason FROM suppressions ORDER BY address"),
                              lambda rows: len(rows) >= 2)  # the daemon's consumer writes them  # fmt: skip
    found = [(r["address"], r["reason"]) for r in rows]
    assert found == [("gone@sink.test", "hard_bounce"), ("reader@sink.test", "unsubscribe")]
    listed = [json.loads(line) for line in daemon.cli("suppress", "ls", "--json").stdout.splitlines()]
    assert {e["address"] for e in listed} == {"gone@sink.test", "reader@sink.test"}
    [row] = pg.rows(dsn, "SELECT state::text, reason::text FROM deliveries WHERE recipient = 'gone@sink.test'")
    assert (row["state"], row["reason"]) == ("bounced", "async_bounce")
    bounced = daemon.cli("events", "tail", "--json", "--kind", "bounced").stdout.splitlines()
    assert json.loads(bounced[-1])["data"]["async"] is True
    assert daemon.stop() == 0


def handled(dsn_: str, consumer: str, kinds: tuple[str, ...]) -> bool:
    """Whether `consumer` has passed the last event of `kinds` written so far."""
    return not pg.rows(dsn_, "SELECT 1 FROM events e JOIN event_consumers c ON c.name = $1 WHERE e.kind = ANY ($2) "
                           "AND e.xid IS NOT NULL AND (e.xid, e.id) > (c.position_xid, c.position_id)",
                     consumer, list(kinds))  # fmt: skip


def test_a_soft_bounce_repeated_suppresses_and_an_auth_failure_report_does_not(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink, tmp_path: Path
) -> None:
    inbound, heard = hearing(tmp_path)
    options = delivering(dns, sink)
    options["extra"] += heard + '[suppression]\nsoft_after = 3\nsoft_window = "30d"\n'
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **options).start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["full@sink.test", "dmarc@sink.test"],
                        email("news 1", "<news-1@example.org>").as_bytes(policy=SMTP))  # fmt: skip
        for n in (2, 3):
            client.sendmail("app@example.org", ["full@sink.test"],
                            email(f"news {n}", f"<news-{n}@example.org>").as_bytes(policy=SMTP))  # fmt: skip
    senders = [m.sender for m in sink.wait_for(4) if m.recipients == ["full@sink.test"]]
    [dmarc] = [m.sender for m in sink.wait_for(4) if m.recipients == ["dmarc@sink.test"]]
    assert len(senders) == 3  # a VERP address each
    waiting.eventually(lambda: pg.rows(dsn, "SELECT 1 FROM deliveries WHERE state = 'delivered'"),
                       lambda delivered: len(delivered) >= 4)  # fmt: skip

    def report(raw: bytes, to: str, sender: str = "") -> None:
        with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as client:
            client.sendmail(sender, [to], raw.replace(b"\n", b"\r\n"))

    full = {"status": "5.2.2", "diagnostic": "smtp; 552 5.2.2 Mailbox full"}
    # A DMARC failure report, a delay notice and two failures: nothing is suppressed yet.
    report(arf("dmarc@sink.test", "<news-1@example.org>", feedback_type="auth-failure", sender=f"<{dmarc}>"),
           "fbl@bounces.example.org", "feedback@fbl.example.net")  # fmt: skip
    report(bounce_report("full@sink.test", "<news-1@example.org>", to=senders[0], action="delayed",
                         status="4.2.2", diagnostic="smtp; 452 4.2.2 Mailbox full"), senders[0])  # fmt: skip
    for sender in senders[:2]:
        report(bounce_report("full@sink.test", "<x@y>", to=sender, **full), sender)
    waiting.eventually(lambda: handled(dsn, "suppression", ("bounced",)))  # and so the report before them
    assert pg.rows(dsn, "SELECT address FROM suppressions") == []
    # The third failure within the window suppresses.
    report(bounce_report("full@sink.test", "<x@y>", to=senders[2], **full), senders[2])
    rows = waiting.eventually(lambda: pg.rows(dsn, "SELECT address, reason FROM suppressions"))
    assert [(r["address"], r["reason"]) for r in rows] == [("full@sink.test", "soft_bounce")]
    states = pg.rows(dsn, "SELECT state::text, reason::text FROM deliveries WHERE recipient = 'full@sink.test'")
    assert [(r["state"], r["reason"]) for r in states] == [("bounced", "async_bounce")] * 3
    [failure] = pg.rows(dsn, "SELECT data FROM events WHERE kind = 'auth_failure'")
    assert json.loads(failure["data"])["feedback_type"] == "auth-failure"
    [first] = pg.rows(dsn, "SELECT id FROM messages WHERE message_id = '<news-1@example.org>'")
    shown = daemon.cli("queue", "show", str(first["id"]))
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split("\ndeliveries:\n", 1)[1].split("\nevents:\n", 1)[0]
    [line] = [x for x in listed.splitlines() if "full@sink.test" in x]
    assert line.split()[2:3] == ["bounced"]
    assert "mailboxfull  5.2.2" in line, shown.stdout
    assert daemon.stop() == 0
