"""Reading the sending mailboxes' inboxes, against a real IMAP server (Dovecot) and
real PostgreSQL: DSNs in several shapes matched by the original Message-ID,
replies and automatic replies, a restart that neither misses nor repeats, mail
older than the account left alone, nothing marked unless asked, a refused login,
and one node reading each inbox."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from mtad import db
from mtad.base import vault
from mtad.base.vault import Secret
from mtad.feedback import consumers, inbox, suppression
from mtad.feedback.suppression import Reason
from mtad.mailboxes import accounts, inboxes, relay
from tests import imap
from tests.integration.delivering import deliveries
from tests.integration.inbound import delivered
from tests.integration.tokens import TokenServer
from tests.pg import query
from tests.reports import EXCHANGE, OUT_OF_OFFICE, arf, dsn

pytestmark = pytest.mark.skipif(imap.missing() is not None, reason=str(imap.missing()))

SEALER = vault.Vault(vault.Vault.new_key())
WAIT = 30.0  # seconds a test waits for the reader, at most
_names = itertools.count(1)


def mailboxes(database: db.Database, dovecot: imap.Dovecot) -> relay.Mailboxes:
    """The relay's logins, trusting the IMAP server's certificate for the pool."""
    pools = {"p": relay.PoolSettings(ca_file=Path(dovecot.cert))}
    return relay.Mailboxes(database, relay.Settings(pools=pools), SEALER)


async def account(database: db.Database, dovecot: imap.Dovecot, *, password: str = "pw") -> accounts.Account:
    """A sending account whose inbox is a new Dovecot mailbox, read at Dovecot."""
    name = f"box{next(_names)}"
    address = f"{name}@example.org"
    dovecot.user(address, "pw")
    stored = await accounts.add(database, accounts.Account(name=name, address=address, pool="p", host="localhost",
                                                           port=587, login=address))  # fmt: skip
    await accounts.set_secret(database, name, SEALER.seal(Secret(password)))
    assert await inboxes.configure(database, stored.id, "localhost", dovecot.port)
    return stored


@contextlib.asynccontextmanager
async def reading(
    database: db.Database, dovecot: imap.Dovecot, box: accounts.Account, node: str = "n1", **settings: Any
) -> AsyncIterator[inbox.Reader]:
    """A reader of the account's inbox on `node`, holding its lease, until the block ends."""
    at = datetime.now(UTC)
    taken = await inboxes.take(database, box.id, node, at, at + timedelta(minutes=5))
    assert taken is not None
    read_settings = inbox.Settings(**{"timeout": 10.0, **settings})
    shared = inbox.Reading(database, mailboxes(database, dovecot), read_settings, node)
    reader = inbox.Reader(shared, taken, box)
    task = asyncio.create_task(reader.run())
    try:
        yield reader
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def events(database: db.Database, *kinds: str) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT kind, delivery, data FROM events WHERE kind = ANY ($1) ORDER BY id",
                       list(kinds))  # fmt: skip
    return [{**dict(r), "data": json.loads(r["data"])} for r in rows]


async def health(database: db.Database, box: accounts.Account) -> int:
    [use] = [u for u in await accounts.usage(database, datetime.now(UTC), box.pool) if u.account.id == box.id]
    return use.health


async def test_a_dsn_in_the_inbox_bounces_suppresses_and_lowers_the_mailboxs_health(
    database: db.Database, dovecot: imap.Dovecot
) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    box = await account(database, dovecot)
    message_id, ids = await delivered(database, "gone@example.com", "stays@example.com")
    assert await health(database, box) == 100
    async with reading(database, dovecot, box) as reader:
        dovecot.deliver(box.address, dsn("gone@example.com", message_id, to=box.address))
        await asyncio.wait_for(reader.reached(1), WAIT)
    rows = await deliveries(database)
    assert (rows["gone@example.com"]["state"], rows["gone@example.com"]["reason"]) == ("bounced", "async_bounce")
    assert rows["stays@example.com"]["state"] == "delivered"
    [event] = await events(database, "bounced")
    assert event["delivery"] == ids["gone@example.com"]
    assert {k: event["data"][k] for k in ("recipient", "async", "hard", "status", "via", "account")} == {
        "recipient": "gone@example.com", "async": True, "hard": True, "status": "5.1.1", "via": "inbox",
        "account": box.name,
    }  # fmt: skip
    assert await health(database, box) < 100
    await consuming.catch_up()
    [entry] = await suppression.entries(database, "t1")
    assert (entry.address, entry.reason) == ("gone@example.com", Reason.HARD_BOUNCE)


