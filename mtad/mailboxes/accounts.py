"""Accounts: sending mailboxes that mail is relayed through, each kept inside its own limits.

An account is a mailbox at a provider (Google Workspace, Microsoft 365, any SMTP
server on 587 or 465) that mtad logs in to and relays through: an address, a
smarthost, a login and an AUTH mechanism, and its limits (`Limits`: a daily cap, a
minimum gap between sends plus a jitter drawn per send, caps per second, minute and
hour; each None means no limit). Accounts belong to named account pools, and
`choosing` picks one of a pool for a send. Secrets (passwords, tokens) are stored
sealed (mtad.base.vault) by `set_secret` and read back sealed by `secret`; nothing
here opens them, and no listing returns them.

Reserve before send. Every send through an account is first reserved in
PostgreSQL by one function, `mtad_reserve` (migrations 0006, 0007, 0011), as a
transaction of its own: it takes the account's transaction-scoped advisory lock
without waiting, re-checks the account's state and limits on committed data, and
inserts a reservation. The lock and the counts live in PostgreSQL, so the limits
hold across every coroutine, process and node sharing the database; the lock is
released when `reserve` returns, so none is held across the SMTP call.

What counts as a send: every reservation, confirmed or not, with the recipients it
carries. After the receiver's 250, `confirm` it. After a definite rejection that is
not the mailbox's fault (a recipient or content refusal), `release` it: the slot
is free again (the gap still runs from it). When the outcome is unknown (a timeout, a
disconnect after DATA), or when the provider says the mailbox hit its quota or a
rate limit, `keep` it: it counts, since when we do not know whether a send went out
we err towards under-sending.

The rules, at PostgreSQL's clock (`now` None), the one clock every node shares; a
caller may give its own time instead (tests, tools).
- state: an account sends only when active; a state with an end time (`state_until`)
  is over at that time, and one without lasts until it is changed (`set_state`).
- day: the daily cap counts recipients reserved in [00:00, next 00:00) of the
  account's time zone (23 or 25 hours on the days clocks change).
- gap: a reservation stores `next_gap`, min_gap plus a jitter drawn from the
  account's [low, high] range by the caller's rng; the next send waits until the
  latest send was settled (confirmed, kept, or its lease gone) plus its next_gap, so
  that the receiver sees the gap from its answer to the next MAIL. Until it is
  settled, a send holds its mailbox: no other send of it starts (SKIPPED_SENDING).
  The jitter is kept on the mailbox, so every campaign, process and node waits the same.
- rates: at most per_second, per_minute, per_hour recipients in the window of that
  width ending at `now` (sliding windows).
- recipients: a send asks for the recipients of its transaction and is granted as
  many as the daily cap and the rates still allow (at least one); the caller sends
  that many and leaves the rest for a later send.
- health: 100 x (sends + 1) / (sends + 1 + bounces), its confirmed sends and its
  account_bounce events (refusals of a recipient or content, complaints) over the
  24 hours, since its last enable (mtad_account_health). Below its pool's floor
  an active account rests (RESTING) until the moment its health is back at the
  floor as they leave the window (mtad_account_rest): after a `bounce`, or when
  `choosing.choose_healthy` comes to it.

Costs: `reserve` is one round trip and one short transaction (a lock, two to five
index scans over the account's recent reservations, one insert). `usage` (for
`mtad accounts ls`) counts today's sends of every account. `prune` deletes
reservations that no limit looks at any more. Everything here that talks to
PostgreSQL is async and raises what mtad.db raises; nothing here catches asyncpg's
exceptions.
"""

from __future__ import annotations

import enum
import json
import random
import re
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from mtad import db
from mtad.base import errors
from mtad.mailboxes import settings

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")  # as the accounts.name CHECK
POOL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # as the accounts.pool CHECK
ADDRESS = re.compile(r"^[^@\s]+@[^@\s]+$")  # as the accounts.address CHECK


