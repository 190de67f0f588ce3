"""The webhook sender: every node's `Sender` leases due rows of the outbox
(`webhook_messages`, written by mtad.feedback.webhook_outbox) as requests (up to the
endpoint's batch of rows each, and only the oldest pending row of each message),
signs them (mtad.feedback.webhooks) and POSTs them (mtad.outbound.http_client);
it also makes the first attempts the consumer asks of it (`first`):

- 2xx: delivered.
- anything else, a timeout, no answer: due again after a back-off with jitter,
  doubling from `retry_base` up to `retry_max`; still failing `max_age` after the
  oldest event of the request: dead, with the last reason.
- an address a request may not go to: the same. A loopback, link-local or private
  address is allowed only when `allow_networks` names it, checked on the addresses
  the name resolves to, which are the only ones connected to.

A request keeps its rows and its webhook-id (msg_<its first row>, or the one of its
first attempt) through every retry, and its rows are settled together, at the
sender's next turn: the statement that also leases what goes next (one round trip).
An endpoint has at most `per_endpoint` requests in flight from a node, so a slow
or dead one holds no other tenant's back; answers are read up to `max_response`
octets. Every request in flight is a task of the TaskGroup of `sending()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import random
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from standardwebhooks.webhooks import Webhook

from mtad import db
from mtad.base import errors, metrics, vault
from mtad.feedback import settings, webhooks
from mtad.outbound import http_client

log = structlog.get_logger("mtad.webhooks")

Network = http_client.Network
CHANNEL = "mtad_webhooks"  # notified when rows are written (webhooks/enqueue.sql)
FLUSH = 5.0  # seconds a stopping sender has to record what was answered
SLOW_FOR = 60.0  # seconds an endpoint that kept a first attempt past first_wait gets its events by the outbox
REFUSED = "not an address a webhook may go to (see [webhooks] allow_networks)"


# Declared in settings.py: the configuration builds it without loading this module.
Settings = settings.WebhookSending


@dataclass(slots=True)
class Request:
    """One POST: rows of one endpoint, in id order, sent and settled together."""

    id: int  # its first row's: the webhook-id is msg_<id>
    endpoint: int
    tenant: str
    url: str
    batched: bool  # the endpoint takes a JSON array, even of one event
    signing: list[Webhook]
    attempts: int
    created_at: datetime  # its oldest row's: max_age counts from it
    rows: list[int] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    webhook_id: str = ""

    def __post_init__(self) -> None:
        self.webhook_id = self.webhook_id or f"msg_{self.id}"

    def body(self) -> str:
        return "[" + ",".join(self.payloads) + "]" if self.batched else self.payloads[0]


@dataclass(frozen=True, slots=True)
class Settled:
    request: Request
    why: str | None  # None: delivered
    next_at: datetime | None  # due again then; None with a why: dead


@dataclass(frozen=True, slots=True)
class Item:
    """One event for one endpoint."""

    endpoint: int
    event: int
    message: uuid.UUID | None
    payload: str


@dataclass(frozen=True, slots=True)
class Row:
    """An item the outbox gets: never sent, or sent once in request number `sent`."""

    item: Item
    sent: int | None = None
    webhook_id: str | None = None
    next_at: datetime | None = None  # due again then; None with `sent`: still in flight (leased)
    error: str | None = None


@dataclass(slots=True)
class Firsts:
    """What became of a batch's first attempts."""

    rows: list[Row] = field(default_factory=list)  # for the outbox, in the batch's order
    delivered: dict[int, int] = field(default_factory=dict)  # events taken, by endpoint
    flying: dict[int, tuple[Request, asyncio.Task[str | None]]] = field(default_factory=dict)  # by number
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @classmethod
    def unsent(cls, items: Sequence[Item]) -> Firsts:
        """Every item for the outbox, never sent."""
        return cls(rows=[Row(item) for item in items])


def _answer_of(task: asyncio.Task[str | None]) -> str | None:
    """What a finished (not cancelled) POST came to: None when taken, else why not."""
    failed = task.exception()
    return task.result() if failed is None else f"{type(failed).__name__}: {failed}"


