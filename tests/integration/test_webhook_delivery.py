"""Webhook requests to a real HTTP receiver (aiohttp, on loopback): written once per
endpoint and event by the consumer, signed so that the standardwebhooks package
verifies them, in order per message, retried after a failure, dead after max_age,
never sent to an address inside unless allowed, and a slow endpoint holding no
other back. A batched endpoint gets arrays, a failed batch is sent again whole; the
sender wakes at the outbox's COMMIT and outlives the loss of its connection."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from mtad import db
from mtad.base import errors, vault
from mtad.feedback import consumers, signals, webhooks
from mtad.feedback.webhook_outbox import Outbox, replay
from mtad.feedback.webhook_sender import Sender, Settings
from mtad.spool import retention
from tests.integration.inbound import delivered
from tests.pg import query

SEALER = vault.Vault(vault.Vault.new_key())
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


@dataclass
class Receiver:
    """An HTTP endpoint that records what it gets and answers `statuses` in turn (then 200)."""

    statuses: list[int] = field(default_factory=list)
    delay: float = 0.0
    got: list[tuple[dict[str, str], str]] = field(default_factory=list)  # headers, body
    paths: list[str] = field(default_factory=list)
    port: int = 0
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)  # a request is being answered

    async def handle(self, request: web.Request) -> web.Response:
        self.entered.set()
        await asyncio.sleep(self.delay)
        self.got.append((dict(request.headers), await request.text()))
        self.paths.append(request.path)
        self._arrived.set()
        return web.Response(status=self.statuses.pop(0) if self.statuses else 200, text="ok")

    async def received(self, count: int) -> None:
        """Until `count` requests have come."""
        while len(self.got) < count:
            self._arrived.clear()
            await self._arrived.wait()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextlib.asynccontextmanager
async def receiving(**kw: Any) -> AsyncIterator[Receiver]:
    receiver = Receiver(**kw)
    app = web.Application()
    app.router.add_post("/{path:.*}", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.port = runner.addresses[0][1]
    try:
        yield receiver
    finally:
        await runner.cleanup()


async def bounce(database: db.Database, message_id: str, recipient: str) -> None:
    """An asynchronous hard bounce of the recipient's delivery of the message: an event."""
    found = await signals.original(database, message_id, recipient)
    assert found is not None
    signal = signals.Signal(signals.Kind.BOUNCED, recipient, datetime.now(UTC), message=found.message,
                            delivery=found.delivery, status="5.1.1")  # fmt: skip
    await signals.record(database, signal)


async def enqueue(database: db.Database) -> int:
    return await consumers.Consumers(database, [Outbox()]).catch_up()


async def requests(database: db.Database) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT id, endpoint, state, attempts, last_error, payload FROM webhook_messages "
                                 "ORDER BY id")  # fmt: skip
    return [dict(r) for r in rows]


async def send(sender: Sender, rounds: int = 1) -> None:
    async with sender.sending():
        for _ in range(rounds):
            await sender.send_due()
            await sender.drain()


async def test_events_reach_their_endpoints_signed_and_in_order(database: db.Database) -> None:
    await enqueue(database)  # the consumer starts after the events already written
    async with receiving() as receiver:
        everything, secret = await webhooks.add(database, SEALER, "t1", receiver.url("/all"))
        await webhooks.add(database, SEALER, "t1", receiver.url("/bounces"), ["bounced"])
        await webhooks.add(database, SEALER, "t2", receiver.url("/other"))  # another tenant's: gets nothing
        message_id, _ = await delivered(database, "gone@example.com")
        await bounce(database, message_id, "gone@example.com")
        await enqueue(database)
        sender = Sender(database, SEALER, Settings(allow_networks=LOOPBACK), "n1")
        await send(sender, rounds=3)
    got = [(path, headers, json.loads(body), body) for path, (headers, body) in zip(receiver.paths, receiver.got,
                                                                                    strict=True)]  # fmt: skip
    assert [data["type"] for path, _, data, _ in got if path == "/all"] == ["received", "bounced"]  # in order
    assert [data["type"] for path, _, data, _ in got if path == "/bounces"] == ["bounced"]
    assert all(path != "/other" for path, *_ in got)
    assert {r["state"] for r in await requests(database)} == {"delivered"}
    headers, body = next((h, b) for path, h, _, b in got if path == "/all" and json.loads(b)["type"] == "bounced")
    verified = Webhook(secret).verify(body, headers)
    assert (verified["data"]["recipient"], verified["data"]["status"]) == ("gone@example.com", "5.1.1")
    assert verified["data"]["tenant"] == "t1"
    assert everything.id in {r["endpoint"] for r in await requests(database)}


