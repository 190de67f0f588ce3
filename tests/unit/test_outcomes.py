"""The reply table (mtad/tables/replies.toml) and the local failures."""

from __future__ import annotations

import random

import pytest

from mtad.base import errors
from mtad.base.lifecycle import Reason, State
from mtad.base.replies import Reply
from mtad.deliver import settings as deliver_settings
from mtad.outbound import outcomes
from mtad.outbound.outcomes import Class, Failure

RULES = outcomes.load_rules(deliver_settings.shipped_table("replies"))


@pytest.mark.parametrize(
    ("code", "enhanced", "text", "cls"),  # in reply to RCPT TO
    [
        (250, "2.0.0", "OK queued", Class.DELIVERED),
        (421, "4.7.0", "Try again later, closing connection.", Class.THROTTLED),
        (421, "", "mx.example Service not available", Class.THROTTLED),
        (429, "", "Too many requests, slow down", Class.THROTTLED),
        (451, "4.7.28", "unusual rate of unsolicited mail originating from your IP", Class.THROTTLED),
        (451, "4.7.650", "The mail server [192.0.2.1] has been temporarily rate limited", Class.THROTTLED),
        (421, "4.7.0", "[TSS04] Messages from 192.0.2.1 temporarily deferred", Class.THROTTLED),
        (450, "4.7.1", "greylisted, try again in 5 minutes", Class.THROTTLED),
        (451, "4.3.0", "Mail server temporarily rejected message", Class.TRANSIENT),
        (452, "4.2.2", "The email account that you tried to reach is over quota", Class.TRANSIENT),
        (552, "5.2.2", "Mailbox full", Class.TRANSIENT),
        (550, "5.1.1", "The email account that you tried to reach does not exist", Class.RECIPIENT),
        (550, "", "No such user here", Class.RECIPIENT),
        (550, "5.2.1", "Mailbox disabled", Class.PERMANENT),  # suspended: bounced, not gone
        (550, "5.7.1", "Message rejected as spam", Class.CONTENT),
        (550, "5.7.26", "This message does not pass authentication checks", Class.CONTENT),
        (554, "5.7.9", "Message not accepted for policy reasons", Class.CONTENT),
        (550, "5.4.5", "Daily user sending quota exceeded.", Class.ACCOUNT_QUOTA),
        (535, "5.7.8", "Username and Password not accepted", Class.ACCOUNT_AUTH),
        (554, "5.0.0", "Transaction failed", Class.PERMANENT),
        (503, "", "Bad sequence of commands", Class.PERMANENT),
    ],
)
def test_reply_table(code: int, enhanced: str, text: str, cls: Class) -> None:
    assert RULES.classify(Reply(code, enhanced, text), "RCPT").cls is cls


def test_each_class_has_one_response() -> None:
    assert RULES.classify(Reply(250, "2.0.0", "ok")) == outcomes.DELIVERED
    throttled = RULES.classify(Reply(421, "4.7.0", "slow down"))
    assert (throttled.state, throttled.reason, throttled.counts_as_throttle) == (State.DEFERRED, Reason.THROTTLED, True)
    bounced = RULES.classify(Reply(550, "5.1.1", "no"))
    assert (bounced.state, bounced.reason) == (State.BOUNCED, Reason.RECIPIENT_REJECTED)


@pytest.mark.parametrize(
    ("failure", "state", "reason"),
    [
        (Failure.NO_ROUTE, State.BOUNCED, Reason.NO_ROUTE),
        (Failure.CONNECT_FAILED, State.DEFERRED, Reason.CONNECT_FAILED),
        (Failure.TLS_FAILED, State.DEFERRED, Reason.TLS_FAILED),
        (Failure.TIMEOUT, State.DEFERRED, Reason.TIMEOUT),
        (Failure.DISCONNECTED_IN_DATA, State.DEFERRED, Reason.DISCONNECTED),
        (Failure.INTERNAL, State.DEFERRED, Reason.INTERNAL),
    ],
)
def test_local_failures(failure: Failure, state: State, reason: Reason) -> None:
    verdict = outcomes.classify_failure(failure)
    assert (verdict.state, verdict.reason) == (state, reason)
    assert not verdict.counts_as_throttle  # mtad's own failures never slow a receiver down


def test_every_failure_is_in_the_table() -> None:
    for failure in Failure:
        assert outcomes.classify_failure(failure)


def test_bad_rules_are_all_reported() -> None:
    document = {"rule": [{"class": "nope", "code": 1}, {"class": "throttled"}, {"class": "content", "text": "("}]}
    with pytest.raises(errors.ConfigError) as info:
        outcomes.parse_rules(document)
    assert len(info.value.problems) == 3


def test_retry_schedule_repeats_its_last_delay_with_jitter() -> None:
    schedule = outcomes.RetrySchedule((300, 600, 1800), jitter=0.1)
    rng = random.Random(1)
    assert 270 <= schedule.delay(1, rng) <= 330
    assert 540 <= schedule.delay(2, rng) <= 660
    assert all(1620 <= schedule.delay(n, rng) <= 1980 for n in (3, 4, 50))
    assert len({schedule.delay(1, rng) for _ in range(20)}) > 1  # spread