def _rounds(items: Sequence[Item]) -> list[list[Item]]:
    """The items in rounds: the k-th of each message in the k-th (those of no message in the first)."""
    rounds: list[list[Item]] = []
    seen: dict[uuid.UUID, int] = {}
    for item in items:
        k = 0
        if item.message is not None:
            k = seen[item.message] = seen.get(item.message, -1) + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(item)
    return rounds


class Sender:
    """Sends the due requests from this node; see the module docstring."""

    def __init__(
        self,
        database: db.Database,
        sealer: vault.Vault,
        settings: Settings,
        node: str,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        rng: random.Random | None = None,
    ) -> None:
        self._db = database
        self._sealer = sealer
        self._keyring = webhooks.Keyring(sealer)
        self.settings = settings
        self.node = node
        self._now = now
        self._rng = rng or random.Random()
        self._wake = asyncio.Event()
        self._flying: dict[int, int] = {}  # endpoint -> requests in flight
        self._tasks: set[asyncio.Task[Any]] = set()  # the requests in flight
        self._group: asyncio.TaskGroup | None = None  # while sending(): owns every request in flight
        self._client: http_client.Client | None = None  # while sending(): first attempts go through it
        self._slow: dict[int, float] = {}  # endpoint -> until when (loop time) it gets no first attempt
        self._listening = db.Listening(database.dsn, CHANNEL, self._wake.set)
        self._conn: db.Connection | None = None  # its own while it runs
        self._answered: list[Settled] = []  # recorded at the next turn

    def wake(self) -> None:
        self._wake.set()

    def _guard(self) -> http_client.Guard:
        return http_client.Guard(self.settings.allow_networks, REFUSED)

    def client(self) -> http_client.Client:
        """The HTTP client the requests go through (its guard keeps the inside out)."""
        return http_client.Client(guard=self._guard(), timeout=self.settings.timeout, limit=self.settings.in_flight)

    @contextlib.asynccontextmanager
    async def sending(self) -> AsyncIterator[None]:
        """The HTTP client open, and the TaskGroup that owns every request in flight:
        turns (`send_due`) start requests and the consumer's first attempts go
        meanwhile; requests still in flight at its end are cancelled."""
        async with self.client() as client, asyncio.TaskGroup() as group:
            self._client, self._group = client, group
            try:
                yield
            finally:
                self._client = self._group = None
                for task in self._tasks:
                    task.cancel()

    async def run(self) -> None:
        """Until cancelled: a turn whenever woken (NOTIFY when rows are written, an
        answer), or every poll."""
        async with self.sending(), contextlib.AsyncExitStack() as stopping:
            stopping.push_async_callback(self._stop)
            while True:
                await self._listening.keep()
                self._wake.clear()
                await self._held_turn()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.poll):
                        await self._wake.wait()

    async def _held_turn(self) -> None:
        """A turn on the sender's own connection, opened first when there is none; its
        statement ends even when the sender is stopped meanwhile (one round trip).

        On that connection a commit is not waited for (synchronous_commit off): a turn
        lost with the last moments before a crash only sends its requests again."""
        assert self._group is not None
        try:
            if self._conn is None:
                self._conn = await db.connect_once(self._db.dsn)
                await self._conn.execute("webhooks/commit_async")
            turning = self._group.create_task(self._kept_turn())
            try:
                failed = await asyncio.shield(turning)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await turning
                raise
            if failed is not None:
                raise failed
        except errors.DatabaseUnavailable:  # another connection, the next time
            await self._let_go()
        except errors.SpoolError:
            pass  # the next turn tries again; the poll makes sure there is one

    async def _kept_turn(self) -> errors.SpoolError | None:
        """A turn as a task of the group, which a failed turn must not end: its SpoolError, returned."""
        try:
            await self.send_due()
        except errors.SpoolError as exc:
            return exc
        return None

    async def _let_go(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await db.close(conn)

    async def _stop(self) -> None:
        """In order: no request goes on, what was answered is recorded, the connections go."""
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(errors.SpoolError, TimeoutError):
            async with asyncio.timeout(FLUSH):
                await self._turn(None)
        await self._let_go()
        await self._listening.close()

    async def send_due(self) -> int:
        """While sending(): record what was answered since the last turn, lease what is
        due and may go now, and start sending it, in one statement; returns how many
        requests started."""
        return await self._turn(self._client)

    async def drain(self) -> None:
        """Until every request started has been answered or failed, and that is recorded
        (tests, tools)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._turn(None)

    async def _turn(self, client: http_client.Client | None) -> int:
        """Settle what was answered and, with a client, lease and start what may go now."""
        answered, self._answered = self._answered, []
        group = self._group
        room = self.settings.in_flight - len(self._tasks) if client is not None and group is not None else 0
        if room <= 0 and not answered:
            return 0
        rows = [row for settled in answered for row in settled.request.rows]
        settling = [settled.request.id for settled in answered]  # the rows' requests, their due and why
        due = [settled.next_at for settled in answered]
        whys = [settled.why[:500] if settled.why is not None else None for settled in answered]
        now = self._now()
        until = now + timedelta(seconds=self.settings.lease)
        try:
            found = await (self._conn or self._db).fetch("webhooks/turn", self.node, now, until,
                                                         self.settings.per_endpoint, list(self._flying),
                                                         list(self._flying.values()), max(room, 0), rows,
                                                         settling, due, whys)  # fmt: skip
        except errors.SpoolError:
            self._answered[:0] = answered  # recorded at the next turn, unless the leases run out first
            raise
        self._recorded(answered, set(next((r["recorded"] for r in found if r["id"] is None), None) or ()))
        requests = self._requests([row for row in found if row["id"] is not None], now)
        for request in requests:
            assert client is not None
            assert group is not None
            self._flying[request.endpoint] = self._flying.get(request.endpoint, 0) + 1
            self._track(group.create_task(self._send(client, request), name=f"webhook-{request.id}"))
        return len(requests)

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _requests(self, rows: Sequence[db.Row], now: datetime) -> list[Request]:
        """The rows webhooks/turn.sql leased, as requests."""
        requests: dict[int, Request] = {}
        for row in sorted(rows, key=lambda r: r["id"]):
            request = requests.get(row["request"])
            if request is None:
                until = row["previous_until"]
                previous = row["previous_secret"] if until is not None and until > now else None
                request = requests[row["request"]] = Request(
                    row["request"], row["endpoint"], row["tenant"], row["url"], row["batch"] > 1,
                    self._keyring.signers(row["secret"], previous), row["attempts"], row["created_at"],
                    webhook_id=row["webhook_id"] or "",
                )  # fmt: skip
            request.rows.append(row["id"])
            request.payloads.append(row["payload"])
            request.created_at = min(request.created_at, row["created_at"])
        return list(requests.values())

    def _recorded(self, answered: list[Settled], recorded: set[int]) -> None:
        """Count and log what became of the requests answered."""
        for settled in answered:
            if settled.request.id not in recorded:  # its rows were taken again, or removed with their endpoint
                log.warning("webhook_not_recorded", request=settled.request.id,
                            error="its lease ran out, or its endpoint went")  # fmt: skip
                continue
            self._note(settled)

    def _note(self, settled: Settled) -> None:
        request, why, next_at = settled.request, settled.why, settled.next_at
        outcome = "delivered" if why is None else "failed" if next_at is not None else "dead"
        metrics.WEBHOOKS_SENT.labels(endpoint=str(request.endpoint), outcome=outcome).inc()
        if why is not None:
            log.warning("webhook_failed" if next_at is not None else "webhook_dead", endpoint=request.endpoint,
                        tenant=request.tenant, request=request.webhook_id, events=len(request.payloads),
                        attempts=request.attempts, error=why,
                        retry_at=next_at.isoformat() if next_at is not None else None)  # fmt: skip

    async def _send(self, client: http_client.Client, request: Request) -> None:
        try:
            why = await self._answer(client, request)
            next_at = self._retry_at(request, self._now()) if why is not None else None
            self._answered.append(Settled(request, why, next_at))
        finally:
            self._wake.set()  # a turn records it, and takes what its place lets go

    async def _answer(self, client: http_client.Client, request: Request) -> str | None:
        """The POST, counted in flight to its endpoint meanwhile. A first attempt's
        answer wakes no turn: the consumer takes it (or hands it over, see _handed)."""
        try:
            return await self._post(client, request)
        finally:
            self._flying[request.endpoint] -= 1
            if not self._flying[request.endpoint]:
                del self._flying[request.endpoint]

    async def first(
        self, endpoints: Sequence[db.Row], wanted: Sequence[Item], waiting: set[tuple[int, uuid.UUID]]
    ) -> Firsts | None:
        """The first attempt of the requests of `wanted` (for `endpoints`, as
        webhooks/of_tenants.sql reads them; `waiting`: the (endpoint, message) pairs
        with rows pending, whose events go after those); None when this sender is not
        running or makes none (every request is then written)."""
        client = self._client
        if client is None or self.settings.first_wait <= 0:
            return None
        loop = asyncio.get_running_loop()
        place = {(item.endpoint, item.event): n for n, item in enumerate(wanted)}
        by_endpoint: dict[int, list[Item]] = {}
        for item in wanted:
            by_endpoint.setdefault(item.endpoint, []).append(item)
        firsts = Firsts()
        async with asyncio.TaskGroup() as group:
            for row in endpoints:
                items = by_endpoint.get(row["id"])
                if not items:
                    continue
                if self._slow.get(row["id"], 0.0) > loop.time():  # it was slow: the outbox's sender waits for it
                    firsts.rows.extend(Row(item) for item in items)
                else:
                    held: set[uuid.UUID | None] = {message for endpoint, message in waiting if endpoint == row["id"]}
                    group.create_task(self._first_of(client, row, items, held, firsts))
        firsts.rows.sort(key=lambda r: place[(r.item.endpoint, r.item.event)])
        return firsts

    async def _first_of(
        self, client: http_client.Client, endpoint: db.Row, items: list[Item], held: set[uuid.UUID | None],
        firsts: Firsts,
    ) -> None:  # fmt: skip
        """One endpoint's first attempts, in rounds: the k-th event of each message goes
        in the k-th, so that one message's go out in order, and an event of a message
        `held` (rows of it wait in the outbox) goes there after them. Up to
        `per_endpoint` requests in flight to the endpoint from this node (the sender's
        included). A failure holds the message; a request unanswered after `first_wait`
        is left to the sender (its rows leased) and the endpoint is slow: the rest of
        its events go to the outbox, now and for SLOW_FOR."""
        loop = asyncio.get_running_loop()
        now = self._now()
        until = endpoint["previous_until"]
        previous = endpoint["previous_secret"] if until is not None and until > now else None
        signing = self._keyring.signers(endpoint["secret"], previous)
        slow = False
        for turn in _rounds(items):
            waits = [slow or (item.message is not None and item.message in held) for item in turn]
            ready = [item for item, wait in zip(turn, waits, strict=True) if not wait]
            firsts.rows.extend(Row(item) for item, wait in zip(turn, waits, strict=True) if wait)
            chunks = [ready[i : i + endpoint["batch"]] for i in range(0, len(ready), endpoint["batch"])]
            running: dict[asyncio.Task[str | None], tuple[Request, list[Item], float]] = {}
            while chunks or running:
                while chunks and not slow and self._flying.get(endpoint["id"], 0) < self.settings.per_endpoint:
                    chunk = chunks.pop(0)
                    request = Request(0, endpoint["id"], endpoint["tenant"], endpoint["url"], endpoint["batch"] > 1,
                                       signing, 1, now, payloads=[item.payload for item in chunk],
                                       webhook_id=f"msg_e{chunk[0].event}_{endpoint['id']}")  # fmt: skip
                    running[self._start(client, request)] = (request, chunk, loop.time() + self.settings.first_wait)
                if not running:  # the sender's requests fill the endpoint's room: the rest go by the outbox
                    break
                due = min(deadline for _, _, deadline in running.values())
                done, _ = await asyncio.wait(running, timeout=max(0.0, due - loop.time()),
                                             return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                for task in done:
                    request, chunk, _ = running.pop(task)
                    self._first_answered(request, chunk, task, firsts, held)
                late = [task for task, (_, _, deadline) in running.items() if deadline <= loop.time()]
                if late:  # unanswered: the sender records them, and the rest waits in the outbox
                    slow = True
                    self._slow[endpoint["id"]] = loop.time() + SLOW_FOR
                    for task in list(running):
                        request, chunk, _ = running.pop(task)
                        number = next(firsts.numbers)
                        firsts.flying[number] = (request, task)
                        firsts.rows.extend(Row(item, number, request.webhook_id) for item in chunk)
                        held.update(item.message for item in chunk)
            for chunk in chunks:  # never started
                firsts.rows.extend(Row(item) for item in chunk)
                held.update(item.message for item in chunk)

    def _first_answered(
        self, request: Request, chunk: list[Item], task: asyncio.Task[str | None], firsts: Firsts,
        held: set[uuid.UUID | None],
    ) -> None:  # fmt: skip
        """Taken: counted. Refused or failed: its rows wait in the outbox, due after the
        back-off, and hold their messages' later events."""
        why = "the node stopped" if task.cancelled() else _answer_of(task)
        if why is None:
            firsts.delivered[request.endpoint] = firsts.delivered.get(request.endpoint, 0) + len(chunk)
            self._note(Settled(request, None, None))
            return
        next_at = self._retry_at(request, self._now()) or self._now()
        self._note(Settled(request, why, next_at))
        number = next(firsts.numbers)
        firsts.rows.extend(Row(item, number, request.webhook_id, next_at, why[:500]) for item in chunk)
        held.update(item.message for item in chunk)

    def _start(self, client: http_client.Client, request: Request) -> asyncio.Task[str | None]:
        assert self._group is not None  # first() runs while sending()
        self._flying[request.endpoint] = self._flying.get(request.endpoint, 0) + 1
        task = self._group.create_task(self._answer(client, request), name=f"webhook-{request.webhook_id}")
        self._track(task)
        return task

    def hand_over(self, firsts: Firsts, sent: dict[int, list[int]]) -> None:
        """Once the rows of the first attempts still in flight are committed: their
        answers are recorded by this sender's turns, like those of its own requests."""
        for number, (request, task) in firsts.flying.items():
            rows = sent.get(number)
            if rows:
                request.id, request.rows = rows[0], rows
                task.add_done_callback(functools.partial(self._handed, request))

    def _handed(self, request: Request, task: asyncio.Task[str | None]) -> None:
        if task.cancelled():
            return  # its lease runs out, and it is sent again
        why = _answer_of(task)
        next_at = self._retry_at(request, self._now()) if why is not None else None
        self._answered.append(Settled(request, why, next_at))
        self._wake.set()

    async def _post(self, client: http_client.Client, request: Request) -> str | None:
        """None when the endpoint took the request (2xx), else why not."""
        refused = http_client.refusal(request.url, self._guard())
        if refused is not None:
            return refused
        now = self._now()
        body = request.body()
        headers = {**webhooks.headers(request.signing, request.webhook_id, now, body),
                   "content-type": "application/json", "user-agent": "mtad-webhooks"}  # fmt: skip
        try:
            answer = await client.request("POST", request.url, body=body.encode(), headers=headers,
                                          read=self.settings.max_response)  # fmt: skip
        except errors.HttpError as exc:
            return str(exc) if exc.said else exc.cause
        return None if 200 <= answer.status < 300 else f"HTTP {answer.status}"

    async def test(self, endpoint: webhooks.Endpoint) -> str | None:
        """Send the endpoint a `test` event now (in an array when it takes batches);
        None when it answered 2xx, else why not."""
        now = self._now()
        try:
            signing = await webhooks.signers(self._db, self._sealer, endpoint.id, now)
        except errors.NotFound:
            return "the endpoint was removed"
        body = json.dumps({"type": "test", "timestamp": now.isoformat(),
                           "data": {"tenant": endpoint.tenant, "endpoint": endpoint.id}})  # fmt: skip
        request = Request(0, endpoint.id, endpoint.tenant, endpoint.url, endpoint.batch > 1, signing, 1, now,
                           payloads=[body], webhook_id=f"msg_test_{secrets.token_hex(8)}")  # fmt: skip
        async with self.client() as client:
            return await self._post(client, request)

    def _retry_at(self, request: Request, now: datetime) -> datetime | None:
        """When a failed request is due again, None when it is given up."""
        delay = min(self.settings.retry_max, self.settings.retry_base * 2 ** max(0, request.attempts - 1))
        at = now + timedelta(seconds=delay * self._rng.uniform(0.5, 1.5))
        if at - request.created_at > timedelta(seconds=self.settings.max_age):
            return None
        return at