async def test_events_are_passed_over_unread_while_no_endpoint_exists(database: db.Database) -> None:
    await enqueue(database)
    before, _ = await delivered(database, "before@example.com")
    assert await enqueue(database) == 0  # no endpoint anywhere: the position moves past, nothing is read
    async with receiving() as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url())
        after, _ = await delivered(database, "after@example.com")
        assert await enqueue(database) == 1  # its received event
    [request] = await requests(database)
    assert json.loads(request["payload"])["type"] == "received"
    ids = await query(database, "SELECT message_id FROM messages m JOIN events e ON e.message = m.id WHERE e.id = $1",
                      json.loads(request["payload"])["data"]["event_id"])  # fmt: skip
    assert [r["message_id"] for r in ids] == [after] != [before]


async def test_a_failing_endpoint_is_retried_then_given_up(database: db.Database) -> None:
    await enqueue(database)
    clock = [datetime.now(UTC)]
    async with receiving(statuses=[500, 503]) as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url(), ["received"])
        await delivered(database, "a@example.com")
        await enqueue(database)
        settings = Settings(allow_networks=LOOPBACK, retry_base=60.0, max_age=3600.0)
        clock[0] = datetime.now(UTC) + timedelta(seconds=1)  # the request is due from when it was written
        sender = Sender(database, SEALER, settings, "n1", now=lambda: clock[0])
        with structlog.testing.capture_logs() as logs:
            await send(sender)
        [failed] = await requests(database)
        assert (failed["state"], failed["attempts"], failed["last_error"]) == ("pending", 1, "HTTP 500")
        [logged] = [line for line in logs if line["event"] == "webhook_failed"]
        retry_at = datetime.fromisoformat(logged["retry_at"])  # ISO 8601, as every time in the log
        assert clock[0] + timedelta(seconds=30) <= retry_at <= clock[0] + timedelta(seconds=90)
        await send(sender)  # not due yet
        assert len(receiver.got) == 1
        clock[0] += timedelta(minutes=2)
        await send(sender)
        clock[0] += timedelta(minutes=5)
        await send(sender)
        [done] = await requests(database)
        assert (done["state"], done["attempts"], len(receiver.got)) == ("delivered", 3, 3)
        assert {h["webhook-id"] for h, _ in receiver.got} == {f"msg_{done['id']}"}  # the same id each time

        receiver.statuses = [500] * 10
        await delivered(database, "b@example.com")
        await enqueue(database)
        clock[0] = max(clock[0], datetime.now(UTC) + timedelta(seconds=1))
        for _ in range(8):
            clock[0] += timedelta(hours=1)
            await send(sender)
        dead = (await requests(database))[-1]
        assert (dead["state"], dead["last_error"]) == ("dead", "HTTP 500")
    [listed] = await webhooks.listing(database)
    assert (listed.pending, listed.delivered, listed.dead) == (0, 1, 1)


async def test_no_request_goes_inside_unless_allowed(database: db.Database) -> None:
    await enqueue(database)
    async with receiving() as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url(), ["received"])
        await delivered(database, "a@example.com")
        await enqueue(database)
        await send(Sender(database, SEALER, Settings(max_age=0.001), "n1"))
        assert receiver.got == []
    [refused] = await requests(database)
    assert refused["state"] == "dead"
    assert "127.0.0.1: not an address a webhook may go to" in refused["last_error"]


