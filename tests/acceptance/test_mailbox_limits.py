"""Mailbox limits against a provider that is slow or stalls: `mtad run` nodes on one
database relay through sending mailboxes at a smarthost in a process of its own,
which times every MAIL and every answer to the end of DATA. No two sends of one
mailbox overlap, and each starts at least the gap (min_gap plus the jitter's floor)
after the answer to the one before; a node killed in the middle of DATA holds its
mailbox until its lease says the send is gone; the caps count recipients."""

from __future__ import annotations

import json
import smtplib
from datetime import UTC, datetime, timedelta
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from mtad import db
from mtad.base import vault
from mtad.mailboxes import accounts
from tests.acceptance.conftest import Mtad
from tests.acceptance.test_run import email
from tests.conftest import query, run_sync
from tests.smarthost import Smarthost, violations

pytestmark = pytest.mark.slow

GAP = 1.0  # min_gap of every mailbox, seconds
JITTER = (0.25, 0.5)  # drawn per send and added to the gap
SLOW = 2.0  # a slow provider answers the end of DATA this long after it (longer than the gap)
STALL = 3.0  # a stalled provider answers nothing for this long
DELIVERY = 'enabled = true\npoll_interval = "250ms"\nlease_duration = "10s"\nshutdown_timeout = "10s"'


def add_accounts(dsn: str, key: bytes, port: int, names: list[str], **limits: Any) -> None:
    sealer = vault.Vault(key)

    async def add() -> None:
        database = await db.Database.connect(dsn, max_size=2)
        try:
            for name in names:
                account = accounts.Account(name=name, address=f"{name}@example.com", pool="outreach",
                                           host="localhost", port=port, login=f"{name}@example.com",
                                           limits=accounts.Limits(**limits))  # fmt: skip
                await accounts.add(database, account)
                await accounts.set_secret(database, name, sealer.seal(vault.Secret(f"pw-{name}")))
        finally:
            await database.close()

    run_sync(add)


def fetch(dsn: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        database = await db.Database.connect(dsn, max_size=1)
        try:
            return [dict(row) for row in await query(database, sql, *args)]
        finally:
            await database.close()

    return run_sync(run)


def submit(node: Mtad, messages: range, recipients: int = 1) -> None:
    with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
        for i in messages:
            message = email(f"relayed {i}")
            message["X-Mtad-Account-Pool"] = "outreach"
            to = [f"r{i}-{n}@example.net" for n in range(recipients)]
            client.sendmail("app@example.org", to, message.as_bytes(policy=SMTP))


class Rig:
    """A smarthost process, its mailboxes in the database, and `mtad run` nodes that
    trust its certificate through the pool's ca_file (no SSL_CERT_FILE)."""

    def __init__(self, factory: Any, dsn: str, tls_files: tuple[Path, Path], tmp_path: Path) -> None:
        self.factory, self.dsn, self.tls_files, self.tmp_path = factory, dsn, tls_files, tmp_path
        self.key = vault.Vault.new_key()
        (tmp_path / "accounts.key").write_bytes(self.key)

    def smarthost(self, names: list[str], **options: Any) -> Smarthost:
        logins = {f"{name}@example.com": f"pw-{name}" for name in names}
        return Smarthost(*self.tls_files, logins, **options).start()

    def node(self, n: int, pool: str = "") -> Mtad:
        """Node relay-N; `pool`: more keys of [account_pools.outreach]."""
        extra = (f'[accounts]\nkey_file = "{self.tmp_path / "accounts.key"}"\n'
                 f'[account_pools.outreach]\nca_file = "{self.tls_files[0]}"\n{pool}\n')  # fmt: skip
        return self.factory(f'dsn = "{self.dsn}"', extra, delivery=DELIVERY, node=f"relay-{n}")


@pytest.fixture
def rig(mtad_factory: Any, dsn: str, tls_files: tuple[Path, Path], tmp_path: Path) -> Rig:
    return Rig(mtad_factory, dsn, tls_files, tmp_path)


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
    [reservation, *_] = fetch(rig.dsn, "SELECT state::text AS state, settled_at, recipients FROM account_reservations "
                                       "ORDER BY id")  # fmt: skip
    lease_end = reservation["settled_at"]
    assert reservation["state"] == "reserved"  # kept: it may have gone out, so its slot stays taken
    assert lease_end is not None
    assert lease_end.timestamp() > killed_at + 3  # the 10 s lease, not the gap
    again = smarthost.mails()[1]
    assert again >= lease_end.timestamp() + GAP
    [usage] = fetch(rig.dsn, "SELECT sends FROM account_days")
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
    rows = fetch(rig.dsn, "SELECT state::text AS state, next_attempt_at FROM deliveries")
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
    sends = fetch(rig.dsn, "SELECT reserved_at, recipients FROM account_reservations ORDER BY reserved_at")
    for send in sends:  # in any second, four recipients at most
        window = [s["recipients"] for s in sends if send["reserved_at"] - timedelta(seconds=1) < s["reserved_at"]
                  <= send["reserved_at"]]  # fmt: skip
        assert sum(window) <= 4
    rows = fetch(rig.dsn, "SELECT state::text AS state, attempts FROM deliveries")
    assert {(r["state"], r["attempts"]) for r in rows} == {("delivered", 1)}  # split without spending an attempt
