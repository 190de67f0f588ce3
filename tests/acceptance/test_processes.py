"""Submission processes: `mtad run` with [submission] processes = 2 serves the port
from two child processes, hands what they accept to its delivery over the fast
path, adds their counts to /metrics, starts a child that dies again, and takes
its children along when it stops or is killed."""

from __future__ import annotations

import base64
import os
import re
import signal
import smtplib
import threading
from collections.abc import Iterator
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.mail import email
from tests.pids import wait_exit
from tests.running import Mtad, http_get
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow

PROCESSES = "check_recipient_domains = false\nprocesses = 2\nauth_max_failures = 3"


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    with ThreadedSink(("127.0.0.2",)) as started:
        yield started


def delivering(sink: ThreadedSink) -> dict[str, str]:
    return {
        "submission": PROCESSES,
        "delivery": f'enabled = true\nport = {sink.port}\npoll_interval = "250ms"\nshutdown_timeout = "10s"',
    }


def children(daemon: Mtad) -> dict[int, int]:
    """Submission process number -> pid, of the latest start of each."""
    return {r["process"]: r["pid"] for r in daemon.events("submission_process_ready")}


def metric(daemon: Mtad, name: str) -> float:
    status, text = http_get(daemon.http_port, "/metrics")
    assert status == 200
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def submit_in_parallel(port: int, first: int, count: int, connections: int = 4) -> None:
    """count messages over `connections` sessions at once (the kernel spreads them over the children)."""

    def send(offset: int) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
            for n in range(first + offset, first + count, connections):
                message = email(f"message {n}", f"<m{n}@example.org>").as_bytes(policy=SMTP)
                client.sendmail("app@example.org", ["someone@example.com"], message)

    threads = [threading.Thread(target=send, args=(offset,)) for offset in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def test_two_processes_serve_the_port_and_hand_their_mail_to_delivery(
    mtad_factory: Any, dsn: str, sink: ThreadedSink
) -> None:
    route = f'[routes."example.com"]\nrelay = "127.0.0.2:{sink.port}"'
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', route, **delivering(sink)).start()
    assert daemon.ready is not None
    assert daemon.ready["processes"] == 2
    first = children(daemon)
    assert sorted(first) == [1, 2]
    assert daemon.process is not None
    assert daemon.process.pid not in first.values()

    submit_in_parallel(daemon.smtp_port, 0, 40)
    assert len(sink.wait_for(40)) == 40
    daemon.wait_for_log(lambda records: sum(r.get("event") == "delivered" for r in records) == 40)
    # Every delivery went by the fast path: leased at accept, handed over, none leased by a query.
    assert metric(daemon, "mtad_delivery_leased_total") == 0
    assert metric(daemon, "mtad_submission_accepted_messages_total") == 40  # both children's counts
    assert pg.rows(dsn, "SELECT count(*) AS n FROM deliveries WHERE state = 'delivered'") == [{"n": 40}]

    # A child that dies is started again; what it counted stays counted.
    os.kill(first[1], signal.SIGKILL)
    daemon.wait_for_log(lambda records: any(r.get("event") == "submission_process_exited" for r in records))
    daemon.wait_for_log(lambda records: children(daemon)[1] != first[1])
    assert children(daemon)[2] == first[2]
    assert metric(daemon, "mtad_submission_accepted_messages_total") == 40
    submit_in_parallel(daemon.smtp_port, 40, 20)
    assert len(sink.wait_for(60)) == 60
    assert metric(daemon, "mtad_submission_accepted_messages_total") == 60

    running = list(children(daemon).values())
    assert daemon.stop() == 0
    assert wait_exit(running, 30)
    assert {r["process"] for r in daemon.events("submission_process_stopped")} == {1, 2}
    assert len({r["id"] for r in pg.rows(dsn, "SELECT id FROM messages")}) == 60


def test_a_full_delivery_tells_the_children_to_spool_for_any_node(
    mtad_factory: Any, dsn: str, sink: ThreadedSink
) -> None:
    route = f'[routes."example.com"]\nrelay = "127.0.0.2:{sink.port}"'
    options = delivering(sink)
    options["delivery"] += "\nmax_held = 3"
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', route, **options).start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for n in range(12):  # the sink holds its reply to each: the delivery fills up at 3
            message = email(f"slow {n}", f"<slow{n}@example.org>").as_bytes(policy=SMTP)
            client.sendmail("app@example.org", [f"slow-{n}@example.com"], message)
    # Told that the delivery has no room, the children spooled the rest for any node to lease.
    [waiting] = pg.rows(dsn, "SELECT count(*) AS n FROM deliveries WHERE state = 'queued'")
    assert waiting["n"] > 0
    sink.release()
    assert len(sink.wait_for(12)) == 12
    daemon.wait_for_log(lambda records: sum(r.get("event") == "delivered" for r in records) == 12)
    assert metric(daemon, "mtad_delivery_leased_total") >= waiting["n"]  # those came by the lease query
    assert daemon.stop() == 0


def test_a_killed_daemon_takes_its_submission_processes_along(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', submission=PROCESSES).start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["someone@example.com"], email("before").as_bytes(policy=SMTP))
        # Each child counts AUTH failures itself, the limit (3) divided among them (2 each):
        # one session's third failure is refused by the child it is on.
        wrong = "PLAIN " + base64.b64encode(b"\0shop\0wrong").decode()
        assert client.docmd("AUTH", wrong)[0] == 535
        assert client.docmd("AUTH", wrong)[0] == 535
        assert client.docmd("AUTH", wrong) == (454, b"4.7.0 Too many failed authentication attempts; try again later")
    pids = list(children(daemon).values())
    assert len(pids) == 2
    daemon.kill()
    assert wait_exit(pids, 30)  # as if the node had crashed: nothing of it serves the port any more
    with pytest.raises(OSError):
        smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=5)
    daemon.start()  # the port is free again
    assert len(children(daemon)) == 2
    assert daemon.stop() == 0
