"""The warm-up gate hears complaints, through `mtad run`: two new addresses send to
the sink, a complaint about the mail of one comes back to the inbound listener
and reaches its warm-up day within a checkpoint; when the day is over, that
address repeats its day and the other advances."""

from __future__ import annotations

import smtplib
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from tests import pg, waiting
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.mail import email
from tests.reports import arf
from tests.running import Mtad, delivering, hearing
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]

COMPLAINED, CLEAN = "127.0.0.10", "127.0.0.11"  # each the one warming address of its pool


def test_a_warming_address_complained_about_repeats_its_day_and_a_clean_one_advances(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink, tmp_path: Path
) -> None:
    inbound, heard = hearing(tmp_path)
    options = delivering(dns, sink, checkpoint_interval='"500ms"')
    options["extra"] += heard + (
        f'[pools.a]\naddresses = ["{COMPLAINED}"]\nwarming = ["{COMPLAINED}"]\n'
        f'[pools.b]\naddresses = ["{CLEAN}"]\nwarming = ["{CLEAN}"]\n'
    )
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **options).start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for pool in ("a", "b"):
            for n in range(4):
                message = email(f"news {pool}{n}", f"<{pool}{n}@example.org>")
                message["X-Mtad-Pool"] = pool
                client.sendmail("app@example.org", [f"{pool}{n}@sink.test"], message.as_bytes(policy=SMTP))
    assert sorted(m.peer for m in sink.wait_for(8)) == [COMPLAINED] * 4 + [CLEAN] * 4
    waiting.eventually(
        lambda: pg.rows(dsn, "SELECT 1 FROM deliveries WHERE state = 'delivered'"), lambda rows: len(rows) == 8
    )

    # One complaint about the mail of the first address: its day hears it at a checkpoint. The
    # original's Return-Path is the delivery's VERP address, as a feedback loop encloses it.
    verp = next(m.sender for m in sink.wait_for(8) if m.recipients == ["a0@sink.test"])
    with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as client:
        report = arf("a0@sink.test", "<a0@example.org>", sender=None, return_path=f"<{verp}>").replace(b"\n", b"\r\n")
        client.sendmail("", ["fbl@bounces.example.org"], report)
    heard = waiting.eventually(lambda: pg.rows(dsn, "SELECT address, provider, day, sent, complaints FROM warmup "
                                                   "ORDER BY address"),
                               lambda rows: len(rows) == 2 and rows[0]["complaints"] == 1)  # fmt: skip
    assert [tuple(r.values()) for r in heard] == [
        (COMPLAINED, heard[0]["provider"], 1, 4, 1),
        (CLEAN, heard[0]["provider"], 1, 4, 0),
    ]
    assert daemon.stop() == 0

    # A day later (the clock moved by the stored times): the day is over when it starts again.
    pg.rows(dsn, "UPDATE warmup SET day_started = day_started - interval '1 day'")
    pg.rows(dsn, "UPDATE warmup_complaints SET minute = minute - interval '1 day'")
    daemon.start()
    daemon.wait_for_log(lambda records: len([r for r in records if r["event"] == "warmup_day_ended"]) == 2)
    ended = {r["address"]: r for r in daemon.events("warmup_day_ended")}
    assert (ended[COMPLAINED]["next_day"], ended[COMPLAINED]["complaints"]) == (1, 1)
    assert ended[COMPLAINED]["refused"] == "complaint rate 0.2500 is not under 0.003"
    assert (ended[CLEAN]["next_day"], ended[CLEAN]["refused"]) == (2, None)
    days = waiting.eventually(lambda: pg.rows(dsn, "SELECT address, day, sent, complaints FROM warmup "
                                                  "ORDER BY address"),
                              lambda rows: [r["day"] for r in rows] == [1, 2])  # fmt: skip
    assert [(r["sent"], r["complaints"]) for r in days] == [(0, 0), (0, 0)]  # a new day, counted afresh
    assert daemon.stop() == 0
