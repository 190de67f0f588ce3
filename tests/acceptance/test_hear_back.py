"""What comes back, through `mtad run`: mail leaves with a VERP sender and a one-click
link; a DSN to the VERP address on the inbound listener bounces the delivery and
suppresses the recipient; a click on the link unsubscribes; a relay attempt on the
inbound listener is refused."""

from __future__ import annotations

import json
import os
import re
import smtplib
import socket
import time
import urllib.error
import urllib.request
from email.policy import SMTP
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.acceptance.conftest import Mtad
from tests.acceptance.test_delivery import delivering, dns, sink  # noqa: F401 (fixtures)
from tests.acceptance.test_run import email
from tests.conftest import run_sync
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.sink import ThreadedSink
from tests.unit.test_reports import dsn as bounce_report

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query(dsn_: str, text: str, *args: Any) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn_)
        try:
            return list(await conn.fetch(text, *args))
        finally:
            await conn.close()

    return run_sync(run)


def test_bounces_complaints_and_unsubscribes_come_back(
    mtad_factory: Any,
    dsn: str,
    dns: Dnsmasq,  # noqa: F811
    sink: ThreadedSink,  # noqa: F811
    tmp_path: Path,
) -> None:
    inbound, web = free_port(), free_port()
    keys = {name: tmp_path / f"{name}.key" for name in ("bounces", "unsubscribe")}
    for path in keys.values():
        path.write_bytes(os.urandom(32).hex().encode())
    options = delivering(dns, sink)
    options["extra"] += (
        f'[bounces]\ndomain = "bounces.example.org"\nkey_file = "{keys["bounces"]}"\n'
        f'[inbound]\nlisten = ["127.0.0.1:{inbound}"]\ncomplaints = "fbl@bounces.example.org"\n'
        f'[unsubscribe]\nlisten = ["127.0.0.1:{web}"]\nurl = "https://unsub.example.org"\n'
        f'key_file = "{keys["unsubscribe"]}"\n[tenants."default"]\nlist_unsubscribe = true\n'
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
    deadline = time.monotonic() + 30
    while len(query(dsn, "SELECT 1 FROM deliveries WHERE state = 'delivered'")) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
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
    deadline = time.monotonic() + 30  # the daemon's consumer writes them: look until they are there
    while len(rows := query(dsn, "SELECT address, reason FROM suppressions ORDER BY address")) < 2:
        assert time.monotonic() < deadline, rows
        time.sleep(0.1)
    found = [(r["address"], r["reason"]) for r in rows]
    assert found == [("gone@sink.test", "hard_bounce"), ("reader@sink.test", "unsubscribe")]
    listed = [json.loads(line) for line in daemon.cli("suppress", "ls", "--json").stdout.splitlines()]
    assert {e["address"] for e in listed} == {"gone@sink.test", "reader@sink.test"}
    [row] = query(dsn, "SELECT state::text, reason::text FROM deliveries WHERE recipient = 'gone@sink.test'")
    assert (row["state"], row["reason"]) == ("bounced", "async_bounce")
    bounced = daemon.cli("events", "tail", "--json", "--kind", "bounced").stdout.splitlines()
    assert json.loads(bounced[-1])["data"]["async"] is True
    assert daemon.stop() == 0