class State(enum.StrEnum):
    """The state of an account. Mirrors the Postgres enum account_state (a test checks)."""

    ACTIVE = "active"  # may send, within its limits
    DISABLED = "disabled"  # an operator turned it off
    DISCONNECTED = "disconnected"  # its credentials were refused: until an operator re-enables it
    PARKED = "parked"  # the provider's daily quota is used up: until the day resets
    COOLING = "cooling"  # the provider throttled it: until state_until
    TRIPPED = "tripped"  # its circuit breaker opened: until state_until
    RESTING = "resting"  # its health fell below its pool's floor: until state_until, when it is back at it


# Which state may follow which (the "from" state being the state at the time of the
# move: a timed state whose end has passed counts as ACTIVE). An operator may always
# enable or disable; what mtad does on its own (cool, park, trip, rest, disconnect)
# never overrides an operator's disable or a disconnect, and never shortens a park,
# a trip or a rest. A move to the same state sets a new end time and reason.
TRANSITIONS: Mapping[State, frozenset[State]] = {
    State.ACTIVE: frozenset(State),
    State.COOLING: frozenset(State),
    State.PARKED: frozenset({State.ACTIVE, State.DISABLED, State.DISCONNECTED, State.PARKED}),
    State.TRIPPED: frozenset({State.ACTIVE, State.DISABLED, State.DISCONNECTED, State.TRIPPED}),
    State.RESTING: frozenset({State.ACTIVE, State.DISABLED, State.DISCONNECTED, State.RESTING}),
    State.DISCONNECTED: frozenset({State.ACTIVE, State.DISABLED, State.DISCONNECTED}),
    State.DISABLED: frozenset({State.ACTIVE, State.DISABLED}),
}


class Tls(enum.StrEnum):
    """How the session to the smarthost is secured (the certificate is always verified)."""

    STARTTLS = "starttls"  # connect in clear, then STARTTLS (port 587)
    IMPLICIT = "implicit"  # TLS from the first byte (port 465)


class Mechanism(enum.StrEnum):
    """The AUTH mechanism used with the smarthost."""

    PLAIN = "plain"
    LOGIN = "login"
    XOAUTH2 = "xoauth2"  # Google and Microsoft: an access token from a refresh token


class Answer(enum.StrEnum):
    """What `reserve` answers (mtad_reserve's answers; its comment has the details)."""

    RESERVED = "reserved"  # the send is reserved: go ahead
    SKIPPED_LOCKED = "skipped-locked"  # another caller is reserving on this account right now
    SKIPPED_DISABLED = "skipped-disabled"  # disabled or disconnected: waits for an operator (or state_until)
    SKIPPED_COOLDOWN = "skipped-cooldown"  # cooling, parked, tripped or resting until retry_at
    SKIPPED_DAILY_LIMIT = "skipped-daily-limit"  # the daily cap is reached until retry_at (next 00:00 local)
    SKIPPED_GAP = "skipped-gap"  # the gap after the latest send ends at retry_at
    SKIPPED_SENDING = "skipped-sending"  # the latest send is in flight; its gap ends at retry_at at the soonest
    SKIPPED_RATE = "skipped-rate"  # a per-second, per-minute or per-hour cap is reached until retry_at


class ReservationState(enum.StrEnum):
    """The state of a reservation. Mirrors the Postgres enum reservation_state."""

    RESERVED = "reserved"  # taken before the send; the outcome is not known (yet)
    CONFIRMED = "confirmed"  # the receiver answered 250
    RELEASED = "released"  # refused for its recipient or content, or never began: it counts against no cap


@dataclass(frozen=True, slots=True)
class Limits:
    """An account's limits; None means no limit."""

    daily_cap: int | None = None  # recipients per day, in the account's time zone
    min_gap: float | None = None  # seconds from the answer to one send to the next send
    jitter: tuple[float, float] | None = None  # (low, high) seconds drawn per send and added to min_gap
    per_second: int | None = None  # recipients in any window of one second
    per_minute: int | None = None  # recipients in any window of one minute
    per_hour: int | None = None  # recipients in any window of one hour


