"""Webhook delivery: each event, to each endpoint of its tenant that wants it, at
least once, in order per message.

`Outbox` is the event consumer. For each batch of events it reads, this node's
`Sender` makes the first attempt of their requests itself, outside any transaction
and before the position moves: what an endpoint takes then is only counted
(`webhook_delivered`). What did not go is written to `webhook_messages` (migration
0017) in the transaction that moves the position, so each is written exactly once
whatever happens to the node:

- a request that failed, due again after a back-off, with its rows and webhook-id;
- a request still unanswered after `first_wait`: leased by this node, whose
  sender records its answer like any other (the consumer does not wait longer),
  and the endpoint's other events: it is slow, and for `SLOW_FOR` its events go
  by the outbox;
- the events of a message with rows of the endpoint pending (they go after those,
  in order), and what the endpoint's room in flight left over.

Where the node sends nothing (`enabled = false`, or its sender is not running),
every request is written. Every node's `Sender` leases due rows as requests (up to
the endpoint's batch of rows each, and only the oldest pending row of each
message), signs them (mtad.feedback.webhooks) and POSTs them with aiohttp:

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
octets.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import itertools
import json
import random
import secrets
import socket
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import structlog
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from standardwebhooks.webhooks import Webhook

from mtad import db
from mtad.base import errors, metrics, vault
from mtad.feedback import consumers, tail, webhooks

log = structlog.get_logger("mtad.webhooks")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
CHANNEL = "mtad_webhooks"  # notified when rows are written (webhooks/enqueue.sql)
REPLAY_BATCH = 1000  # events read, then written as requests, at a time
FLUSH = 5.0  # seconds a stopping sender has to record what was answered
SLOW_FOR = 60.0  # seconds an endpoint that kept a first attempt past first_wait gets its events by the outbox


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """[webhooks]: how the requests are sent."""

    enabled: bool = True  # this node sends webhook requests
    timeout: float = 10.0  # seconds for one request, answer included
    max_response: int = 64 * 1024  # octets of an answer read
    retry_base: float = 5.0  # seconds before the first retry; doubling
    retry_max: float = 3600.0  # seconds between retries at most
    max_age: float = 24 * 3600.0  # seconds after the event a failing request is given up (dead)
    per_endpoint: int = 4  # requests in flight to one endpoint at most
    in_flight: int = 64  # requests in flight from this node at most
    poll: float = 1.0  # seconds between looks for due requests
    lease: float = 60.0  # seconds a node holds a request it sends
    allow_networks: tuple[Network, ...] = ()  # inside addresses an endpoint may have (loopback, private, ...)
    first_wait: float = 2.0  # seconds the consumer waits for first attempts; 0: every request is written


class Outbox:
    """The event consumer: first attempts by `sender` outside the transaction
    (consumers.Attempting), then the outbox rows of the rest in it."""

    name = "webhooks"
    kinds: frozenset[str] | None = None  # every kind: each endpoint says which it wants

    def __init__(self, sender: Sender | None = None, now: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self._sender = sender  # None: every request is written, for any node's sender
        self._now = now
        self._attempted: tuple[tuple[int, int, int], list[_Item], _Firsts] | None = None  # a batch's, by its events

    async def attempt(self, conn: db.Connection, batch: Sequence[consumers.Stored]) -> None:
        self._attempted = None
        if self._sender is None:
            return
        found, wanted = await _wanted_of(conn, batch)
        firsts = await self._sender.first(found, wanted, await _waiting(conn, wanted)) if wanted else None
        self._attempted = (_key(batch), wanted, firsts or _Firsts(rows=[_Row(item) for item in wanted]))

    async def handle(self, conn: db.Connection, batch: Sequence[consumers.Stored]) -> Callable[[], None] | None:
        attempted, self._attempted = self._attempted, None
        if attempted is not None and attempted[0] == _key(batch):
            _, wanted, firsts = attempted
        else:  # not attempted (no sender on this node): every request is written
            _, wanted = await _wanted_of(conn, batch)
            firsts = _Firsts(rows=[_Row(item) for item in wanted])
        if not wanted:
            return None
        now, sender = self._now(), self._sender
        if sender is None:
            await _write(conn, firsts, now, "", now)
            return None
        sent = await _write(conn, firsts, now, sender.node, now + timedelta(seconds=sender.settings.lease))
        if firsts.rows:
            sender.wake()
        return functools.partial(sender.hand_over, firsts, sent) if firsts.flying else None


def _key(batch: Sequence[consumers.Stored]) -> tuple[int, int, int]:
    return batch[0].id, batch[-1].id, len(batch)


async def _wanted_of(conn: db.Connection, batch: Sequence[consumers.Stored]) -> tuple[list[db.Row], list[_Item]]:
    """The endpoints of the batch's tenants (webhooks/of_tenants.sql), and an item per
    event and endpoint that wants it."""
    tenants = sorted({event.tenant for event in batch if event.tenant})
    found = await conn.fetch("webhooks/of_tenants", tenants) if tenants else []
    return found, _wanted([webhooks.endpoint_of(row) for row in found], batch)


async def _waiting(conn: db.Connection, wanted: Sequence[_Item]) -> set[tuple[int, uuid.UUID]]:
    """Of the items' (endpoint, message) pairs, those with rows pending in the outbox."""
    endpoints = sorted({item.endpoint for item in wanted})
    messages = list({item.message for item in wanted if item.message is not None})
    if not endpoints or not messages:
        return set()
    return {(row["endpoint"], row["message"]) for row in await conn.fetch("webhooks/waiting", endpoints, messages)}


