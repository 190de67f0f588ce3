"""A campaign through `mtad run` and the command line: its progress stays exact
through a kill -9 (sends on the wire) and a restart, equal to what the spool
holds; a pause from the command line holds its new mail until resumed."""

from __future__ import annotations

import json
import smtplib
from typing import Any

import pytest

from tests import pg, waiting
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.running import Mtad, delivering
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]
MESSAGES = 400
SLOW = (7, 77, 377)  # sent, and still waiting for the reply to their data at the kill
BODY = b"From: app@example.org\r\nX-Mtad-Campaign: spring\r\nSubject: spring\r\n\r\nHello.\r\n"


def shown(node: Mtad) -> dict[str, Any]:
    done = node.cli("campaigns", "show", "spring", "--json")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def scanned(dsn: str) -> dict[str, int]:
    rows = pg.rows(dsn, "SELECT mtad_campaign_bucket(state, reason) AS bucket, count(*) AS n FROM deliveries "
                        "WHERE campaign IS NOT NULL GROUP BY 1")  # fmt: skip
    return {r["bucket"]: r["n"] for r in rows}


def test_a_campaigns_progress_is_exact_through_kill_9_and_a_pause_holds_it(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink
) -> None:
    node = mtad_factory(f'dsn = "{dsn}"', **delivering(dns, sink, max_age='"10m"')).start()
    with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
        for n in range(MESSAGES):
            kind = "550-" if n % 10 == 0 else "slow-" if n in SLOW else ""
            client.sendmail("app@example.org", [f"{kind}r{n}@sink.test"], BODY)
    sink.wait_for(MESSAGES - MESSAGES // 10 - len(SLOW))  # all but the refused and the slow ones
    node.kill()  # the slow ones on the wire, their replies held
    sink.release()
    node.start()
    progress = waiting.eventually(lambda: shown(node), lambda got: got["done"], within=120)
    assert (progress["messages"], progress["deliveries"]) == (MESSAGES, MESSAGES)
    assert (progress["delivered"], progress["bounced"]) == (MESSAGES - MESSAGES // 10, MESSAGES // 10)
    assert progress["bounced_by_reason"] == {"recipient_rejected": MESSAGES // 10}
    assert scanned(dsn) == {"delivered": MESSAGES - MESSAGES // 10, "bounced:recipient_rejected": MESSAGES // 10}
    assert progress["ends_at"] is None

    paused = node.cli("campaigns", "pause", "spring", "--reason", "checking")
    assert paused.returncode == 0, paused.stderr
    assert "held on 1 of 1 live node (test-node)" in paused.stdout
    with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["late@sink.test"], BODY)
    waiting.eventually(lambda: pg.rows(dsn, "SELECT 1 FROM deliveries WHERE recipient = 'late@sink.test' "
                                            "AND state = 'queued' AND next_attempt_at = 'infinity'"))  # fmt: skip
    listed = node.cli("campaigns", "ls").stdout
    assert "paused" in next(line for line in listed.splitlines() if "spring" in line)
    assert "late@sink.test" not in {r for m in sink.received for r in m.recipients}
    resumed = node.cli("campaigns", "resume", "spring")
    assert resumed.returncode == 0, resumed.stderr
    assert "1 deliveries due now" in resumed.stdout
    sink.wait_until(lambda got: any("late@sink.test" in m.recipients for m in got), within=30)
    after = waiting.eventually(lambda: shown(node), lambda got: got["delivered"] == MESSAGES - MESSAGES // 10 + 1)
    assert (after["state"], after["messages"]) == ("active", MESSAGES + 1)
    text = node.cli("campaigns", "show", "spring").stdout
    assert f"{MESSAGES + 1} of {MESSAGES + 1} deliveries settled" in text

    made = node.cli("campaigns", "add", "autumn")
    assert made.returncode == 0, made.stderr
    assert node.cli("campaigns", "add", "autumn").returncode == 1  # exists
    assert node.cli("campaigns", "add", "no/slash").returncode == 2  # not a name
    assert node.cli("campaigns", "pause", "autumn").returncode == 0
    with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["never@sink.test"], BODY.replace(b"spring", b"autumn"))
    cancelled = node.cli("campaigns", "cancel", "autumn")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "1 deliveries cancelled" in cancelled.stdout
    assert shown(node)["state"] == "active"  # spring's
    assert node.stop() == 0
    assert "never@sink.test" not in {r for m in sink.received for r in m.recipients}