async def test_a_slow_endpoint_holds_no_other_back(database: db.Database) -> None:
    await enqueue(database)
    async with receiving(delay=5.0) as slow, receiving() as fast:
        await webhooks.add(database, SEALER, "t1", slow.url(), ["received"])
        await webhooks.add(database, SEALER, "t1", fast.url(), ["received"])
        for n in range(3):
            await delivered(database, f"r{n}@example.com")
        await enqueue(database)
        settings = Settings(allow_networks=LOOPBACK, per_endpoint=1, timeout=3.0, poll=0.05)
        sender = Sender(database, SEALER, settings, "n1")
        running = asyncio.create_task(sender.run())
        try:
            await asyncio.wait_for(fast.received(3), 10)  # while the slow one's first is still in flight
            assert slow.got == []
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
    states = {(r["endpoint"], r["state"]) for r in await requests(database)}
    assert states == {(1, "pending"), (2, "delivered")}


async def test_retention_deletes_what_was_delivered_or_given_up_and_keeps_what_is_pending(
    database: db.Database,
) -> None:
    await enqueue(database)
    async with receiving() as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url(), ["received"])
        await delivered(database, "a@example.com")
        await enqueue(database)
        await send(Sender(database, SEALER, Settings(allow_networks=LOOPBACK), "n1"))
        await delivered(database, "b@example.com")
        await enqueue(database)  # written, not sent: pending
    later = datetime.now(UTC) + timedelta(days=1)
    cutoffs = retention.Cutoffs(messages=datetime.now(UTC) - timedelta(days=7), events=later,
                                account_history=datetime.now(UTC) - timedelta(days=2), keys=later)  # fmt: skip
    pruned = await retention.prune(database, cutoffs, batch=10)
    assert pruned is not None
    assert pruned.webhooks == 1
    assert [r["state"] for r in await requests(database)] == ["pending"]


async def test_a_test_event_and_a_replay(database: db.Database) -> None:
    await enqueue(database)
    async with receiving(statuses=[200, 500]) as receiver:
        endpoint, secret = await webhooks.add(database, SEALER, "t1", receiver.url())
        sender = Sender(database, SEALER, Settings(allow_networks=LOOPBACK), "n1")
        assert await sender.test(endpoint) is None
        assert await sender.test(endpoint) == "HTTP 500"
        headers, body = receiver.got[0]
        assert Webhook(secret).verify(body, headers)["type"] == "test"
        assert headers["webhook-id"].startswith("msg_test_")

        start = datetime.now(UTC)
        await delivered(database, "a@example.com")
        await enqueue(database)
        await send(sender)
        assert [r["state"] for r in await requests(database)] == ["delivered"]
        assert await replay(database, "t1", start) == 1
        assert await replay(database, "t1", start, endpoint.id) == 1
        with pytest.raises(errors.NotFound):
            await replay(database, "t1", start, 999)
        await send(sender, rounds=2)
    received = [json.loads(body)["type"] for _, body in receiver.got]
    assert received == ["test", "test", "received", "received", "received"]


async def send_all(sender: Sender, rounds: int = 20) -> int:
    """Send until nothing more is due (at most `rounds` times); returns how many requests."""
    total = 0
    async with sender.sending():
        for _ in range(rounds):
            started = await sender.send_due()
            await sender.drain()
            if not started:
                return total
            total += started
    raise AssertionError(f"still sending after {rounds} rounds")


