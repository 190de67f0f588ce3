"""What comes back, judged without a database: which feedback reports are recorded
as what, which bounces count as soft, the [suppression] settings, and what `mtad
queue show` says of each delivery. Sync, no I/O."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mtad import config
from mtad.base import errors, metrics, reasons
from mtad.feedback import consumers, reports, signals, suppression, webhook_outbox
from mtad.feedback.signals import Kind
from mtad.spool import queue, retention

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("feedback_type", "kind", "suppresses"),
    [
        ("abuse", Kind.COMPLAINED, True),
        ("Fraud", Kind.COMPLAINED, True),
        ("virus", Kind.COMPLAINED, True),
        ("auth-failure", Kind.AUTH_FAILURE, False),
        ("opt-out", Kind.UNSUBSCRIBED, False),
        ("not-spam", None, False),
        ("other", Kind.COMPLAINED, False),
        ("unknown", Kind.COMPLAINED, False),
        (None, Kind.COMPLAINED, True),  # a report that gives no type: abuse
    ],
)
def test_a_feedback_report_is_recorded_by_its_type(feedback_type: str | None, kind: Kind | None,
                                                   suppresses: bool) -> None:  # fmt: skip
    assert signals.complaint_kind(feedback_type) is kind
    if kind is Kind.COMPLAINED:
        data = {} if feedback_type is None else {"feedback_type": feedback_type}
        assert signals.suppressing_complaint(data) is suppresses


@pytest.mark.parametrize(
    ("data", "soft"),
    [
        # In the SMTP session: the reply's reason and status.
        ({"class": "permanent", "reason": "mailboxfull", "status": "5.2.2", "reply": "552 5.2.2 full"}, True),
        ({"class": "permanent", "reason": "suspend", "reply": "550 disabled"}, True),
        ({"class": "permanent", "reason": "expired"}, True),  # out of time: no reply
        ({"class": "recipient", "reason": "userunknown", "status": "5.1.1"}, False),  # gone: suppressed at once
        ({"class": "content", "reason": "blocked", "status": "5.7.1"}, False),  # the sender's fault
        ({"class": "content", "reason": "spamdetected", "status": "5.7.1"}, False),
        ({"class": "permanent", "reason": "hostunknown"}, True),  # no route: looks gone, no receiver said so
        ({"class": "permanent", "reason": "notaccept", "status": "4.1.10"}, True),  # only for now
        # After the 250: a report.
        ({"async": True, "hard": False, "reason": "mailboxfull", "status": "5.2.2", "action": "failed"}, True),
        ({"async": True, "hard": False, "reason": "mailboxfull", "status": "4.2.2", "action": "expired"}, True),
        ({"async": True, "hard": False, "reason": "mailboxfull", "status": "4.2.2", "action": "delayed"}, False),
        ({"async": True, "hard": True, "reason": "userunknown", "status": "5.1.1", "action": "failed"}, False),
        ({"async": True, "hard": True, "reason": "hostunknown", "action": "failed"}, False),
        ({"async": True, "hard": False, "reason": "notaccept", "reply": "450 no mail here"}, True),
        ({"async": True, "hard": False, "reason": "ratelimited", "action": "failed"}, False),
        ({"async": True, "hard": False, "status": "4.2.2"}, False),  # recorded before bounces had reasons
    ],
)
def test_which_bounces_count_as_soft(data: dict[str, Any], soft: bool) -> None:
    assert signals.soft_bounce(data) is soft


def test_a_bounce_signal_carries_what_the_report_says() -> None:
    full = reports.Failed("a@example.com", False, "5.2.2", "552 5.2.2 full", reasons.Reason.MAILBOX_FULL, "failed",
                          552)  # fmt: skip
    signal = signals.bounced(full, "a@example.com", NOW, delivery=7, group="google")
    assert (signal.kind, signal.reason, signal.action, signal.hard, signal.final) == (
        Kind.BOUNCED, reasons.Reason.MAILBOX_FULL, "failed", False, True
    )  # fmt: skip
    delay = reports.Failed("a@example.com", False, "4.2.2", None, reasons.Reason.MAILBOX_FULL, "delayed")
    assert not signals.bounced(delay, "a@example.com", NOW).final  # a delay notice moves nothing
    gone = reports.Failed("a@example.com", True, "5.1.1", None, reasons.Reason.USER_UNKNOWN)
    assert signals.bounced(gone, "a@example.com", NOW).hard
    assert not signals.Signal(Kind.COMPLAINED, "a@example.com", NOW).final


def test_a_provider_group_is_a_bounded_label() -> None:
    assert [metrics.provider(g) for g in ("google", "mx:mx1.example.net", None, "accounts:outreach")] == [
        "google", "other", "other", "accounts:outreach"
    ]  # fmt: skip


def test_soft_bounces_are_set_in_the_suppression_section(tmp_path: Path) -> None:
    path = tmp_path / "mtad.toml"
    path.write_text("")
    assert config.load(path, environ={}).suppression == suppression.Settings(None, 3, 30 * 86400.0)
    path.write_text('[suppression]\nsoft_after = 0\nsoft_window = "7d"\nbounce_expiry = "180d"\n')
    assert config.load(path, environ={}).suppression == suppression.Settings(180 * 86400.0, 0, 7 * 86400.0)
    path.write_text('[suppression]\nsoft_after = -1\nsoft_window = "0s"\n')
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    assert [p.split(":")[0] for p in info.value.problems] == ["[suppression] soft_after", "[suppression] soft_window"]
    with pytest.raises(errors.ConfigError, match="MTAD_SUPPRESSION_SOFT_AFTER: expected a whole number"):
        config.load(None, environ={"MTAD_SUPPRESSION_SOFT_AFTER": "three"})


def test_retention_lets_soft_bounces_go_once_out_of_their_window() -> None:
    pruner = retention.Pruner(None, retention.Settings(), soft_window=30 * 86400.0, now=lambda: NOW)  # type: ignore[arg-type]
    assert pruner.cutoffs().soft_bounces == NOW - timedelta(days=30)
    kept = retention.Pruner(None, retention.Settings(), now=lambda: NOW)  # type: ignore[arg-type]
    assert kept.cutoffs().soft_bounces is None


def test_a_message_shows_each_deliverys_last_reason() -> None:
    def event(kind: str, delivery: int | None, **data: Any) -> dict[str, Any]:
        return {"kind": kind, "delivery": delivery, "data": json.dumps(data)}

    found = [
        event("received", None),
        event("deferred", 1, reason="ratelimited", status="4.7.28"),
        event("bounced", 1, reason="blocked", status="5.7.1"),
        event("deferred", 2, reason="mailboxfull"),
        event("delivered", 2),  # delivered since: no reason
        event("delivered", 3),
        event("bounced", 3, reason="mailboxfull", status="5.2.2", **{"async": True}),  # came back later
        event("deferred", 4),  # recorded before events had reasons
    ]
    assert queue.last_reasons(found) == {1: "blocked", 3: "mailboxfull"}


def test_a_webhook_gives_the_bounce_reason_and_status_as_the_event_has_them() -> None:
    data = {"recipient": "full@example.com", "async": True, "hard": False, "status": "5.2.2", "reason": "mailboxfull",
            "action": "failed", "reply": "552 5.2.2 Mailbox full", "moved": True}  # fmt: skip
    stored = consumers.Stored(7, 1, NOW, "bounced", "t1", None, 3, json.dumps(data))
    body = json.loads(webhook_outbox.payload(stored))
    assert body["type"] == "bounced"
    assert body["data"] == {"event_id": 7, "tenant": "t1", "message": None, "delivery": 3, **data}