async def test_an_exchange_dsn_and_a_soft_one_are_matched_and_only_the_hard_one_bounces(
    database: db.Database, dovecot: imap.Dovecot
) -> None:
    box = await account(database, dovecot)
    message = await delivered(database, "nobody@contoso.com")
    exchange = EXCHANGE.replace(b"<original-2@example.org>", message[0].encode())
    later, _ = await delivered(database, "full@example.com")
    soft = dsn("full@example.com", later, action="delayed", status="4.2.2", diagnostic="smtp; 452 4.2.2 full")
    async with reading(database, dovecot, box) as reader:
        dovecot.deliver(box.address, exchange)
        dovecot.deliver(box.address, soft)
        await asyncio.wait_for(reader.reached(2), WAIT)
    rows = await deliveries(database)
    assert rows["nobody@contoso.com"]["state"] == "bounced"
    assert rows["full@example.com"]["state"] == "delivered"
    hard, delayed = await events(database, "bounced")
    assert (hard["data"]["recipient"], hard["data"]["status"], hard["data"]["hard"]) == (
        "nobody@contoso.com", "5.1.10", True,
    )  # fmt: skip
    assert (delayed["data"]["recipient"], delayed["data"]["hard"]) == ("full@example.com", False)


async def test_replies_and_automatic_replies_are_events_that_suppress_nothing(
    database: db.Database, dovecot: imap.Dovecot
) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    box = await account(database, dovecot)
    message_id, ids = await delivered(database, "bob@example.net", "carol@example.net")
    reply = (f"From: Carol <Carol@example.net>\nTo: {box.address}\nSubject: Re: hello\n"
             f"In-Reply-To: {message_id}\nReferences: {message_id}\nMessage-ID: <r1@example.net>\n\n"
             "Thanks!\n").encode()  # fmt: skip
    threaded = (f"From: dave@example.net\nSubject: Re: hello\nReferences: <elsewhere@x> {message_id} <later@x>\n\n"
                "Me too.\n").encode()  # fmt: skip
    unrelated = b"From: eve@example.net\nSubject: Re: hi\nIn-Reply-To: <not-ours@example.net>\n\nhi\n"
    automatic = OUT_OF_OFFICE.replace(b"<original-6@example.org>", message_id.encode())
    async with reading(database, dovecot, box) as reader:
        for raw in (reply, threaded, unrelated, automatic, b"From: frank@example.net\nSubject: hi\n\nhello\n"):
            dovecot.deliver(box.address, raw)
        await asyncio.wait_for(reader.reached(5), WAIT)
    found = await events(database, "replied", "auto_replied")
    assert [(e["kind"], e["data"]["recipient"], e["delivery"]) for e in found] == [
        ("replied", "carol@example.net", ids["carol@example.net"]),
        ("replied", "dave@example.net", None),  # not a recipient of it: the message, no delivery
        ("auto_replied", "bob@example.net", ids["bob@example.net"]),
    ]
    await consuming.catch_up()
    assert await suppression.entries(database) == []
    assert all(flags == "" for flags in dovecot.flags(box.address))  # nothing marked as seen