async def replay(
    database: db.Database,
    tenant: str,
    moment: datetime,
    endpoint: int | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    """Write again the requests of the tenant's events since `moment`, to one of its
    endpoints or to each that wants them; returns how many. NotFound when the tenant
    has no such endpoint."""
    endpoints = [e for e in await webhooks.listing(database, tenant) if endpoint is None or e.id == endpoint]
    if not endpoints:
        raise errors.NotFound(f"tenant {tenant!r} has no webhook endpoint" + (f" {endpoint}" if endpoint else ""))
    written, pending = 0, []
    async for event in tail.since(database, tail.Filter(tenant=tenant), moment):
        pending.append(event)
        if len(pending) >= REPLAY_BATCH:
            written += await _enqueue(database, _wanted(endpoints, pending), now())
            pending.clear()
    return written + await _enqueue(database, _wanted(endpoints, pending), now())


def _wanted(endpoints: Sequence[webhooks.Endpoint], batch: Sequence[consumers.Stored]) -> list[_Item]:
    """One item per event and endpoint of its tenant that wants it, in the batch's order."""
    return [_Item(endpoint.id, event.id, event.message, payload(event)) for event in batch for endpoint in endpoints
            if endpoint.tenant == event.tenant and endpoint.wants(event.kind)]  # fmt: skip


def _answer_of(task: asyncio.Task[str | None]) -> str | None:
    """What a finished (not cancelled) POST came to: None when taken, else why not."""
    failed = task.exception()
    return task.result() if failed is None else f"{type(failed).__name__}: {failed}"


def _rounds(items: Sequence[_Item]) -> list[list[_Item]]:
    """The items in rounds: the k-th of each message in the k-th (those of no message in the first)."""
    rounds: list[list[_Item]] = []
    seen: dict[uuid.UUID, int] = {}
    for item in items:
        k = 0
        if item.message is not None:
            k = seen[item.message] = seen.get(item.message, -1) + 1
        if k == len(rounds):
            rounds.append([])
        rounds[k].append(item)
    return rounds


async def _enqueue(database: db.Database | db.Connection, items: list[_Item], now: datetime) -> int:
    """Rows never sent, for every node's sender."""
    if items:
        await _write(database, _Firsts(rows=[_Row(item) for item in items]), now, "", now)
    return len(items)


async def _write(
    database: db.Database | db.Connection, firsts: _Firsts, now: datetime, node: str, until: datetime
) -> dict[int, list[int]]:
    """The rows of what did not go at the first attempt, and the count of what did;
    returns the rows of each request sent, by its number."""
    if not firsts.rows and not firsts.delivered:
        return {}
    rows = firsts.rows
    found = await database.fetch(
        "webhooks/enqueue", [r.item.endpoint for r in rows], [r.item.event for r in rows],
        [r.item.message for r in rows], [r.item.payload for r in rows], now, [r.sent for r in rows],
        [r.webhook_id for r in rows], [r.next_at for r in rows], [r.error for r in rows], node, until,
        list(firsts.delivered), list(firsts.delivered.values()),
    )  # fmt: skip
    return {row["sent"]: row["rows"] for row in found if row["sent"] is not None}


def payload(event: consumers.Stored) -> str:
    """The JSON body of an event's request (Standard Webhooks: type, timestamp, data)."""
    data = {"event_id": event.id, "tenant": event.tenant, "message": str(event.message) if event.message else None,
            "delivery": event.delivery, **event.data}  # fmt: skip
    return json.dumps({"type": event.kind, "timestamp": event.at.isoformat(), "data": data}, default=str)


@dataclass(slots=True)
class _Request:
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
class _Settled:
    request: _Request
    why: str | None  # None: delivered
    next_at: datetime | None  # due again then; None with a why: dead


@dataclass(frozen=True, slots=True)
class _Item:
    """One event for one endpoint."""

    endpoint: int
    event: int
    message: uuid.UUID | None
    payload: str


@dataclass(frozen=True, slots=True)
class _Row:
    """An item the outbox gets: never sent, or sent once in request number `sent`."""

    item: _Item
    sent: int | None = None
    webhook_id: str | None = None
    next_at: datetime | None = None  # due again then; None with `sent`: still in flight (leased)
    error: str | None = None


@dataclass(slots=True)
class _Firsts:
    """What became of a batch's first attempts."""

    rows: list[_Row] = field(default_factory=list)  # for the outbox, in the batch's order
    delivered: dict[int, int] = field(default_factory=dict)  # events taken, by endpoint
    flying: dict[int, tuple[_Request, asyncio.Task[str | None]]] = field(default_factory=dict)  # by number
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


class Refused(OSError):
    """The endpoint's address is not one a request may go to."""


class _Guard(AbstractResolver):
    """aiohttp's resolver, keeping only the addresses a request may go to: not
    loopback, link-local, private, multicast or reserved, in any IPv6 form that
    carries one (`allows`), unless `allowed` holds them."""

    def __init__(self, allowed: Sequence[Network]) -> None:
        self._resolver = DefaultResolver()
        self._allowed = tuple(allowed)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        kept = [r for r in found if self.allows(ipaddress.ip_address(r["host"]))]
        if not kept:
            raise Refused(f"{host} resolves to {', '.join(sorted({r['host'] for r in found}))}: not an address a "
                          "webhook may go to (see [webhooks] allow_networks)")  # fmt: skip
        return kept

    def allows(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return allows(address, self._allowed)

    async def close(self) -> None:
        await self._resolver.close()


# IPv6 prefixes whose last 32 bits are an IPv4 address, the same host by another name.
_CARRYING = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64, the well-known prefix (RFC 6052)
    ipaddress.ip_network("::ffff:0:0/96"),  # IPv4-mapped
    ipaddress.ip_network("::ffff:0:0:0/96"),  # IPv4-translated (RFC 2765)
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated; :: and ::1 are in it too)
)
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local-use NAT64 (RFC 8215): inside by definition


