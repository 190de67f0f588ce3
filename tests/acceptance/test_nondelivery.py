"""Non-delivery reports through `mtad run`: the envelope sender of mail that bounced
or ran out of retries gets a DSN at the sink, from the null sender, that reads back
as a bounce of the right recipient; a report that cannot be delivered gets none."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from email.policy import SMTP
from typing import Any

import pytest

from mtad.feedback import reports
from tests.mail import email
from tests.running import Mtad
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    with ThreadedSink(("127.0.0.2",)) as started:
        yield started


def test_the_sender_hears_of_a_bounce_and_of_an_expiry(mtad_factory: Any, dsn: str, sink: ThreadedSink) -> None:
    delivery = (f'enabled = true\nport = {sink.port}\nretry = "1s"\nmax_age = "3s"\npoll_interval = "250ms"\n'
                'lease_duration = "8s"\nshutdown_timeout = "10s"')  # fmt: skip
    routes = f'[routes."sink.test"]\nrelay = "127.0.0.2:{sink.port}"\n'
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', delivery=delivery, extra=routes).start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for recipient, message_id in (("reject-1@sink.test", "<m1@example.org>"),
                                      ("tempfail-1@sink.test", "<m2@example.org>")):  # fmt: skip
            client.sendmail("app@sink.test", [recipient], email("hello", message_id).as_bytes(policy=SMTP))
        # A null sender's mail that bounces: no report comes of it.
        client.sendmail("", ["reject-2@sink.test"], email("a report", "<m3@example.org>").as_bytes(policy=SMTP))
    received = sink.wait_for(2, within=60)
    assert {(m.sender, tuple(m.recipients)) for m in received} == {("<>", ("app@sink.test",))}  # a null sender
    read = {}
    for message in received:
        report = reports.parse(message.data)
        assert isinstance(report, reports.Bounce), report
        read[report.original_message_id] = report.recipients[0]
    assert (read["<m1@example.org>"].recipient, read["<m1@example.org>"].status) == ("reject-1@sink.test", "5.1.1")
    assert (read["<m2@example.org>"].recipient, read["<m2@example.org>"].status) == (
        "tempfail-1@sink.test",
        "5.4.7",
    )  # expired
    assert all(b"From: Mail Delivery System <MAILER-DAEMON@" in m.data for m in received)
    assert daemon.stop() == 0
    assert len(sink.received) == 2  # nothing about the null sender's mail