@dataclass(frozen=True, slots=True)
class Account:
    """A sending mailbox. `add` takes one made by the operator (id 0, state and
    timestamps ignored) and returns it as stored."""

    name: str  # chosen by the operator, unique
    address: str  # the mailbox
    pool: str  # the account pool it belongs to
    host: str  # the smarthost
    port: int
    login: str
    tls: Tls = Tls.STARTTLS
    mechanism: Mechanism = Mechanism.PLAIN
    limits: Limits = Limits()
    time_zone: str = "UTC"  # where the day of the daily cap starts at 00:00
    id: int = 0  # set by PostgreSQL
    state: State = State.ACTIVE
    state_until: datetime | None = None  # when the state ends; None: when changed
    state_reason: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer of `reserve`. reservation: the id, for RESERVED only. retry_at: when
    what refused the send lifts by itself (None for SKIPPED_LOCKED, and for a state
    that waits for an operator); a release may free a slot sooner."""

    answer: Answer
    reservation: int | None = None
    retry_at: datetime | None = None
    lapsed: State | None = None  # RESERVED after this timed state (cooling, parked, ...) ended: it is recorded
    granted: int = 0  # RESERVED: the recipients the send may carry (1 to those asked for)
    reserved_at: datetime | None = None  # RESERVED: when, by the clock the limits were checked at


@dataclass(frozen=True, slots=True)
class Reservation:
    """A send reserved through `account` by `reserve` or `choosing`: confirm, release or keep it."""

    id: int
    account: Account
    reserved_at: datetime
    lapsed: State | None = None  # the timed state of the account that this reservation ended
    recipients: int = 1  # the recipients the send may carry (the first of those asked for)


@dataclass(frozen=True, slots=True)
class Rested:
    """An account moved to RESTING: its health fell below its pool's floor."""

    account: Account  # as it was before (active)
    health: int
    until: datetime  # when its health is back at the floor, as its sends and bounces leave the 24 hours


@dataclass(frozen=True, slots=True)
class Usage:
    """What an account has sent, as seen at some time (`usage`)."""

    account: Account
    today: int  # recipients reserved in the account's day
    last_send: datetime | None  # the latest reservation
    gap_until: datetime | None  # when the gap after it ends (None: none, or it is still sending)
    health: int = 100  # 0-100: lowered by its bounces and complaints of the last 24 hours (since an enable)
    sending: bool = False  # the latest send is in flight and holds the mailbox


@dataclass(frozen=True, slots=True)
class Credentials:
    """What logging in as an account needs, sealed (mtad.base.vault): its secret (the
    password, or the refresh token for xoauth2) and, for xoauth2, its OAuth client."""

    secret: bytes | None  # None: none stored
    token_url: str | None = None
    client_id: str | None = None
    client_secret: bytes | None = field(default=None, repr=False)
    scope: str | None = None


_DECLARED = settings.Accounts()  # [accounts]: the breaker's keys


@dataclass(frozen=True, slots=True)
class Breaker:
    """When repeated failures take an account out of the rotation (`failure`)."""

    failures: int = _DECLARED.breaker_failures  # failures of the account in `window` that trip it
    window: float = _DECLARED.breaker_window  # seconds
    min_successes: int = _DECLARED.breaker_min_successes  # confirmed sends of the system in `window`, else no trip
    trip_for: float = _DECLARED.trip_duration  # seconds a trip lasts
    trips_per_day: int = _DECLARED.trips_to_disconnect  # the trip in a day that disconnects the account instead


