"""Mailbox limits against a provider that is slow or stalls: `mtad run` nodes on one
database relay through sending mailboxes at a smarthost in a process of its own,
which times every MAIL and every answer to the end of DATA. No two sends of one
mailbox overlap, and each starts at least the gap (min_gap plus the jitter's floor)
after the answer to the one before; a node killed in the middle of DATA holds its
mailbox until its lease says the send is gone; the caps count recipients."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests import pg
from tests.acceptance.mailboxes import Rig, add_accounts, submit
from tests.smarthost import violations

pytestmark = pytest.mark.slow

GAP = 1.0  # min_gap of every mailbox, seconds
JITTER = (0.25, 0.5)  # drawn per send and added to the gap
SLOW = 2.0  # a slow provider answers the end of DATA this long after it (longer than the gap)
STALL = 3.0  # a stalled provider answers nothing for this long


@pytest.mark.parametrize(
    ("nodes", "options"),
    [
        pytest.param(2, {"delay": SLOW}, id="slow-provider-two-nodes"),
        pytest.param(2, {"stall_after": 3, "stall_for": STALL}, id="stalling-provider-two-nodes"),
        pytest.param(3, {"delay": SLOW, "stall_after": 3, "stall_for": STALL}, id="slow-and-stalling-three-nodes"),
    ],
)
def test_no_two_sends_of_a_mailbox_overlap_or_come_closer_than_its_gap(
    rig: Rig, nodes: int, options: dict[str, Any]
) -> None:
    names = ["box0", "box1", "box2"]
    messages = 9  # three sends a mailbox
    smarthost = rig.smarthost(names, **options)
    try:
        add_accounts(rig.dsn, rig.key, smarthost.port, names, min_gap=GAP, jitter=JITTER)
        running = [rig.node(n).start() for n in range(nodes)]
        for n, node in enumerate(running):  # each node accepts its share, and any node may send any of it
            submit(node, range(n, messages, nodes))
        smarthost.wait_for_answers(messages, within=120)
        for node in running:
            assert node.stop() == 0
    finally:
        smarthost.stop()
    timeline = smarthost.timeline()
    assert sorted(timeline) == [f"{name}@example.com" for name in names]
    assert sum(len(sends) for sends in timeline.values()) == messages  # none sent twice
    assert violations(timeline, GAP + JITTER[0]) == []
    senders = [len(node.events("delivered")) for node in running]
    assert sum(senders) == messages


def test_a_send_whose_node_is_killed_in_data_holds_its_mailbox_until_its_lease_ends(rig: Rig) -> None:
    smarthost = rig.smarthost(["box0"], delay=30)  # no answer before the node is gone
    try:
        add_accounts(rig.dsn, rig.key, smarthost.port, ["box0"], min_gap=GAP, daily_cap=10)
        resend = 'on_unknown = "resend"'  # sent again after its lease, not held (test_unknown_sends.py)
        first = rig.node(0, resend).start()
        submit(first, range(1))
        smarthost.wait_for_data(1, within=60)
        first.kill()  # in the middle of DATA: the provider holds its answer
        killed_at = smarthost.mails()[0]
        second = rig.node(1, resend).start()
        smarthost.wait_for_mails(2, within=60)  # the message again (maybe sent), after the lease
        assert second.stop() == 0
    finally:
        smarthost.stop()
    [reservation, *_] = pg.rows(rig.dsn, "SELECT state::text AS state, settled_at, recipients "
                                         "FROM account_reservations ORDER BY id")  # fmt: skip
    lease_end = reservation["settled_at"]
    assert reservation["state"] == "reserved"  # kept: it may have gone out, so its slot stays taken
    assert lease_end is not None
    assert lease_end.timestamp() > killed_at + 3  # the 10 s lease, not the gap
    again = smarthost.mails()[1]
    assert again >= lease_end.timestamp() + GAP
    [usage] = pg.rows(rig.dsn, "SELECT sends FROM account_days")
    assert usage["sends"] == 2


def test_recipients_count_against_the_daily_cap(rig: Rig) -> None:
    names = ["box0", "box1"]
    smarthost = rig.smarthost(names)
    try:
        add_accounts(rig.dsn, rig.key, smarthost.port, names, daily_cap=3)
        node = rig.node(0).start()
        submit(node, range(10), recipients=20)
        smarthost.wait_for_answers(2, within=60)  # one send a mailbox: three recipients each

        def handed_back(records: list[dict[str, Any]]) -> bool:
            return sum(r.get("count", 0) for r in records if r.get("event") == "handed_back") >= 200 - 6

        node.wait_for_log(handed_back)  # the rest waits in the spool for the next day
        listed = node.cli("accounts", "ls", "--json")
        assert node.stop() == 0
    finally:
        smarthost.stop()
    answered = [r for r in smarthost.records if r.get("event") == "answered"]
    assert sorted((r["login"], r["recipients"]) for r in answered) == [("box0@example.com", 3), ("box1@example.com", 3)]
    assert listed.returncode == 0, listed.stderr
    assert {row["name"]: row["today"] for row in map(json.loads, listed.stdout.splitlines())} == {
        "box0": 3, "box1": 3
    }  # fmt: skip
    rows = pg.rows(rig.dsn, "SELECT state::text AS state, next_attempt_at FROM deliveries")
    assert sum(1 for r in rows if r["state"] == "delivered") == 6
    tomorrow = datetime.combine(datetime.now(UTC).date() + timedelta(days=1), datetime.min.time(), UTC)
    assert {r["next_attempt_at"] for r in rows if r["state"] != "delivered"} == {tomorrow}


def test_recipients_count_against_the_rate_caps(rig: Rig) -> None:
    smarthost = rig.smarthost(["box0"])
    try:
        add_accounts(rig.dsn, rig.key, smarthost.port, ["box0"], per_second=4)
        node = rig.node(0).start()
        submit(node, range(1), recipients=10)  # one transaction of ten: three sends fit the cap
        smarthost.wait_for_answers(3, within=60)
        assert node.stop() == 0
    finally:
        smarthost.stop()
    answered = [r for r in smarthost.records if r.get("event") == "answered"]
    assert sorted(r["recipients"] for r in answered) == [2, 4, 4]
    sends = pg.rows(rig.dsn, "SELECT reserved_at, recipients FROM account_reservations ORDER BY reserved_at")
    for send in sends:  # in any second, four recipients at most
        window = [s["recipients"] for s in sends if send["reserved_at"] - timedelta(seconds=1) < s["reserved_at"]
                  <= send["reserved_at"]]  # fmt: skip
        assert sum(window) <= 4
    rows = pg.rows(rig.dsn, "SELECT state::text AS state, attempts FROM deliveries")
    assert {(r["state"], r["attempts"]) for r in rows} == {("delivered", 1)}  # split without spending an attempt
