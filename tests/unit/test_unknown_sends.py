"""What decides the fate of a relayed send whose outcome is unknown: the Sent folder
found in a LIST reply, the [account_pools] keys that say how long to look and what
to do without an inbox, and the moves the delivery state machine allows."""

from __future__ import annotations

from typing import Any

import pytest

from mtad.base import errors, lifecycle
from mtad.base.lifecycle import Reason, State
from mtad.feedback import inbox
from mtad.mailboxes import pools as account_pools
from mtad.mailboxes import relay

GMAIL = [
    b'(\\HasNoChildren) "/" "INBOX"',
    b'(\\HasChildren \\Noselect) "/" "[Gmail]"',
    b'(\\All \\HasNoChildren) "/" "[Gmail]/All Mail"',
    b'(\\HasNoChildren \\Sent) "/" "[Gmail]/Sent Mail"',
    b'(\\HasNoChildren \\Trash) "/" "[Gmail]/Trash"',
    b"Success",
]
OUTLOOK = [b'(\\HasNoChildren) "/" Inbox', b'(\\HasNoChildren \\Sent) "/" "Sent Items"', b"LIST completed."]
GERMAN_GMAIL = [b'(\\HasNoChildren \\Sent) "/" "[Google Mail]/Gesendet"', b'(\\HasNoChildren) "/" INBOX']
FLAGGED = [b'(\\HasNoChildren) "." INBOX', b'(\\HasNoChildren \\Sent) "." Sent', b'(\\HasNoChildren) "." Drafts']
ESCAPED = [b'(\\Sent) "/" "Sent \\"mail\\""']


@pytest.mark.parametrize(
    ("listed", "folder"),
    [
        (GMAIL, "[Gmail]/Sent Mail"),
        (OUTLOOK, "Sent Items"),
        (GERMAN_GMAIL, "[Google Mail]/Gesendet"),  # not a known name: the flag says
        (FLAGGED, "Sent"),
        (ESCAPED, 'Sent "mail"'),
        ([b'(\\HasNoChildren) "/" INBOX', b"(\\HasNoChildren) NIL Sent Items"], None),  # nothing to tell it by
        ([], None),
    ],
)
def test_the_sent_folder_is_the_providers_by_name_else_the_one_flagged_sent(listed: list[bytes], folder: str) -> None:
    assert inbox.sent_folder(listed) == folder


def test_a_known_name_comes_before_the_flag() -> None:
    listed = [b'(\\HasNoChildren \\Sent) "/" "Sent"', b'(\\HasNoChildren) "/" "Sent Items"']
    assert inbox.sent_folder(listed) == "Sent Items"


def pools(keys: dict[str, Any]) -> tuple[dict[str, relay.PoolSettings], list[str]]:
    problems: list[str] = []
    return account_pools.parse({"outreach": keys}, problems), problems


def test_a_pool_holds_and_looks_ten_minutes_unless_told() -> None:
    found, problems = pools({})
    assert problems == []
    assert (found["outreach"].on_unknown, found["outreach"].sent_check_after) == ("hold", 600.0)
    found, problems = pools({"on_unknown": "resend", "sent_check_after": "2m"})
    assert problems == []
    assert (found["outreach"].on_unknown, found["outreach"].sent_check_after) == ("resend", 120.0)


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ({"on_unknown": "send"}, "[account_pools.outreach] on_unknown: expected one of hold, resend, got 'send'"),
        ({"on_unknown": True}, "[account_pools.outreach] on_unknown: expected a string, got True"),
        ({"sent_check_after": "0s"}, "[account_pools.outreach] sent_check_after:"),
        ({"sent_check_after": "2d"}, "[account_pools.outreach] sent_check_after: expected a duration from 1s to 1d"),
        ({"sent_check_after": "soon"}, "[account_pools.outreach] sent_check_after:"),
    ],
)
def test_bad_values_are_refused_never_replaced(keys: dict[str, Any], problem: str) -> None:
    found, problems = pools(keys)
    assert found == {}
    assert len(problems) == 1
    assert problems[0].startswith(problem), problems


def test_a_send_in_hand_is_held_unknown_only_because_it_may_have_gone_out() -> None:
    assert lifecycle.transition(State.LEASED, State.UNKNOWN, Reason.MAYBE_SENT) is State.UNKNOWN
    with pytest.raises(errors.IllegalTransition, match="only for reason maybe_sent"):
        lifecycle.transition(State.LEASED, State.UNKNOWN, Reason.DISCONNECTED)
    assert State.UNKNOWN not in lifecycle.FINAL  # something follows: found, sent again, or an operator
    # Found in the Sent folder; sent again (not found, or retried); cancelled by an operator.
    assert lifecycle.TRANSITIONS[State.UNKNOWN] == {State.DELIVERED, State.QUEUED, State.CANCELLED}
    assert lifecycle.transition(State.UNKNOWN, State.CANCELLED, Reason.ADMIN) is State.CANCELLED
    assert not lifecycle.can_move(State.UNKNOWN, State.BOUNCED)  # it may have been delivered
    assert not lifecycle.can_move(State.UNKNOWN, State.LEASED)  # never leased again unseen