async def test_a_batched_endpoint_gets_arrays_signed_once_in_order_per_message(database: db.Database) -> None:
    await enqueue(database)
    async with receiving() as receiver:
        _, secret = await webhooks.add(database, SEALER, "t1", receiver.url("/batched"), batch=3)
        await webhooks.add(database, SEALER, "t1", receiver.url("/single"))
        for n in range(4):
            message_id, _ = await delivered(database, f"r{n}@example.com")
            await bounce(database, message_id, f"r{n}@example.com")
        await enqueue(database)
        await send_all(Sender(database, SEALER, Settings(allow_networks=LOOPBACK, per_endpoint=1), "n1"))
    got = list(zip(receiver.paths, receiver.got, strict=True))
    singles = {json.loads(body)["data"]["event_id"]: json.loads(body) for path, (_, body) in got if path == "/single"}
    batches = [(headers, body) for path, (headers, body) in got if path == "/batched"]
    arrays = [Webhook(secret).verify(body, headers) for headers, body in batches]  # signed once, over the array
    # Of each message only the oldest pending event goes: r0-r2 received, their bounces, r3's received, its bounce.
    assert [len(array) for array in arrays] == [3, 3, 1, 1]
    assert all(event == singles[event["data"]["event_id"]] for array in arrays for event in array)
    assert len(singles) == 8
    kinds: dict[str, list[str]] = {}
    for event in (event for array in arrays for event in array):
        kinds.setdefault(event["data"]["message"], []).append(event["type"])
    assert list(kinds.values()) == [["received", "bounced"]] * 4  # in order per message
    assert all(len({e["data"]["message"] for e in array}) == len(array) for array in arrays)
    rows = await query(database, "SELECT min(id) AS first FROM webhook_messages WHERE endpoint = 1 GROUP BY request "
                                 "ORDER BY 1")  # fmt: skip
    assert [headers["webhook-id"] for headers, _ in batches] == [f"msg_{r['first']}" for r in rows]
    assert {r["state"] for r in await requests(database)} == {"delivered"}
    assert [(e.batch, e.delivered) for e in await webhooks.listing(database)] == [(3, 8), (1, 8)]


async def test_a_failed_batch_is_sent_again_whole_then_given_up(database: db.Database) -> None:
    await enqueue(database)
    clock = [datetime.now(UTC)]
    async with receiving(statuses=[500]) as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url(), batch=10)
        first = [await delivered(database, f"a{n}@example.com") for n in range(3)]
        await enqueue(database)
        settings = Settings(allow_networks=LOOPBACK, retry_base=60.0, max_age=3600.0)
        clock[0] = datetime.now(UTC) + timedelta(seconds=1)
        sender = Sender(database, SEALER, settings, "n1", now=lambda: clock[0])
        assert await send_all(sender) == 1
        failed = await requests(database)
        assert {(r["state"], r["attempts"], r["last_error"]) for r in failed} == {("pending", 1, "HTTP 500")}
        # Meanwhile: a bounce of a message of the failed batch (it waits for it), and new mail (it goes).
        await bounce(database, first[0][0], "a0@example.com")
        new, _ = await delivered(database, "b@example.com")
        await enqueue(database)
        clock[0] = max(clock[0], datetime.now(UTC) + timedelta(seconds=1))
        assert await send_all(sender) == 1
        assert [(e["type"], e["data"]["message_id"]) for e in json.loads(receiver.got[1][1])] == [("received", new)]
        clock[0] += timedelta(minutes=2)
        assert await send_all(sender) == 2  # the failed batch again, then the bounce after it
        (headers, body), (again_headers, again_body) = receiver.got[0], receiver.got[2]
        assert (again_body, again_headers["webhook-id"]) == (body, headers["webhook-id"])  # the same request
        assert [e["type"] for e in json.loads(receiver.got[3][1])] == ["bounced"]
        assert {r["state"] for r in await requests(database)} == {"delivered"}

        receiver.statuses = [500] * 20
        for n in range(2):
            await delivered(database, f"c{n}@example.com")
        await enqueue(database)
        clock[0] = max(clock[0], datetime.now(UTC) + timedelta(seconds=1))
        for _ in range(8):
            await send_all(sender)
            clock[0] += timedelta(hours=1)
        dead = [r for r in await requests(database) if r["state"] != "delivered"]
        assert {(r["state"], r["last_error"]) for r in dead} == {("dead", "HTTP 500")}
        assert len(dead) == 2
        assert len({h["webhook-id"] for h, _ in receiver.got[4:]}) == 1  # every attempt the same batch
    [listed] = await webhooks.listing(database)
    assert (listed.pending, listed.delivered, listed.dead) == (0, 5, 2)


