"""Retention through `mtad run`: a short [retention] prunes delivered mail while the
daemon runs, and `mtad queue purge` removes now what is done with."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.policy import SMTP
from typing import Any

import pytest

from tests import pg
from tests.mail import email
from tests.running import Mtad
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow]


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    with ThreadedSink(("127.0.0.2",)) as started:
        yield started


def delivering(sink: ThreadedSink, retention: str) -> dict[str, str]:
    """write_config options: deliver to the sink over a static route; a temporary
    failure waits an hour, so its message stays pending."""
    return {
        "delivery": f'enabled = true\nport = {sink.port}\nretry = "1h"\npoll_interval = "250ms"\n'
        'lease_duration = "8s"\nshutdown_timeout = "10s"',
        "extra": f'[routes."sink.test"]\nrelay = "127.0.0.2:{sink.port}"\n[retention]\n{retention}\n',
    }


def submit(daemon: Mtad, *recipients: str) -> None:
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for recipient in recipients:
            client.sendmail("app@example.org", [recipient], email(f"to {recipient}").as_bytes(policy=SMTP))


def outcomes(daemon: Mtad, *events: str) -> int:
    return sum(1 for r in daemon.records if r.get("event") in events)


def test_a_short_retention_prunes_what_was_delivered_and_keeps_what_waits(
    mtad_factory: Any, dsn: str, sink: ThreadedSink
) -> None:
    retention = 'messages = "1s"\nevents = "1s"\ninterval = "200ms"\nbatch = 10'
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **delivering(sink, retention)).start()
    submit(daemon, *(f"ok-{i}@sink.test" for i in range(12)), "tempfail-1@sink.test")

    daemon.wait_for_log(lambda records: sum(r.get("messages", 0) for r in records if r["event"] == "pruned") >= 12)
    pruned = daemon.events("pruned")
    assert sum(r["messages"] for r in pruned) == 12
    assert sum(r["deliveries"] for r in pruned) == 12
    daemon.wait_for_log(lambda records: any(r["event"] == "pruned" and r["kept"] == 1 for r in records))
    left = pg.rows(dsn, "SELECT d.recipient, d.state::text FROM messages m JOIN deliveries d ON d.message = m.id")
    assert left == [{"recipient": "tempfail-1@sink.test", "state": "deferred"}]
    assert len(sink.received) == 12
    assert daemon.stop() == 0


def test_queue_purge_removes_now_what_is_done_and_counts_what_is_not(
    mtad_factory: Any, dsn: str, sink: ThreadedSink
) -> None:
    options = delivering(sink, "enabled = false")
    options["extra"] += '[tenants."default"]\ndsn = false\n'  # the bounce's report would be one more message
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **options).start()
    submit(daemon, "ok-1@sink.test", "ok-2@sink.test", "reject-1@sink.test", "tempfail-1@sink.test")
    daemon.wait_for_log(lambda _: outcomes(daemon, "delivered", "bounced", "deferred") >= 4)

    refused = daemon.cli("queue", "purge", "--before", "yesterday")
    assert refused.returncode == 2
    assert "--before" in refused.stderr
    assert "expected an ISO date or time" in refused.stderr

    purged = daemon.cli("queue", "purge", "--before", "0s", "--reindex")
    assert purged.returncode == 0, purged.stderr
    assert "3 messages with 3 deliveries" in purged.stdout
    assert "kept 1 messages" in purged.stdout
    assert "database size:" in purged.stdout
    assert "before the VACUUM and REINDEX" in purged.stdout
    left = pg.rows(dsn, "SELECT d.recipient FROM messages m JOIN deliveries d ON d.message = m.id")
    assert left == [{"recipient": "tempfail-1@sink.test"}]
    events = pg.rows(dsn, "SELECT count(*) AS n FROM events")
    assert events == [{"n": 0}]
    assert daemon.stop() == 0