def allows(address: ipaddress.IPv4Address | ipaddress.IPv6Address, allowed: Sequence[Network]) -> bool:
    """Whether a request may go to the address: a global one, or one of `allowed`. An
    IPv6 address that carries an IPv4 one is judged as that IPv4 address would be:
    NAT64, IPv4-mapped, -translated or -compatible by it alone; a tunnel (6to4,
    Teredo) only when it is global itself and every IPv4 address it carries is
    allowed. Sync, no I/O."""
    if any(address in network for network in allowed):
        return True
    if isinstance(address, ipaddress.IPv6Address):
        if address in _NAT64_LOCAL:
            return False
        if any(address in prefix for prefix in _CARRYING):
            return allows(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), allowed)
        tunnelled = [address.sixtofour] if address.sixtofour else list(address.teredo or ())
        if tunnelled and not all(allows(carried, allowed) for carried in tunnelled):
            return False
    return address.is_global and not address.is_multicast


@functools.lru_cache(maxsize=4096)
def refusal(url: str, allowed: tuple[Network, ...]) -> str | None:
    """Why a request may not go to a URL that names an address (aiohttp resolves no
    address, so the guard never sees it), else None. Kept per URL: asked per request."""
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: the guard checks what it resolves to
    if allows(address, allowed):
        return None
    return f"{host}: not an address a webhook may go to (see [webhooks] allow_networks)"


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
        self._tasks: set[asyncio.Task[Any]] = set()
        self._session: aiohttp.ClientSession | None = None  # while it runs: first attempts go through it
        self._slow: dict[int, float] = {}  # endpoint -> until when (loop time) it gets no first attempt
        self._listener: db.Listener | None = None
        self._conn: db.Connection | None = None  # its own while it runs
        self._answered: list[_Settled] = []  # recorded at the next turn

    def wake(self) -> None:
        self._wake.set()

    def session(self) -> aiohttp.ClientSession:
        """The HTTP client the requests go through (its resolver keeps the inside out)."""
        guard = _Guard(self.settings.allow_networks)
        connector = aiohttp.TCPConnector(resolver=guard, limit=self.settings.in_flight)
        return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self.settings.timeout))

    @contextlib.asynccontextmanager
    async def sending(self) -> AsyncIterator[aiohttp.ClientSession]:
        """The HTTP client, open; the consumer's first attempts go through it meanwhile."""
        async with self.session() as session:
            self._session = session
            try:
                yield session
            finally:
                self._session = None

    async def run(self) -> None:
        """Until cancelled: a turn whenever woken (NOTIFY when rows are written, an
        answer), or every poll."""
        async with self.sending() as session, contextlib.AsyncExitStack() as stopping:
            stopping.push_async_callback(self._stop)
            while True:
                await self._listen()
                self._wake.clear()
                await self._held_turn(session)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.poll):
                        await self._wake.wait()

    async def _held_turn(self, session: aiohttp.ClientSession) -> None:
        """A turn on the sender's own connection, opened first when there is none; its
        statement ends even when the sender is stopped meanwhile (one round trip).

        On that connection a commit is not waited for (synchronous_commit off): a turn
        lost with the last moments before a crash only sends its requests again."""
        try:
            if self._conn is None:
                self._conn = await db.connect_once(self._db.dsn)
                await self._conn.execute("webhooks/commit_async")
            turning = asyncio.ensure_future(self.send_due(session))
            try:
                await asyncio.shield(turning)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await turning
                raise
        except errors.DatabaseUnavailable:  # another connection, the next time
            await self._let_go()
        except errors.SpoolError:
            pass  # the next turn tries again; the poll makes sure there is one

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
        if self._listener is not None:
            await self._listener.close()

    async def _listen(self) -> None:
        """LISTEN for new rows, again after the connection was lost; meanwhile the poll finds them."""
        if self._listener is not None and self._listener.alive:
            return
        try:
            self._listener = await db.Listener.open(self._db.dsn, CHANNEL, self._wake.set)
        except errors.DatabaseUnavailable as exc:
            log.warning("listen_failed", channel=CHANNEL, error=str(exc))

    async def send_due(self, session: aiohttp.ClientSession) -> int:
        """Record what was answered since the last turn, lease what is due and may go now,
        and start sending it, in one statement; returns how many requests started."""
        return await self._turn(session)

    async def drain(self) -> None:
        """Until every request started has been answered or failed, and that is recorded
        (tests, tools)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._turn(None)

    async def _turn(self, session: aiohttp.ClientSession | None) -> int:
        """Settle what was answered and, with a session, lease and start what may go now."""
        answered, self._answered = self._answered, []
        room = self.settings.in_flight - len(self._tasks) if session is not None else 0
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
            assert session is not None
            self._flying[request.endpoint] = self._flying.get(request.endpoint, 0) + 1
            task = asyncio.create_task(self._send(session, request), name=f"webhook-{request.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(requests)

    def _requests(self, rows: Sequence[db.Row], now: datetime) -> list[_Request]:
        """The rows webhooks/turn.sql leased, as requests."""
        requests: dict[int, _Request] = {}
        for row in sorted(rows, key=lambda r: r["id"]):
            request = requests.get(row["request"])
            if request is None:
                until = row["previous_until"]
                previous = row["previous_secret"] if until is not None and until > now else None
                request = requests[row["request"]] = _Request(
                    row["request"], row["endpoint"], row["tenant"], row["url"], row["batch"] > 1,
                    self._keyring.signers(row["secret"], previous), row["attempts"], row["created_at"],
                    webhook_id=row["webhook_id"] or "",
                )  # fmt: skip
            request.rows.append(row["id"])
            request.payloads.append(row["payload"])
            request.created_at = min(request.created_at, row["created_at"])
        return list(requests.values())

    def _recorded(self, answered: list[_Settled], recorded: set[int]) -> None:
        """Count and log what became of the requests answered."""
        for settled in answered:
            if settled.request.id not in recorded:  # its rows were taken again, or removed with their endpoint
                log.warning("webhook_not_recorded", request=settled.request.id,
                            error="its lease ran out, or its endpoint went")  # fmt: skip
                continue
            self._note(settled)

    def _note(self, settled: _Settled) -> None:
        request, why, next_at = settled.request, settled.why, settled.next_at
        outcome = "delivered" if why is None else "failed" if next_at is not None else "dead"
        metrics.WEBHOOKS_SENT.labels(endpoint=str(request.endpoint), outcome=outcome).inc()
        if why is not None:
            log.warning("webhook_failed" if next_at is not None else "webhook_dead", endpoint=request.endpoint,
                        tenant=request.tenant, request=request.webhook_id, events=len(request.payloads),
                        attempts=request.attempts, error=why,
                        retry_at=next_at.isoformat() if next_at is not None else None)  # fmt: skip

    async def _send(self, session: aiohttp.ClientSession, request: _Request) -> None:
        try:
            why = await self._answer(session, request)
            next_at = self._retry_at(request, self._now()) if why is not None else None
            self._answered.append(_Settled(request, why, next_at))
        finally:
            self._wake.set()  # a turn records it, and takes what its place lets go

    async def _answer(self, session: aiohttp.ClientSession, request: _Request) -> str | None:
        """The POST, counted in flight to its endpoint meanwhile. A first attempt's
        answer wakes no turn: the consumer takes it (or hands it over, see _handed)."""
        try:
            return await self._post(session, request)
        finally:
            self._flying[request.endpoint] -= 1
            if not self._flying[request.endpoint]:
                del self._flying[request.endpoint]

    async def first(
        self, endpoints: Sequence[db.Row], wanted: Sequence[_Item], waiting: set[tuple[int, uuid.UUID]]
    ) -> _Firsts | None:
        """The first attempt of the requests of `wanted` (for `endpoints`, as
        webhooks/of_tenants.sql reads them; `waiting`: the (endpoint, message) pairs
        with rows pending, whose events go after those); None when this sender is not
        running or makes none (every request is then written)."""
        session = self._session
        if session is None or self.settings.first_wait <= 0:
            return None
        loop = asyncio.get_running_loop()
        place = {(item.endpoint, item.event): n for n, item in enumerate(wanted)}
        by_endpoint: dict[int, list[_Item]] = {}
        for item in wanted:
            by_endpoint.setdefault(item.endpoint, []).append(item)
        firsts = _Firsts()
        async with asyncio.TaskGroup() as group:
            for row in endpoints:
                items = by_endpoint.get(row["id"])
                if not items:
                    continue
                if self._slow.get(row["id"], 0.0) > loop.time():  # it was slow: the outbox's sender waits for it
                    firsts.rows.extend(_Row(item) for item in items)
                else:
                    held: set[uuid.UUID | None] = {message for endpoint, message in waiting if endpoint == row["id"]}
                    group.create_task(self._first_of(session, row, items, held, firsts))
        firsts.rows.sort(key=lambda r: place[(r.item.endpoint, r.item.event)])
        return firsts

    async def _first_of(
        self, session: aiohttp.ClientSession, endpoint: db.Row, items: list[_Item], held: set[uuid.UUID | None],
        firsts: _Firsts,
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
            firsts.rows.extend(_Row(item) for item, wait in zip(turn, waits, strict=True) if wait)
            chunks = [ready[i : i + endpoint["batch"]] for i in range(0, len(ready), endpoint["batch"])]
            running: dict[asyncio.Task[str | None], tuple[_Request, list[_Item], float]] = {}
            while chunks or running:
                while chunks and not slow and self._flying.get(endpoint["id"], 0) < self.settings.per_endpoint:
                    chunk = chunks.pop(0)
                    request = _Request(0, endpoint["id"], endpoint["tenant"], endpoint["url"], endpoint["batch"] > 1,
                                       signing, 1, now, payloads=[item.payload for item in chunk],
                                       webhook_id=f"msg_e{chunk[0].event}_{endpoint['id']}")  # fmt: skip
                    running[self._start(session, request)] = (request, chunk, loop.time() + self.settings.first_wait)
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
                        firsts.rows.extend(_Row(item, number, request.webhook_id) for item in chunk)
                        held.update(item.message for item in chunk)
            for chunk in chunks:  # never started
                firsts.rows.extend(_Row(item) for item in chunk)
                held.update(item.message for item in chunk)

    def _first_answered(
        self, request: _Request, chunk: list[_Item], task: asyncio.Task[str | None], firsts: _Firsts,
        held: set[uuid.UUID | None],
    ) -> None:  # fmt: skip
        """Taken: counted. Refused or failed: its rows wait in the outbox, due after the
        back-off, and hold their messages' later events."""
        why = "the node stopped" if task.cancelled() else _answer_of(task)
        if why is None:
            firsts.delivered[request.endpoint] = firsts.delivered.get(request.endpoint, 0) + len(chunk)
            self._note(_Settled(request, None, None))
            return
        next_at = self._retry_at(request, self._now()) or self._now()
        self._note(_Settled(request, why, next_at))
        number = next(firsts.numbers)
        firsts.rows.extend(_Row(item, number, request.webhook_id, next_at, why[:500]) for item in chunk)
        held.update(item.message for item in chunk)

    def _start(self, session: aiohttp.ClientSession, request: _Request) -> asyncio.Task[str | None]:
        self._flying[request.endpoint] = self._flying.get(request.endpoint, 0) + 1
        task = asyncio.create_task(self._answer(session, request), name=f"webhook-{request.webhook_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def hand_over(self, firsts: _Firsts, sent: dict[int, list[int]]) -> None:
        """Once the rows of the first attempts still in flight are committed: their
        answers are recorded by this sender's turns, like those of its own requests."""
        for number, (request, task) in firsts.flying.items():
            rows = sent.get(number)
            if rows:
                request.id, request.rows = rows[0], rows
                task.add_done_callback(functools.partial(self._handed, request))

    def _handed(self, request: _Request, task: asyncio.Task[str | None]) -> None:
        if task.cancelled():
            return  # its lease runs out, and it is sent again
        why = _answer_of(task)
        next_at = self._retry_at(request, self._now()) if why is not None else None
        self._answered.append(_Settled(request, why, next_at))
        self._wake.set()

    async def _post(self, session: aiohttp.ClientSession, request: _Request) -> str | None:
        """None when the endpoint took the request (2xx), else why not."""
        refused = refusal(request.url, self.settings.allow_networks)
        if refused is not None:
            return refused
        now = self._now()
        body = request.body()
        headers = {**webhooks.headers(request.signing, request.webhook_id, now, body),
                   "content-type": "application/json", "user-agent": "mtad-webhooks"}  # fmt: skip
        try:
            async with session.post(request.url, data=body.encode(), headers=headers,
                                    allow_redirects=False) as answer:  # fmt: skip
                await answer.content.read(self.settings.max_response)
                if 200 <= answer.status < 300:
                    return None
                return f"HTTP {answer.status}"
        except Refused as exc:
            return str(exc)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, Refused) else exc
            return f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__

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
        request = _Request(0, endpoint.id, endpoint.tenant, endpoint.url, endpoint.batch > 1, signing, 1, now,
                           payloads=[body], webhook_id=f"msg_test_{secrets.token_hex(8)}")  # fmt: skip
        async with self.session() as session:
            return await self._post(session, request)

    def _retry_at(self, request: _Request, now: datetime) -> datetime | None:
        """When a failed request is due again, None when it is given up."""
        delay = min(self.settings.retry_max, self.settings.retry_base * 2 ** max(0, request.attempts - 1))
        at = now + timedelta(seconds=delay * self._rng.uniform(0.5, 1.5))
        if at - request.created_at > timedelta(seconds=self.settings.max_age):
            return None
        return at