async def test_feedback_reports_by_type_and_a_soft_bounce_leave_the_mailboxs_health(
    database: db.Database, dovecot: imap.Dovecot
) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    box = await account(database, dovecot)
    message_id, ids = await delivered(database, "angry@example.net", "dmarc@example.net", "full@example.com")
    full = dsn("full@example.com", message_id, status="5.2.2", diagnostic="smtp; 552 5.2.2 Mailbox full")
    async with reading(database, dovecot, box) as reader:
        dovecot.deliver(box.address, arf("angry@example.net", message_id))
        dovecot.deliver(box.address, arf("dmarc@example.net", message_id, feedback_type="auth-failure"))
        dovecot.deliver(box.address, arf("angry@example.net", message_id, feedback_type="not-spam"))
        dovecot.deliver(box.address, full)
        await asyncio.wait_for(reader.reached(4), WAIT)
    found = await events(database, "complained", "auth_failure", "bounced")
    assert [(e["kind"], e["delivery"]) for e in found] == [
        ("complained", ids["angry@example.net"]), ("auth_failure", ids["dmarc@example.net"]),
        ("bounced", ids["full@example.com"]),
    ]  # fmt: skip
    bounce = found[2]["data"]
    assert (bounce["hard"], bounce["reason"], bounce["action"], bounce["moved"]) == (False, "mailboxfull", "failed",
                                                                                     True)  # fmt: skip
    assert await health(database, box) == 100  # the address is not gone: the mailbox did nothing wrong
    await consuming.catch_up()
    assert [(e.address, e.reason) for e in await suppression.entries(database)] == [
        ("angry@example.net", Reason.COMPLAINT)
    ]  # fmt: skip


async def test_a_restart_neither_misses_nor_repeats(database: db.Database, dovecot: imap.Dovecot) -> None:
    box = await account(database, dovecot)
    message_id, _ = await delivered(database, "a@example.net", "b@example.net", "c@example.net")

    def reply(sender: str) -> bytes:
        return f"From: {sender}\nSubject: Re: x\nIn-Reply-To: {message_id}\n\nok\n".encode()

    async with reading(database, dovecot, box) as reader:
        dovecot.deliver(box.address, reply("a@example.net"))
        await asyncio.wait_for(reader.reached(1), WAIT)
    dovecot.deliver(box.address, reply("b@example.net"))  # while no node reads it
    [stored] = await inboxes.listing(database, box.id)
    assert (stored.last_uid, stored.uidvalidity is not None, stored.error) == (1, True, None)
    async with reading(database, dovecot, box) as reader:
        await asyncio.wait_for(reader.reached(2), WAIT)
        dovecot.deliver(box.address, reply("c@example.net"))
        await asyncio.wait_for(reader.reached(3), WAIT)
    assert [e["data"]["recipient"] for e in await events(database, "replied")] == [
        "a@example.net", "b@example.net", "c@example.net",
    ]  # fmt: skip


async def test_mail_older_than_the_account_is_left_alone(database: db.Database, dovecot: imap.Dovecot) -> None:
    box = await account(database, dovecot)
    message_id, _ = await delivered(database, "old@example.net", "new@example.net")
    old = f"From: old@example.net\nSubject: Re: x\nIn-Reply-To: {message_id}\n\nok\n".encode()
    dovecot.deliver(box.address, old, received=time.time() - 10 * 86400)
    async with reading(database, dovecot, box) as reader:
        dovecot.deliver(box.address, old.replace(b"old@", b"new@"))
        await asyncio.wait_for(reader.reached(2), WAIT)
    assert [e["data"]["recipient"] for e in await events(database, "replied")] == ["new@example.net"]


async def test_mark_seen_marks_the_reports_read_and_nothing_else(database: db.Database, dovecot: imap.Dovecot) -> None:
    box = await account(database, dovecot)
    message_id, _ = await delivered(database, "gone@example.com")
    async with reading(database, dovecot, box, mark_seen=True) as reader:
        dovecot.deliver(box.address, dsn("gone@example.com", message_id, to=box.address))
        dovecot.deliver(box.address, b"From: someone@example.net\nSubject: hi\n\nA person wrote this.\n")
        await asyncio.wait_for(reader.reached(2), WAIT)
    assert sorted(dovecot.flags(box.address)) == ["", "S"]


