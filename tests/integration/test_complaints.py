"""Feedback reports by their Feedback-Type, through the inbound listener and the
consumers, against real PostgreSQL: each report of a message its own complaint;
abuse, fraud and virus suppress and count in the complaint rate; auth-failure is an
event of its own; opt-out unsubscribes; not-spam records nothing; any other type is
a complaint that suppresses nothing."""

from __future__ import annotations

import json

import structlog

from mtad import db
from mtad.feedback import consumers, reputation, suppression
from mtad.feedback.suppression import Reason
from tests.integration.inbound import COMPLAINTS, delivered, listening, send
from tests.pg import query
from tests.reports import arf


async def test_each_report_is_recorded_as_its_feedback_type_says(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor(), reputation.Reputation(reputation.Settings())])
    await consuming.catch_up()
    kinds = ("abuse", "fraud", "virus", "auth-failure", "opt-out", "not-spam", "other")
    message_id, ids = await delivered(database, *(f"{k}@example.net" for k in kinds))
    async with listening(database) as listener:
        with structlog.testing.capture_logs() as logs:
            for kind in kinds:
                reply = await send(listener, COMPLAINTS, arf(f"{kind}@example.net", message_id, feedback_type=kind))
                assert reply.startswith("250 ")
    rows = await query(database, "SELECT kind, delivery, data FROM events WHERE kind IN ('complained', "
                                 "'auth_failure', 'unsubscribed') ORDER BY id")  # fmt: skip
    found = [(r["kind"], r["delivery"], json.loads(r["data"])) for r in rows]
    assert found == [
        ("complained", ids["abuse@example.net"], {"recipient": "abuse@example.net", "feedback_type": "abuse"}),
        ("complained", ids["fraud@example.net"], {"recipient": "fraud@example.net", "feedback_type": "fraud"}),
        ("complained", ids["virus@example.net"], {"recipient": "virus@example.net", "feedback_type": "virus"}),
        ("auth_failure", ids["auth-failure@example.net"],
         {"recipient": "auth-failure@example.net", "feedback_type": "auth-failure"}),
        ("unsubscribed", ids["opt-out@example.net"],
         {"recipient": "opt-out@example.net", "feedback_type": "opt-out", "via": "arf"}),
        ("complained", ids["other@example.net"], {"recipient": "other@example.net", "feedback_type": "other"}),
    ]  # fmt: skip
    assert [line["feedback_type"] for line in logs if line["event"] == "complaint_ignored"] == ["not-spam"]
    await consuming.catch_up()
    suppressed = {e.address: e.reason for e in await suppression.entries(database, "t1")}
    assert suppressed == {
        "abuse@example.net": Reason.COMPLAINT,
        "fraud@example.net": Reason.COMPLAINT,
        "virus@example.net": Reason.COMPLAINT,
        "opt-out@example.net": Reason.UNSUBSCRIBE,
    }
    [window] = await reputation.windows(database, "tenant", ["t1"])
    assert (window["24h"]["complained"], window["24h"]["unsubscribed"]) == (3, 1)  # only the types that suppress


async def test_several_reports_in_one_message_are_each_a_complaint(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    message_id, ids = await delivered(database, "one@example.net", "two@example.net", "three@example.net")
    report = arf("one@example.net", message_id).replace(
        b"Original-Rcpt-To: <one@example.net>\n",
        b"Original-Rcpt-To: <one@example.net>\nOriginal-Rcpt-To: <two@example.net>\n",
    )
    async with listening(database) as listener:
        assert (await send(listener, COMPLAINTS, report)).startswith("250 ")
    rows = await query(database, "SELECT delivery FROM events WHERE kind = 'complained' ORDER BY id")
    assert [r["delivery"] for r in rows] == [ids["one@example.net"], ids["two@example.net"]]
    await consuming.catch_up()
    assert sorted(e.address for e in await suppression.entries(database, "t1")) == [
        "one@example.net", "two@example.net"
    ]  # fmt: skip
