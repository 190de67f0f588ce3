"""Never twice from a person's mailbox: a relayed send that may have gone out (the
connection lost after the data, or its node dead before the outcome was written)
is held `unknown`, not sent again, against a real smarthost, real PostgreSQL and
a real IMAP server (Dovecot) holding the account's Sent folder: found there, it
is delivered; not found once its wait is over, it is sent again, once; without
an inbox it waits for `queue retry`, or is sent again when its pool says
on_unknown = "resend". MX mail keeps at-least-once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mtad import db
from mtad.feedback import inbox
from mtad.mailboxes import accounts, choosing, inboxes, relay
from mtad.spool import actions, leases, queue
from tests import imap
from tests.integration.delivering import accept, deliveries, engine, new_message
from tests.integration.mailboxes import SEALER, add, frozen, relayed, relaying, reservations
from tests.pg import query
from tests.proxy import PgProxy
from tests.sink import Sink


async def events(database: db.Database, kind: str) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT delivery, data FROM events WHERE kind = $1 ORDER BY id", kind)
    return [{"delivery": r["delivery"], **json.loads(r["data"])} for r in rows]


async def with_inbox(database: db.Database, smarthost: Sink, dovecot: imap.Dovecot, name: str) -> accounts.Account:
    """An account at the smarthost whose inbox (with a Sent folder flagged \\Sent) is read at Dovecot."""
    account = await add(database, smarthost, name)
    dovecot.user(account.address, f"pw-{name}")
    dovecot.folder(account.address, "Sent")
    assert await inboxes.configure(database, account.id, "localhost", dovecot.port)
    return account


@contextlib.asynccontextmanager
async def reading(
    database: db.Database, dovecot: imap.Dovecot, *, later: timedelta = timedelta(0)
) -> AsyncIterator[inbox.Inboxes]:
    """The inbox readers of node n1 (with its leases taken), their clock `later` ahead."""
    mailboxes = relay.Mailboxes(database, relay.Settings(pools={"p": relay.PoolSettings(ca_file=dovecot.cert)}),
                                SEALER)  # fmt: skip
    settings = inbox.Settings(timeout=10.0)
    readers = inbox.Inboxes(inbox.Reading(database, mailboxes, settings, "n1", now=lambda: datetime.now(UTC) + later))
    async with asyncio.TaskGroup() as tasks:
        await readers.look(tasks)
        try:
            yield readers
        finally:
            for _, task in readers.readers.values():
                task.cancel()


async def sent_copy(database: db.Database, recipient: str) -> bytes:
    """The message as the provider files it in the Sent folder: with its Message-ID."""
    [row] = await query(database, "SELECT m.message_id, m.body FROM messages m JOIN deliveries d ON d.message = m.id"
                                  " WHERE d.recipient = $1", recipient)  # fmt: skip
    return f"Message-ID: {row['message_id']}\r\n".encode() + bytes(row["body"])


async def test_a_send_lost_after_the_data_is_held_unknown_and_never_sent_again(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("lost-once-1@example.net"))
    await relaying(database, tls_files).run_until_idle()
    row = (await deliveries(database))["lost-once-1@example.net"]
    assert (row["state"], row["reason"], row["attempts"]) == ("unknown", "maybe_sent", 1)
    assert row["next_attempt_at"].year == 9999  # 'infinity': no inbox, until an operator retries it
    assert await reservations(database, "a") == ["reserved"]  # it may have gone out: its slot counts
    [held] = await events(database, "unknown")
    assert {k: held[k] for k in ("recipient", "why", "looked_for", "resend_at", "account", "account_pool")} == {
        "recipient": "lost-once-1@example.net", "why": "lost_after_data", "looked_for": False, "resend_at": None,
        "account": "a", "account_pool": "p",
    }  # fmt: skip
    # Days later, on any node, it is not sent again: only the operator sends it.
    later = datetime.now(UTC) + timedelta(days=2)
    await relaying(database, tls_files, now=lambda: later).run_until_idle()
    assert len(smarthost.transactions) == 1
    listed = [
        r async for r in queue.deliveries(database, queue.Filters(states=("unknown",)))
    ]  # what `mtad queue ls` reads
    assert [(r["recipient"], r["reason"]) for r in listed] == [("lost-once-1@example.net", "maybe_sent")]


async def test_queue_retry_sends_a_held_send_and_cancel_drops_one(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("lost-once-1@example.net"), relayed("lost-once-2@example.net"))
    await relaying(database, tls_files).run_until_idle()
    rows = await deliveries(database)
    first, second = rows["lost-once-1@example.net"]["id"], rows["lost-once-2@example.net"]["id"]
    assert {r["state"] for r in rows.values()} == {"unknown"}
    now = datetime.now(UTC)
    assert await actions.act_on(database, "bounce", str(second), now) == ([], [{"id": second, "state": "unknown"}])
    assert (await actions.act_on(database, "cancel", str(second), now))[0] == [second]
    assert (await actions.act_on(database, "retry", str(first), now))[0] == [first]
    await relaying(database, tls_files).run_until_idle()
    rows = await deliveries(database)
    assert (rows["lost-once-1@example.net"]["state"], rows["lost-once-1@example.net"]["attempts"]) == ("delivered", 2)
    assert (rows["lost-once-2@example.net"]["state"], rows["lost-once-2@example.net"]["reason"]) == (
        "cancelled", "admin",
    )  # fmt: skip
    assert [m.recipients for m in smarthost.received] == [["lost-once-1@example.net"]]
    assert len(smarthost.transactions) == 3  # each once, and the retried one again
    assert await query(database, "SELECT 1 FROM unknown_sends") == []


async def test_a_pool_that_resends_sends_it_again_flagged(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("lost-once-1@example.net"))
    resending = relay.Settings(pools={"p": relay.PoolSettings(on_unknown="resend")}, poll=0.2)
    now = frozen()
    await relaying(database, tls_files, settings=resending, now=lambda: now).run_until_idle()
    row = (await deliveries(database))["lost-once-1@example.net"]
    assert (row["state"], row["reason"]) == ("deferred", "disconnected")
    [deferred] = await events(database, "deferred")
    assert deferred["maybe_delivered"] is True
    later = now + timedelta(seconds=61)  # its retry is due
    await relaying(database, tls_files, settings=resending, now=lambda: later).run_until_idle()
    assert (await deliveries(database))["lost-once-1@example.net"]["state"] == "delivered"
    assert len(smarthost.transactions) == 2


async def test_mx_mail_lost_after_the_data_is_sent_again(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("lost-once-1@sink.test"))
    now = frozen()
    await engine(database, sink, now=lambda: now).run_until_idle()
    assert (await deliveries(database))["lost-once-1@sink.test"]["state"] == "deferred"
    later = now + timedelta(hours=1)
    await engine(database, sink, now=lambda: later).run_until_idle()
    assert (await deliveries(database))["lost-once-1@sink.test"]["state"] == "delivered"  # at least once


async def test_a_send_found_in_the_sent_folder_is_delivered(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path], dovecot: imap.Dovecot
) -> None:
    account = await with_inbox(database, smarthost, dovecot, "found")
    await accept(database, relayed("lost-once-1@example.net"))
    await relaying(database, tls_files).run_until_idle()
    row = (await deliveries(database))["lost-once-1@example.net"]
    assert row["state"] == "unknown"
    [held] = await events(database, "unknown")
    assert held["looked_for"] is True
    assert row["next_attempt_at"] == datetime.fromisoformat(held["resend_at"])  # sent again then, unless found
    dovecot.deliver(account.address, await sent_copy(database, "lost-once-1@example.net"), folder="Sent")
    async with reading(database, dovecot) as readers:
        checks = await readers.check_sent()
    assert (checks.found, checks.again) == (1, 0)
    row = (await deliveries(database))["lost-once-1@example.net"]
    assert (row["state"], row["attempts"]) == ("delivered", 1)
    [delivered] = await events(database, "delivered")
    assert {k: delivered[k] for k in ("recipient", "how", "folder", "account")} == {
        "recipient": "lost-once-1@example.net", "how": "sent_folder", "folder": "Sent", "account": "found",
    }  # fmt: skip
    await relaying(database, tls_files, now=lambda: datetime.now(UTC) + timedelta(days=1)).run_until_idle()
    assert len(smarthost.transactions) == 1  # never sent again


async def test_a_send_not_in_the_sent_folder_after_its_wait_is_sent_again_once(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path], dovecot: imap.Dovecot
) -> None:
    await with_inbox(database, smarthost, dovecot, "missing")
    await accept(database, relayed("lost-once-1@example.net"))
    await relaying(database, tls_files).run_until_idle()
    async with reading(database, dovecot) as readers:  # within its wait: looked for, still held
        assert (await readers.check_sent()).again == 0
    [looked] = await query(database, "SELECT looked_at, folder FROM unknown_sends")
    assert looked["folder"] == "Sent"
    assert (await deliveries(database))["lost-once-1@example.net"]["state"] == "unknown"
    async with reading(database, dovecot, later=timedelta(minutes=11)) as readers:  # its ten minutes are over
        checks = await readers.check_sent()
    assert (checks.found, checks.again) == (0, 1)
    [again] = await events(database, "requeued")
    assert (again["reason"], again["folder"], again["account"]) == ("not_in_sent_folder", "Sent", "missing")
    await relaying(database, tls_files, now=lambda: datetime.now(UTC) + timedelta(minutes=11)).run_until_idle()
    row = (await deliveries(database))["lost-once-1@example.net"]
    assert (row["state"], row["attempts"]) == ("delivered", 2)
    assert len(smarthost.transactions) == 2
    assert await query(database, "SELECT 1 FROM unknown_sends") == []


async def test_an_attempt_id_written_as_the_database_went_away_is_cleared_and_nothing_held(
    database: db.Database, dsn: str, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("r1@example.net"))
    # The attempt id is written and committed, and the connection is lost before the
    # node hears so: nothing went out, and the node clears it once it reaches the database.
    with PgProxy(dsn) as proxy:
        through = await db.Database.connect(proxy.dsn, max_size=3)
        try:
            lost = proxy.drop_reply(b"FROM mtad_begin(")
            await relaying(through, tls_files).run_until_idle()
            assert lost.is_set()
        finally:
            await through.close()
    assert smarthost.transactions == []
    row = (await deliveries(database))["r1@example.net"]
    assert (row["state"], row["attempt_id"]) == ("leased", None)
    # Its lease runs out; the next node sends it, once, and holds nothing.
    later = datetime.now(UTC) + timedelta(minutes=11)
    assert await leases.reap(database, later) == 1
    await relaying(database, tls_files, now=lambda: later).run_until_idle()
    row = (await deliveries(database))["r1@example.net"]
    assert (row["state"], row["attempts"]) == ("delivered", 1)
    assert len(smarthost.transactions) == 1


async def test_a_send_whose_node_died_is_held_and_looked_for_in_its_accounts_sent_folder(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path], dovecot: imap.Dovecot
) -> None:
    account = await with_inbox(database, smarthost, dovecot, "crashed")
    await accept(database, relayed("r1@example.net"))
    # Node n0 reserves the account, writes the attempt id, and dies before any outcome.
    now = datetime.now(UTC)
    [leased] = await leases.lease(database, "n0", 10, now, now + timedelta(minutes=5))
    mailboxes = relay.Mailboxes(database, relay.Settings(), SEALER)
    taken = await mailboxes.take("p", [choosing.Want(1, leased.id)], "n0")
    assert isinstance(taken, relay.Taken)
    [reservation] = taken.reservations
    begun = await leases.begin(database, "n0", [leases.Attempt(uuid.uuid4(), (leased.id,), "accounts:p", "t1")], now)
    assert begun.owned == {leased.id}
    assert await leases.reclaim(database, "n0", now) == 1  # its restart takes it back: queued, maybe sent
    await relaying(database, tls_files).run_until_idle()  # node n1 leases it
    assert smarthost.transactions == []  # not sent again
    row = (await deliveries(database))["r1@example.net"]
    assert (row["state"], row["reason"], row["attempts"]) == ("unknown", "maybe_sent", 1)
    [held] = await events(database, "unknown")
    assert (held["why"], held["account"], held["looked_for"]) == ("unrecorded_attempt", "crashed", True)
    assert reservation.account.id == account.id
    dovecot.deliver(account.address, await sent_copy(database, "r1@example.net"), folder="Sent")
    async with reading(database, dovecot) as readers:
        assert (await readers.check_sent()).found == 1
    assert (await deliveries(database))["r1@example.net"]["state"] == "delivered"