async def test_a_batch_whose_node_went_away_is_sent_again_whole(database: db.Database) -> None:
    await enqueue(database)
    async with receiving() as receiver:
        _, secret = await webhooks.add(database, SEALER, "t1", receiver.url(), batch=5)
        for n in range(3):
            await delivered(database, f"a{n}@example.com")
        await enqueue(database)
        now = datetime.now(UTC)
        found = await database.fetch("webhooks/turn", "gone", now, now + timedelta(seconds=60), 4, [], [], 64, [], [],
                                     [], [])  # fmt: skip
        taken = [r for r in found if r["id"] is not None]
        assert len({r["request"] for r in taken}) == 1
        later = Sender(database, SEALER, Settings(allow_networks=LOOPBACK), "n2", now=lambda: now)
        assert await send_all(later) == 0  # leased by the node that went away
        later = Sender(database, SEALER, Settings(allow_networks=LOOPBACK), "n2",
                       now=lambda: now + timedelta(seconds=61))  # fmt: skip
        assert await send_all(later) == 1
    [(headers, body)] = receiver.got
    assert headers["webhook-id"] == f"msg_{min(r['id'] for r in taken)}"
    assert len(Webhook(secret).verify(body, headers)) == 3
    assert {(r["state"], r["attempts"]) for r in await requests(database)} == {("delivered", 2)}


async def test_a_running_sender_wakes_when_rows_are_written(database: db.Database) -> None:
    await enqueue(database)
    async with receiving() as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url(), ["received"])
        sender = Sender(database, SEALER, Settings(allow_networks=LOOPBACK, poll=3600.0), "n1")
        running = asyncio.create_task(sender.run())
        try:
            for n in (1, 2):  # the second comes while the sender waits, with no poll due for an hour
                await delivered(database, f"r{n}@example.com")
                await enqueue(database)  # writes the row and notifies at COMMIT
                await asyncio.wait_for(receiver.received(n), 10)
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running


async def test_a_sender_whose_connection_was_lost_takes_another(database: db.Database) -> None:
    await enqueue(database)
    async with receiving() as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url(), ["received"])
        sender = Sender(database, SEALER, Settings(allow_networks=LOOPBACK, poll=0.05), "n1")
        running = asyncio.create_task(sender.run())
        try:
            await delivered(database, "a@example.com")
            await enqueue(database)
            await asyncio.wait_for(receiver.received(1), 10)
            turns = "query LIKE '%mtad_webhooks_turn%' AND pid <> pg_backend_pid()"
            [killed] = await query(database, f"SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
                                             f"WHERE {turns}")  # fmt: skip
            assert killed["n"] >= 1  # the connection it holds
            await delivered(database, "b@example.com")
            await enqueue(database)
            await asyncio.wait_for(receiver.received(2), 10)
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
    assert {r["state"] for r in await requests(database)} == {"delivered"}


async def attempt(database: db.Database, sender: Sender) -> int:
    """The consumer with this node's sender: first attempts from the events it reads."""
    return await consumers.Consumers(database, [Outbox(sender)]).catch_up()


async def test_first_attempts_go_from_the_event_log_in_order_and_write_nothing(database: db.Database) -> None:
    await enqueue(database)
    async with receiving() as receiver:
        _, secret = await webhooks.add(database, SEALER, "t1", receiver.url("/one"))
        await webhooks.add(database, SEALER, "t1", receiver.url("/batched"), batch=10)
        for n in range(3):  # each message's received and bounced in one batch of the consumer
            message_id, _ = await delivered(database, f"r{n}@example.com")
            await bounce(database, message_id, f"r{n}@example.com")
        sender = Sender(database, SEALER, Settings(allow_networks=LOOPBACK), "n1")
        async with sender.sending():
            assert await attempt(database, sender) == 6
    assert await requests(database) == []  # all taken at the first attempt: no outbox row
    got = [(path, headers, body) for path, (headers, body) in zip(receiver.paths, receiver.got, strict=True)]
    singles = [Webhook(secret).verify(body, headers) for path, headers, body in got if path == "/one"]
    assert len(singles) == 6
    kinds: dict[str, list[str]] = {}
    for event in singles:
        kinds.setdefault(event["data"]["message"], []).append(event["type"])
    assert list(kinds.values()) == [["received", "bounced"]] * 3  # in order per message, the messages side by side
    arrays = [json.loads(body) for path, _, body in got if path == "/batched"]
    assert [[e["type"] for e in array] for array in arrays] == [["received"] * 3, ["bounced"] * 3]
    ids = [headers["webhook-id"] for _, headers, _ in got]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("msg_e") for i in ids)
    assert [(e.batch, e.pending, e.delivered) for e in await webhooks.listing(database)] == [(1, 0, 6), (10, 0, 6)]