async def test_a_refused_login_is_written_on_the_inbox_and_tried_again(
    database: db.Database, dovecot: imap.Dovecot
) -> None:
    box = await account(database, dovecot, password="wrong")
    async with reading(database, dovecot, box) as reader:
        await asyncio.wait_for(reader.failed(), WAIT)
    [stored] = await inboxes.listing(database, box.id)
    assert "LOGIN: NO" in (stored.error or "")
    assert stored.uidvalidity is None


async def test_one_node_reads_each_inbox(database: db.Database, dovecot: imap.Dovecot) -> None:
    box = await account(database, dovecot)
    first = inbox.Inboxes(inbox.Reading(database, mailboxes(database, dovecot), inbox.Settings(lease=30.0), "n1"))
    second = inbox.Inboxes(inbox.Reading(database, mailboxes(database, dovecot), inbox.Settings(lease=30.0), "n2"))
    async with asyncio.TaskGroup() as tasks:
        await first.look(tasks)
        await second.look(tasks)
        [held] = await inboxes.listing(database, box.id)
        assert held.node == "n1"
        assert (list(first.readers), list(second.readers)) == ([box.id], [])
        await inboxes.remove(database, box.id)  # no longer read: its reader stops
        await first.look(tasks)
        assert first.readers == {}


async def test_an_xoauth2_account_reads_its_inbox_with_an_access_token(database: db.Database) -> None:
    endpoint = await TokenServer().start()  # refresh token "good" -> access tokens "access-N"
    checked: list[str] = []

    async def introspect(request: web.Request) -> web.Response:  # Dovecot asks whether a token is good
        token = (await request.post()).get("token", "")
        checked.append(str(token))
        good = str(token).startswith("access-")
        return web.json_response({"active": good, "username": "oauth@example.org"} if good else {"active": False})

    app = web.Application()
    app.router.add_post("/introspect", introspect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    dovecot = imap.Dovecot(introspection=f"http://127.0.0.1:{port}/introspect")
    try:
        await asyncio.to_thread(dovecot.start)
        dovecot.user("oauth@example.org", "not-this-one")
        box = await accounts.add(database, accounts.Account(
            name="oauth", address="oauth@example.org", pool="p", host="localhost", port=587,
            login="oauth@example.org", mechanism=accounts.Mechanism.XOAUTH2))  # fmt: skip
        await accounts.set_secret(database, "oauth", SEALER.seal(Secret("good")))
        await accounts.set_oauth(database, "oauth", endpoint.url, "mtad-client", None, None)
        assert await inboxes.configure(database, box.id, "localhost", dovecot.port)
        message_id, _ = await delivered(database, "gone@example.com")
        async with reading(database, dovecot, box) as reader:
            dovecot.deliver(box.address, dsn("gone@example.com", message_id, to=box.address))
            await asyncio.wait_for(reader.reached(1), WAIT)
        assert checked[:1] == ["access-1"]
        assert endpoint.requests[0]["refresh_token"] == "good"
        [event] = await events(database, "bounced")
        assert event["data"]["account"] == "oauth"
    finally:
        await asyncio.to_thread(dovecot.stop)
        await runner.cleanup()
        await endpoint.stop()


async def test_a_server_without_idle_is_polled(database: db.Database) -> None:
    dovecot = imap.Dovecot(idle=False)
    await asyncio.to_thread(dovecot.start)
    try:
        box = await account(database, dovecot)
        message_id, _ = await delivered(database, "x@example.net")
        async with reading(database, dovecot, box, poll=0.2) as reader:
            await asyncio.wait_for(reader.reached(0), WAIT)  # read once, nothing there yet
            dovecot.deliver(box.address, f"From: x@example.net\nIn-Reply-To: {message_id}\n\nok\n".encode())
            await asyncio.wait_for(reader.reached(1), WAIT)
        assert [e["kind"] for e in await events(database, "replied")] == ["replied"]
    finally:
        await asyncio.to_thread(dovecot.stop)