def problems(account: Account) -> list[str]:
    """Everything wrong with an account's settings (sync, no I/O); empty when it is fine."""
    found: list[str] = []
    name = account.name
    if not NAME.match(name):
        found.append(f"account name {name!r}: 1-128 letters, digits, '.', '_', '@', '+', '-', from a letter or digit")
    if not ADDRESS.match(account.address):
        found.append(f"account {name!r}: address {account.address!r} is not local@domain")
    if not POOL.match(account.pool):
        found.append(f"account {name!r}: pool {account.pool!r}: 1-64 letters, digits, '.', '_' and '-'")
    if not account.host or any(c.isspace() for c in account.host):
        found.append(f"account {name!r}: smarthost {account.host!r} is not a host name")
    if not 1 <= account.port <= 65535:
        found.append(f"account {name!r}: port {account.port} is not in 1-65535")
    if not account.login:
        found.append(f"account {name!r}: the login must not be empty")
    limits = account.limits
    for key, value in (
        ("daily_cap", limits.daily_cap),
        ("per_second", limits.per_second),
        ("per_minute", limits.per_minute),
        ("per_hour", limits.per_hour),
    ):
        if value is not None and value < 1:
            found.append(f"account {name!r}: {key} must be at least 1 (or unset for no limit)")
    if limits.min_gap is not None and not limits.min_gap >= 0:
        found.append(f"account {name!r}: min_gap must be 0 or more seconds")
    if limits.jitter is not None and not 0 <= limits.jitter[0] <= limits.jitter[1]:
        found.append(f"account {name!r}: the jitter must be (low, high) with 0 <= low <= high")
    try:
        zoneinfo.ZoneInfo(account.time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        found.append(f"account {name!r}: unknown time zone {account.time_zone!r}")
    return found


def of_row(row: db.Row) -> Account:
    low, high = row["gap_jitter_low"], row["gap_jitter_high"]
    return Account(
        name=row["name"],
        address=row["address"],
        pool=row["pool"],
        host=row["host"],
        port=row["port"],
        login=row["login"],
        tls=Tls(row["tls"]),
        mechanism=Mechanism(row["mechanism"]),
        limits=Limits(
            daily_cap=row["daily_cap"],
            min_gap=row["min_gap"],
            jitter=None if low is None else (low, high),
            per_second=row["per_second"],
            per_minute=row["per_minute"],
            per_hour=row["per_hour"],
        ),
        time_zone=row["time_zone"],
        id=row["id"],
        state=State(row["state"]),
        state_until=row["state_until"],
        state_reason=row["state_reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def add(database: db.Database, account: Account) -> Account:
    """Store a new account (active); returns it as stored. ConfigError lists every
    problem with its settings; Conflict if the name is taken."""
    found = problems(account)
    if found:
        raise errors.ConfigError(found)
    limits = account.limits
    low, high = limits.jitter if limits.jitter is not None else (None, None)
    try:
        row = await database.fetchrow(
            "accounts/insert",
            account.name,
            account.address,
            account.pool,
            account.host,
            account.port,
            account.tls.value,
            account.login,
            account.mechanism.value,
            limits.daily_cap,
            limits.min_gap,
            low,
            high,
            limits.per_second,
            limits.per_minute,
            limits.per_hour,
            account.time_zone,
        )
    except errors.Conflict:
        raise errors.Conflict(f"account {account.name!r} already exists") from None
    assert row is not None
    return of_row(row)


async def set_secret(database: db.Database, name: str, sealed: bytes) -> None:
    """Store the account's secret, sealed by mtad.base.vault; NotFound if there is no such account."""
    if await database.fetchval("accounts/set_secret", name, sealed) is None:
        raise errors.NotFound(f"no account {name!r}")


async def secret(database: db.Database, account_id: int) -> bytes | None:
    """The account's sealed secret (None: none stored)."""
    value = await database.fetchval("accounts/secret", account_id)
    return bytes(value) if value is not None else None


async def set_oauth(
    database: db.Database, name: str, token_url: str, client_id: str, client_secret: bytes | None, scope: str | None
) -> None:
    """Store the OAuth client of an xoauth2 account (client_secret sealed by mtad.base.vault,
    None for a public client); NotFound if there is no such account."""
    if await database.fetchval("accounts/set_oauth", name, token_url, client_id, client_secret, scope) is None:
        raise errors.NotFound(f"no account {name!r}")


async def credentials(database: db.Database, account_id: int) -> Credentials:
    """What logging in as the account needs, sealed; NotFound if there is no such account."""
    row = await database.fetchrow("accounts/credentials", account_id)
    if row is None:
        raise errors.NotFound(f"no account with id {account_id}")

    def sealed(value: Any) -> bytes | None:
        return bytes(value) if value is not None else None

    return Credentials(sealed(row["secret"]), row["oauth_token_url"], row["oauth_client_id"],
                       sealed(row["oauth_client_secret"]), row["oauth_scope"])  # fmt: skip


async def list_all(database: db.Database) -> list[Account]:
    """Every account, by pool then name."""
    return [of_row(row) for row in await database.fetch("accounts/list")]


async def get(database: db.Database, name: str) -> Account:
    """The account named `name`; NotFound if there is none."""
    row = await database.fetchrow("accounts/get", name)
    if row is None:
        raise errors.NotFound(f"no account {name!r}")
    return of_row(row)


async def usage(database: db.Database, now: datetime, pool: str | None = None) -> list[Usage]:
    """Every account (of `pool`, or all) with today's recipients, its latest send and
    the end of its gap at `now`, by pool then name (for `mtad accounts ls`). One query."""
    return [
        Usage(of_row(row), row["today"], row["last_send"], row["gap_until"], row["health"], row["sending"])
        for row in await database.fetch("accounts/usage", now, pool)
    ]


async def set_state(
    database: db.Database, name: str, state: State, until: datetime | None, reason: str | None, now: datetime
) -> Account:
    """Move the account to `state` until `until` (None: until changed) because of
    `reason`, if TRANSITIONS allows it from the state it is in at `now`; returns the
    account. One statement, so that it cannot race another move. IllegalTransition
    when the move is not allowed; NotFound when there is no such account."""
    if state is State.ACTIVE and until is not None:
        raise errors.IllegalTransition(f"account {name!r}: the active state has no end time")
    allowed_from = [s.value for s in State if state in TRANSITIONS[s]]
    row = await database.fetchrow("accounts/set_state", name, state.value, until, reason, allowed_from, now)
    if row is not None:
        return of_row(row)  # and its account_state event is written
    current = await get(database, name)  # NotFound if there is none
    raise errors.IllegalTransition(
        f"account {name!r}: {current.state.value} -> {state.value} is not allowed "
        f"(state until {current.state_until}, because {current.state_reason!r})"
    )


async def enable(database: db.Database, name: str, reason: str | None, now: datetime) -> Account:
    """Make the account active again, from any state (an operator's command)."""
    return await set_state(database, name, State.ACTIVE, None, reason, now)


async def disable(database: db.Database, name: str, reason: str | None, now: datetime) -> Account:
    """Stop the account until it is enabled, from any state (an operator's command)."""
    return await set_state(database, name, State.DISABLED, None, reason, now)


async def reserve(
    database: db.Database, account_id: int, now: datetime | None, rng: random.Random, *, want: int = 1,
    delivery: int | None = None, node: str | None = None,
) -> Decision:  # fmt: skip
    """Reserve one send of `want` recipients through the account at `now` (None:
    PostgreSQL's clock), or say why not (see Answer); `granted` says how many of them
    it may carry. `delivery` and `node`: the delivery that sends it and its node, whose
    lease bounds how long an unsettled send holds the mailbox (None: 15 minutes).

    One round trip and one transaction of its own; never waits for another caller
    (a locked account answers SKIPPED_LOCKED at once). `rng` draws this send's gap
    jitter. NotFound if there is no such account. OutcomeUnknown when the connection
    broke during the call: a reservation may have been made, and if so it counts
    (under-sending, again); do not send.
    """
    row = await database.call("accounts/reserve", account_id, now, rng.random(), want, delivery, node)
    assert row is not None
    if row["answer"] == "missing":
        raise errors.NotFound(f"no account with id {account_id}")
    lapsed = State(row["lapsed"]) if row["lapsed"] is not None else None
    return Decision(Answer(row["answer"]), row["reservation"], row["retry_at"], lapsed, row["granted"] or 0,
                    row["reserved_at"])  # fmt: skip


async def confirm(
    database: db.Database, reservation_id: int, at: datetime | None = None, delivery: int | None = None
) -> bool:
    """The receiver answered 250 at `at` (None: now, by PostgreSQL's clock) to the send
    of `delivery`: mark the reservation confirmed (it keeps counting; the gap to the
    next send runs from `at`). Returns False when there is no such reservation (it
    was released)."""
    return reservation_id in await confirm_many(database, [(reservation_id, delivery, at)])


async def confirm_many(database: db.Database, confirmed: Sequence[tuple[int, int | None, datetime | None]]) -> set[int]:
    """`confirm` for several sends in one statement: (reservation, delivery, at) each;
    returns the reservations confirmed."""
    ids, deliveries, ats = (list(column) for column in zip(*confirmed, strict=True)) if confirmed else ([], [], [])
    return {row["id"] for row in await database.fetch("accounts/confirm_many", ids, deliveries, ats)}


async def release(database: db.Database, reservation_id: int, at: datetime | None = None) -> bool:
    """Free the slot after a definite rejection that is not the mailbox's fault (a
    recipient or content refusal, a send that never began): the reservation counts
    against no cap any more, but the gap still runs from it, settled at `at` (None:
    now, by PostgreSQL's clock; the receiver may have seen the transaction). Never
    after a quota or rate-limit reply from the provider, nor when the outcome is
    unknown: `keep` it then. Returns False when
    nothing was released (no such reservation, or it is confirmed: it went out)."""
    return await database.fetchrow("accounts/release", reservation_id, at) is not None


async def keep(database: db.Database, reservation_id: int, at: datetime | None = None) -> bool:
    """The outcome is unknown (a timeout, a disconnect after DATA), or the provider
    said at `at` (None: now, by PostgreSQL's clock) that the mailbox hit a quota or a
    rate limit: the reservation stays and keeps counting, since we err towards
    under-sending, and the gap runs from `at`. Returns False when there is no such
    unconfirmed reservation."""
    return await database.fetchrow("accounts/keep", reservation_id, at) is not None


def day_end(account: Account, now: datetime) -> datetime:
    """The next 00:00 in the account's time zone after `now` (when a parked account's
    day resets). Sync, no I/O."""
    zone = zoneinfo.ZoneInfo(account.time_zone)
    local = now.astimezone(zone)
    midnight = datetime.combine(local.date() + timedelta(days=1), datetime.min.time(), zone)
    return midnight.astimezone(now.tzinfo)


async def failure(
    database: db.Database, account: Account, now: datetime, data: Mapping[str, Any], breaker: Breaker
) -> State | None:
    """A send through the account failed on its side (a transient reply, a timeout,
    a connection or TLS failure, a throttling reply): write its account_failure
    event and run the circuit breaker (mtad_account_failure). Returns TRIPPED or
    DISCONNECTED when the account moved (with its account_state event), else None."""
    moved = await database.fetchval(
        "accounts/failure", account.id, now, json.dumps(dict(data), default=str), breaker.window,
        breaker.failures, breaker.min_successes, breaker.trip_for, breaker.trips_per_day,
    )  # fmt: skip
    return State(moved) if moved is not None else None


async def bounce(
    database: db.Database, account: Account, now: datetime, data: Mapping[str, Any], floor: int = 0
) -> Rested | None:
    """A send through the account was refused for its recipient or content: not the
    account's fault, but its health score drops; below `floor` (0: never) the account
    rests (mtad_account_rest), and the rest is returned (its account_state event is
    written)."""
    row = await database.fetchrow("accounts/bounce", account.id, now, json.dumps(dict(data), default=str), floor)
    return Rested(account, row["health"], row["until"]) if row is not None else None


async def prune(database: db.Database, before: datetime, limit: int = 10_000) -> int:
    """Delete up to `limit` reservations made before `before` that no limit looks at
    any more (each account's latest stays, for its gap); returns how many. `before`
    must be older than every account's day and the hour window: two days ago is safe."""
    return int(await database.fetchval("accounts/prune", before, limit))