async def test_a_failed_first_attempt_waits_in_the_outbox_with_its_webhook_id(database: db.Database) -> None:
    await enqueue(database)
    clock = [datetime.now(UTC)]
    async with receiving(statuses=[500]) as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url())
        message_id, _ = await delivered(database, "a@example.com")
        await bounce(database, message_id, "a@example.com")
        settings = Settings(allow_networks=LOOPBACK, retry_base=60.0)
        sender = Sender(database, SEALER, settings, "n1", now=lambda: clock[0])
        async with sender.sending():
            await attempt(database, sender)  # received fails; bounced waits behind it
            rows = await requests(database)
            assert [(r["state"], r["attempts"], r["last_error"]) for r in rows] == [
                ("pending", 1, "HTTP 500"),
                ("pending", 0, None),
            ]
            await delivered(database, "b@example.com")  # another message: it goes at once
            await attempt(database, sender)
            assert len(receiver.got) == 2
            assert len(await requests(database)) == 2
            clock[0] += timedelta(minutes=5)
            assert await send_all(sender) == 2  # the failed request again, then the bounce
    events = [json.loads(body) for _, body in receiver.got]
    first = events[0]["data"]["message"]
    assert [e["type"] for e in events if e["data"]["message"] == first] == ["received", "received", "bounced"]
    assert [e["type"] for e in events if e["data"]["message"] != first] == ["received"]
    again = next(h for h, body in receiver.got[1:] if json.loads(body)["data"]["message"] == first)
    assert receiver.got[0][0]["webhook-id"] == again["webhook-id"]  # the same request again
    assert {r["state"] for r in await requests(database)} == {"delivered"}
    [listed] = await webhooks.listing(database)
    assert (listed.pending, listed.delivered, listed.dead) == (0, 3, 0)  # one counted at the first attempt, two rows


async def test_a_slow_first_attempt_is_left_to_the_sender(database: db.Database) -> None:
    await enqueue(database)
    async with receiving(delay=1.0) as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url())
        message_id, _ = await delivered(database, "a@example.com")
        sender = Sender(database, SEALER, Settings(allow_networks=LOOPBACK, first_wait=0.1), "n1")
        async with sender.sending():
            await attempt(database, sender)  # returns while the request is in flight
            [row] = await query(database, "SELECT leased_by, attempts, state, webhook_id FROM webhook_messages")
            assert (row["leased_by"], row["attempts"], row["state"]) == ("n1", 1, "pending")
            await bounce(database, message_id, "a@example.com")
            await attempt(database, sender)  # the endpoint was slow: its events go by the outbox
            await sender.drain()  # the first request's answer, recorded
            assert [r["state"] for r in await requests(database)] == ["delivered", "pending"]
            assert await send_all(sender) == 1
    assert [json.loads(body)["type"] for _, body in receiver.got] == ["received", "bounced"]  # each once
    assert receiver.got[0][0]["webhook-id"] == row["webhook_id"]


async def test_first_attempts_hold_no_transaction_open(database: db.Database) -> None:
    """An open transaction holds back what every other statement can prune: while a
    first attempt is out, the consumer has none."""
    await enqueue(database)
    async with receiving(delay=0.5) as receiver:
        await webhooks.add(database, SEALER, "t1", receiver.url())
        await delivered(database, "a@example.com")
        sender = Sender(database, SEALER, Settings(allow_networks=LOOPBACK), "n1")
        async with sender.sending():
            consuming = asyncio.create_task(attempt(database, sender))
            await asyncio.wait_for(receiver.entered.wait(), 10)
            sessions = "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
            [open_] = await query(database, sessions + "AND state LIKE 'idle in transaction%'")
            assert await consuming == 1
    assert open_["n"] == 0
    assert len(receiver.got) == 1
    assert await requests(database) == []
