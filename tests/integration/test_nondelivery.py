"""Non-delivery reports against real PostgreSQL: a DSN (RFC 3464) spooled to the
envelope sender for a bounce after the 250 and for a delivery that failed, once
per event, from the null sender; none for a null-sender original, a soft bounce,
or a tenant that turned them off; and the report read back as a bounce."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from mtad import db
from mtad.feedback import consumers, reports, signals
from mtad.feedback.nondelivery import Reporter
from tests.integration.delivering import accept, new_message
from tests.pg import query


async def reports_spooled(database: db.Database) -> list[dict[str, object]]:
    rows = await query(database, "SELECT m.sender, d.recipient, m.body, m.tenant, m.idempotency_key "
                                 "FROM messages m JOIN deliveries d ON d.message = m.id WHERE m.sender = '' "
                                 "ORDER BY m.received_at")  # fmt: skip
    return [dict(r) for r in rows]


async def bounce(database: db.Database, message_id: str, recipient: str, *, delayed: bool = False) -> None:
    found = await signals.original(database, message_id, recipient)
    assert found is not None
    reply = "452 full" if delayed else "550 5.1.1 <gone@example.com>: User unknown"
    signal = signals.Signal(signals.Kind.BOUNCED, recipient, datetime.now(UTC), message=found.message,
                            delivery=found.delivery, hard=not delayed, status="4.2.2" if delayed else "5.1.1",
                            diagnostic=reply, action="delayed" if delayed else "failed")  # fmt: skip
    await signals.record(database, signal)


def said(report: reports.Report) -> list[tuple[str, bool, str | None, str | None]]:
    """What a bounce says of each recipient: address, hard, status, diagnostic."""
    assert isinstance(report, reports.Bounce)
    return [(f.recipient, f.hard, f.status, f.diagnostic) for f in report.recipients]


async def test_a_bounce_after_the_250_gets_its_sender_a_report_once(database: db.Database) -> None:
    reporting = consumers.Consumers(database, [Reporter("mtad.example.org")])
    await reporting.catch_up()
    message = new_message("gone@example.com", "full@example.com")
    message = dataclasses.replace(
        message, body=f"Message-ID: {message.message_id}\r\nSubject: t\r\n\r\nhi\r\n".encode()
    )
    await accept(database, message)
    await query(database, "UPDATE deliveries SET state = 'delivered' WHERE message = $1", message.id)
    await bounce(database, message.message_id, "gone@example.com")
    await bounce(database, message.message_id, "full@example.com", delayed=True)  # a delay: no report
    await reporting.catch_up()
    await reporting.catch_up()  # nothing twice
    [report] = await reports_spooled(database)
    assert (report["recipient"], report["tenant"]) == ("app@example.org", "t1")
    assert str(report["idempotency_key"]).startswith("ndr:")
    body = bytes(report["body"])  # type: ignore[arg-type]
    assert b"From: Mail Delivery System <MAILER-DAEMON@mtad.example.org>" in body
    read = reports.parse(body)
    assert said(read) == [("gone@example.com", True, "5.1.1", "550 5.1.1 <gone@example.com>: User unknown")]
    assert isinstance(read, reports.Bounce)
    assert read.original_message_id == message.message_id


async def test_a_failed_delivery_is_reported_and_a_report_never_is(database: db.Database) -> None:
    reporting = consumers.Consumers(database, [Reporter("mtad.example.org")])
    await reporting.catch_up()
    message = new_message("slow@example.com")
    await accept(database, message)
    [delivery] = await query(database, "SELECT id FROM deliveries WHERE message = $1", message.id)
    await query(database, "INSERT INTO events (at, kind, message, delivery, tenant, data) VALUES (now(), 'failed', "
                          "$1, $2, 't1', '{\"recipient\": \"slow@example.com\", \"reply\": \"451 4.4.1 no answer\"}')",
                message.id, delivery["id"])  # fmt: skip
    await reporting.catch_up()
    [report] = await reports_spooled(database)
    read = reports.parse(bytes(report["body"]))  # type: ignore[arg-type]
    assert isinstance(read, reports.Bounce)
    # Status 5.4.1 (given up), the reply 451 4.4.1: the reply's code, a temporary failure retried until given up
    failed = read.recipients[0]
    assert (failed.recipient, failed.status, failed.reason, failed.hard) == (
        "slow@example.com",
        "4.4.1",
        "expired",
        False,
    )

    # The report itself fails: no report of a report (its sender is null).
    [again] = await query(database, "SELECT m.id, d.id AS delivery FROM messages m JOIN deliveries d ON "
                                    "d.message = m.id WHERE m.sender = ''")  # fmt: skip
    await query(database, "INSERT INTO events (at, kind, message, delivery, tenant, data) VALUES (now(), 'failed', "
                          "$1, $2, 't1', '{\"recipient\": \"app@example.org\"}')",
                again["id"], again["delivery"])  # fmt: skip
    await reporting.catch_up()
    assert len(await reports_spooled(database)) == 1


async def test_a_tenant_may_turn_reports_off(database: db.Database) -> None:
    reporting = consumers.Consumers(database, [Reporter("mtad.example.org", lambda tenant: tenant != "t1")])
    await reporting.catch_up()
    message = new_message("gone@example.com")
    await accept(database, message)
    await query(database, "UPDATE deliveries SET state = 'delivered' WHERE message = $1", message.id)
    await bounce(database, message.message_id, "gone@example.com")
    await reporting.catch_up()
    assert await reports_spooled(database) == []


async def test_mail_still_retried_gets_one_delay_notice_when_asked(database: db.Database) -> None:
    reporting = consumers.Consumers(database, [Reporter("mtad.example.org", delayed_after=0.001)])
    await reporting.catch_up()
    message = new_message("slow@example.com")
    await accept(database, message)
    [delivery] = await query(database, "SELECT id FROM deliveries WHERE message = $1", message.id)
    for _ in range(2):  # two deferrals: one notice
        await query(database, "INSERT INTO events (at, kind, message, delivery, tenant, data) VALUES (now() + "
                              "interval '1 second', 'deferred', $1, $2, 't1', '{\"recipient\": \"slow@example.com\", "
                              "\"reply\": \"451 4.3.0 try later\"}')", message.id, delivery["id"])  # fmt: skip
        await reporting.catch_up()
    [notice] = await reports_spooled(database)
    body = bytes(notice["body"])  # type: ignore[arg-type]
    assert b"Subject: Delayed Mail (still being retried)" in body
    read = reports.parse(body)
    assert said(read) == [("slow@example.com", False, "4.3.0", "451 4.3.0 try later")]
    assert isinstance(read, reports.Bounce)
    assert read.recipients[0].action == "delayed"

    default = Reporter("mtad.example.org").kinds
    assert default is not None
    assert "deferred" not in default  # off unless [reports] delayed_after is set


async def test_the_recipients_of_one_message_that_bounce_together_share_a_report(database: db.Database) -> None:
    reporting = consumers.Consumers(database, [Reporter("mtad.example.org")])
    await reporting.catch_up()
    message = new_message("one@example.com", "two@example.com", "fine@example.com")
    await accept(database, message)
    rows = await query(database, "SELECT id, recipient FROM deliveries WHERE message = $1 AND recipient <> "
                                 "'fine@example.com' ORDER BY id", message.id)  # fmt: skip
    for row in rows:
        await query(database, "INSERT INTO events (at, kind, message, delivery, tenant, data) VALUES (now(), "
                              "'bounced', $1, $2, 't1', jsonb_build_object('recipient', $3::text, 'reply', "
                              "'550 5.1.1 no such user'))", message.id, row["id"], row["recipient"])  # fmt: skip
    await reporting.catch_up()
    [report] = await reports_spooled(database)
    read = reports.parse(bytes(report["body"]))  # type: ignore[arg-type]
    assert isinstance(read, reports.Bounce)
    assert [(f.recipient, f.status) for f in read.recipients] == [("one@example.com", "5.1.1"),
                                                                   ("two@example.com", "5.1.1")]  # fmt: skip


async def test_a_reply_in_another_script_is_reported(database: db.Database) -> None:
    reporting = consumers.Consumers(database, [Reporter("mtad.example.org")])
    await reporting.catch_up()
    message = new_message("taro@example.jp")
    await accept(database, message)
    [delivery] = await query(database, "SELECT id FROM deliveries WHERE message = $1", message.id)
    reply = '{"recipient": "taro@example.jp", "reply": "550 5.1.1 宛先不明 (no such user)", "status": "5.1.1"}'
    await query(database, "INSERT INTO events (at, kind, message, delivery, tenant, data) VALUES (now(), 'bounced', "
                          "$1, $2, 't1', $3::jsonb)", message.id, delivery["id"], reply)  # fmt: skip
    await reporting.catch_up()
    [report] = await reports_spooled(database)
    body = bytes(report["body"])  # type: ignore[arg-type]
    assert b"Diagnostic-Code: smtp; 550 5.1.1 ???? (no such user)" in body  # the field is ASCII
    assert "宛先不明".encode() in body or b"utf-8" in body  # the text part says it whole
    read = reports.parse(body)
    assert isinstance(read, reports.Bounce)
    assert (read.recipients[0].recipient, read.recipients[0].reason) == ("taro@example.jp", "userunknown")
