"""Relay: what delivery asks of an account pool, and what a send's outcome does to the account.

Mail that names an account pool (X-Mtad-Account-Pool, its tenant's, its route's)
is not sent to MX: it is relayed through one of the pool's sending mailboxes
(mtad.mailboxes.accounts). For each send, delivery asks `Mailboxes.take(pool)`: a
reservation on the least-used healthy account that may send now (reserve before
send: the limits hold across every process and node), or how long to wait, and
whether the pool is paused (no account can send: its mail waits, it is not
failed). An account whose health (its bounces and complaints against its sends
over 24 hours) is below its pool's `health_floor` rests instead, until its health
is back at the floor as the window moves on: at once after the bounce that took
it below, or when its turn comes. `login(account)` opens the account's sealed
secret (and exchanges an XOAUTH2 refresh token for an access token) for the
session pool, with the TLS context of the account's pool (`Trust`: only its CA
file's CAs, when it names one, for the smarthost and the token endpoint). After
the send, `settle()` applies the response of the transaction's classes, in one
table (RESPONSES):

| class                 | reservation | account                       | deliveries        |
|-----------------------|-------------|-------------------------------|-------------------|
| delivered             | confirm     | -                             | delivered         |
| throttled             | keep        | cooling (cooldown; Gmail 4 h) | rerouted          |
| account_quota         | keep        | parked until its day resets   | rerouted          |
| account_auth          | release     | disconnected (operator)       | rerouted          |
| recipient             | release     | health lowered (below: rests) | bounced, suppressed |
| content, permanent    | release     | health lowered (below: rests) | bounced           |
| transient, failures   | release, or keep when it may have gone out | breaker counts | deferred (1) |

A rerouted delivery goes back to its pool's queue without spending one of its
attempts. (1) One that may have gone out (the connection was lost after the data,
or its node died before the outcome was written) is not sent again unseen: it is
held `unknown` (`unknown()` says how long, mtad.spool.unknowns holds it).

Every account state change is written with its event (accounts), logged and
counted. Layer: above accounts, inboxes, sessions, vault and oauth; below delivery.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import random
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog

from mtad import db
from mtad.base import errors, metrics, reasons, vault
from mtad.base.batching import Batcher
from mtad.base.lifecycle import Reason
from mtad.mailboxes import accounts, choosing, inboxes, oauth, pools
from mtad.mailboxes.accounts import Account, State
from mtad.outbound import sessions
from mtad.outbound.outcomes import Class, Verdict
from mtad.spool import campaigns

log = structlog.get_logger("mtad.relay")

GMAIL_HOSTS = (".gmail.com", ".google.com", ".googlemail.com")
LOGIN_TTL = 600.0  # seconds a login's opened secret is kept before it is read again
CONTENDED_RETRIES = 3  # choices in a row when other callers hold the accounts tried
HEALTH_FLOOR, SENT_CHECK_AFTER, ON_UNKNOWN = pools.HEALTH_FLOOR, pools.SENT_CHECK_AFTER, pools.ON_UNKNOWN
FOREVER = datetime.max.replace(tzinfo=UTC)  # PostgreSQL's 'infinity'


# Declared in mailboxes.pools: the configuration builds them without loading this module.
PoolSettings = pools.PoolSettings
Settings = pools.Settings


class Slot(enum.Enum):
    """What becomes of a send's reservation."""

    CONFIRM = "confirm"  # it went out
    KEEP = "keep"  # it counts: the provider said quota or rate, or we do not know
    RELEASE = "release"  # a definite refusal that is not the mailbox's fault: the slot is free


class Effect(enum.Enum):
    """What a send does to its account."""

    NONE = "none"
    COOL = "cool"
    PARK = "park"
    DISCONNECT = "disconnect"
    FAILURE = "failure"  # counted by the circuit breaker
    BOUNCE = "bounce"  # lowers the health score


@dataclass(frozen=True, slots=True)
class Response:
    slot: Slot
    effect: Effect
    reroute: bool  # the delivery goes back to the pool's queue without spending an attempt


# One response per class; a transaction with several classes takes the strongest
# effect (the order of Effect below), confirms when any recipient was delivered,
# and keeps its slot when any class keeps it.
RESPONSES: Mapping[Class, Response] = {
    Class.DELIVERED: Response(Slot.CONFIRM, Effect.NONE, False),
    Class.THROTTLED: Response(Slot.KEEP, Effect.COOL, True),
    Class.ACCOUNT_QUOTA: Response(Slot.KEEP, Effect.PARK, True),
    Class.ACCOUNT_AUTH: Response(Slot.RELEASE, Effect.DISCONNECT, True),
    Class.RECIPIENT: Response(Slot.RELEASE, Effect.BOUNCE, False),
    Class.CONTENT: Response(Slot.RELEASE, Effect.BOUNCE, False),
    Class.PERMANENT: Response(Slot.RELEASE, Effect.BOUNCE, False),
    Class.TRANSIENT: Response(Slot.RELEASE, Effect.FAILURE, False),
}
_STRENGTH = (Effect.DISCONNECT, Effect.PARK, Effect.COOL, Effect.FAILURE, Effect.BOUNCE, Effect.NONE)

# A login that could not be made, as a verdict for every recipient of the send:
# no usable secret or a refused token; the token endpoint failed; this node cannot
# open secrets, or the pool's CA file does not load (both mtad's own failure).
AUTH_REFUSED = Verdict(Class.ACCOUNT_AUTH, Reason.MAILBOX_COOLDOWN, False, reasons.Reason.SECURITY_ERROR)
LOGIN_UNAVAILABLE = Verdict(Class.TRANSIENT, Reason.MX_TEMPFAIL, False, reasons.Reason.SYSTEM_ERROR)
NO_KEY = Verdict(Class.TRANSIENT, Reason.INTERNAL, False, reasons.Reason.SYSTEM_ERROR)
NO_TRUST = Verdict(Class.TRANSIENT, Reason.INTERNAL, False, reasons.Reason.SYSTEM_ERROR)
_OURS = Response(Slot.RELEASE, Effect.NONE, False)  # mtad's own failure: nothing against the account


@dataclass(frozen=True, slots=True)
class Wait:
    """No account of the pool can send now: try again at `until`."""

    until: datetime
    paused: bool  # no account is active: the pool is paused until a state ends or an operator acts
    free_at: datetime | None = None  # when an account may send, as far as is known (None: not known)


@dataclass(frozen=True, slots=True)
class Taken:
    """What `take` reserved, for the first wants it served in order: a reservation each,
    but those passed over for their campaign's limits (`limited`: by index, until when;
    they took no account)."""

    reservations: list[accounts.Reservation]
    limited: Mapping[int, datetime]


@dataclass(frozen=True, slots=True)
class Unknown:
    """How a send through a mailbox that may have gone out is held: until `until`,
    then sent again unless found in the account's Sent folder; FOREVER when no inbox
    of the account is read (until an operator retries it)."""

    account: int | None  # the account it may have gone out through (None: not known)
    until: datetime

    @property
    def looked_for(self) -> bool:
        """Whether it is looked for in the account's Sent folder."""
        return self.until != FOREVER


@dataclass(frozen=True, slots=True)
class Settled:
    """What a send's outcome did."""

    slot: Slot
    effect: Effect
    moved_to: State | None  # the account's new state, if it moved
    reroute: frozenset[int]  # indices (in the order given) of the deliveries to reroute


class LoginFailed(errors.MtadError):
    """The account's login could not be made: `verdict` says what it means."""

    def __init__(self, verdict: Verdict, why: str) -> None:
        super().__init__(why)
        self.verdict = verdict
        self.why = why


@dataclass(slots=True)
class _Login:
    login: sessions.Login | None  # None for xoauth2: made from `tokens` at each use
    tokens: oauth.Tokens | None
    read_at: float
    tls: ssl.SSLContext | None = None  # the pool's (None: the system's trust store)


class Trust:
    """The client TLS context of each account pool's CA file, made at its first use and
    then shared by every connection (one per connection would cost 10x). A context
    made from a CA file trusts that file's CAs only, not the system's."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._made: dict[Path, ssl.SSLContext] = {}

    def context(self, pool: str) -> ssl.SSLContext | None:
        """The pool's context; None: the system's trust store. Sync; reads the file at its
        first use, OSError (ssl.SSLError included) when it cannot be loaded."""
        path = self._settings.ca_file_of(pool)
        if path is None:
            return None
        if path not in self._made:
            self._made[path] = ssl.create_default_context(cafile=path)
        return self._made[path]


class Mailboxes:
    """One node's view of its account pools: reservations, logins, and outcomes."""

    def __init__(
        self,
        database: db.Database,
        settings: Settings,
        sealer: vault.Vault | None,
        *,
        now: Callable[[], datetime] | None = None,
        rng: random.Random | None = None,
        token_tls: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._db = database
        self._vault = sealer
        self._now = now  # None: PostgreSQL's clock for every limit, the one all nodes share
        self._rng = rng or random.Random()
        self._token_tls = token_tls
        self._clock = clock
        self._logins: dict[int, _Login] = {}
        self._paused: set[str] = set()
        self._confirms: Batcher[tuple[int, int | None, datetime | None], None] = Batcher(self._confirm_batch)

    def rewrites_from(self, pool: str) -> bool:
        settings = self.settings.pools.get(pool)
        return settings is not None and settings.rewrite_from

    def health_floor(self, pool: str) -> int:
        settings = self.settings.pools.get(pool)
        return settings.health_floor if settings is not None else HEALTH_FLOOR

    async def unknown(self, pool: str, account: int | None, now: datetime) -> Unknown | None:
        """What becomes of a send through `account` of `pool` that may have gone out:
        looked for in the account's Sent folder for the pool's sent_check_after when
        its inbox is read, else held until an operator retries it; None: sent again
        (the pool's on_unknown = "resend", and no inbox is read). One query."""
        settings = self.settings.pools.get(pool) or PoolSettings()
        if account is not None and await inboxes.listing(self._db, account):
            return Unknown(account, now + timedelta(seconds=settings.sent_check_after))
        if settings.on_unknown == "resend":
            return None
        return Unknown(account, FOREVER)

    def _at(self) -> datetime | None:
        """The time the limits are checked at: None, PostgreSQL's clock, unless one was given."""
        return self._now() if self._now is not None else None

    def _wall(self) -> datetime:
        return self._now() if self._now is not None else datetime.now(UTC)

    async def take(
        self, pool: str, wants: Sequence[choosing.Want] = (choosing.Want(1),), node: str | None = None
    ) -> Taken | Wait:
        """Reservations on the pool's least-used accounts that may send now, for the
        first of `wants` (at least one, or one passed over for its campaign's limits;
        each may carry fewer recipients than it asked for, within its campaign's limits
        too), sent by `node`; or how long to wait. One round trip, unless other callers
        hold the accounts tried (then again at once, a few times) or none is free (then
        the pool's status, for its pause). The pool's pause and resumption are logged,
        evented and counted."""
        floor = self.health_floor(pool)
        for _ in range(CONTENDED_RETRIES):  # callers at once skip each other's accounts: look again
            chosen = await choosing.choose_healthy(self._db, pool, wants, self._at(), self._rng, node, floor=floor)
            for rested in chosen.rested:
                self._rested(rested, floor)
            if chosen.reservations or not chosen.contended:
                break
        now = self._wall()
        if chosen.reservations:
            for reservation in chosen.reservations:
                if reservation.lapsed is not None:  # back from cooling, parked, ... (the event is written)
                    self._changed(reservation.account, State.ACTIVE, f"{reservation.lapsed.value} ended")
            if pool in self._paused:
                await self._pause(pool, False, now, None)
        if chosen.reservations or chosen.limited:
            return Taken(chosen.reservations, chosen.limited)
        status = await choosing.pool_status(self._db, pool, self._at())
        poll = timedelta(seconds=self.settings.poll)
        if status.paused:
            if pool not in self._paused:
                await self._pause(pool, True, now, status)
            until = now + poll if status.next_free is None else min(status.next_free, now + poll)
            return Wait(until, True, status.next_free)
        if pool in self._paused:
            await self._pause(pool, False, now, None)
        # An active account is in its gap, at its cap or rate, or being reserved by
        # another caller: the earliest end the snapshot knows, not sooner than a moment.
        soonest = now + timedelta(seconds=0.05 if chosen.contended else 0.25)
        until = status.next_free if status.next_free is not None else now + poll
        return Wait(min(max(until, soonest), now + poll), False, max(until, soonest))

    async def _pause(self, pool: str, paused: bool, now: datetime, status: choosing.PoolStatus | None) -> None:
        if paused:
            self._paused.add(pool)
            data = {
                "paused": True,
                "accounts": status.accounts if status else 0,
                "next_free": status and status.next_free,
            }
            log.warning("account_pool_paused", pool=pool, accounts=data["accounts"], next_free=data["next_free"])
        else:
            self._paused.discard(pool)
            data = {"paused": False}
            log.info("account_pool_resumed", pool=pool)
        metrics.ACCOUNT_POOL_PAUSED.labels(pool=pool).set(1 if paused else 0)
        with contextlib.suppress(errors.SpoolError):  # the state is what counts; the event is its record
            await choosing.pool_event(self._db, pool, now, data)
        with contextlib.suppress(errors.SpoolError):  # its campaigns pause themselves, or resume
            stopped = await campaigns.pool_paused(self._db, pool, paused, now)
            metrics.CAMPAIGNS_POOL_PAUSED.labels(pool=pool).set(len(stopped) if paused else 0)

    async def login(self, account: Account) -> sessions.Login:
        """The account's login for the session pool: its password, or a current
        XOAUTH2 access token. LoginFailed(AUTH_REFUSED) when it has no usable secret or
        its refresh token is refused; LoginFailed(LOGIN_UNAVAILABLE) when the token
        endpoint cannot be reached or this node has no key to open secrets."""
        cached = self._logins.get(account.id)
        if cached is None or self._clock() - cached.read_at > LOGIN_TTL:
            cached = self._logins[account.id] = await self._read_login(account)
        if cached.login is not None:
            return cached.login
        assert cached.tokens is not None
        try:
            token = await cached.tokens.access_token()
        except errors.TokenRefused as exc:
            self.forget(account)
            raise LoginFailed(AUTH_REFUSED, f"token refused: {exc}") from None
        except errors.TokenError as exc:
            raise LoginFailed(LOGIN_UNAVAILABLE, f"token endpoint: {exc}") from None
        return _login(account, token.reveal(), cached.tls)

    async def _confirm_batch(self, confirmed: list[tuple[int, int | None, datetime | None]]) -> list[None]:
        await accounts.confirm_many(self._db, confirmed)
        return [None] * len(confirmed)

    def forget(self, account: Account) -> None:
        """Read the account's secret again at its next login (after a refusal)."""
        self._logins.pop(account.id, None)

    @functools.cached_property
    def _trust(self) -> Trust:
        return Trust(self.settings)

    async def _read_login(self, account: Account) -> _Login:
        if self._vault is None:
            raise LoginFailed(NO_KEY, "this node has no [accounts] key to open account secrets")
        try:
            tls = self._trust.context(account.pool)
        except OSError as exc:  # the file changed since the configuration was loaded (ssl.SSLError included)
            raise LoginFailed(NO_TRUST, f"cannot load the CA file of account pool {account.pool!r}: {exc}") from None
        found = await accounts.credentials(self._db, account.id)
        if found.secret is None:
            raise LoginFailed(AUTH_REFUSED, "no secret is stored for the account")
        try:
            secret = self._vault.open(found.secret)
            client_secret = self._vault.open(found.client_secret) if found.client_secret is not None else None
        except errors.ConfigError as exc:  # sealed with another key
            raise LoginFailed(NO_KEY, str(exc)) from None
        if account.mechanism is not accounts.Mechanism.XOAUTH2:
            return _Login(_login(account, secret.reveal(), tls), None, self._clock(), tls)
        if found.token_url is None or found.client_id is None:
            raise LoginFailed(AUTH_REFUSED, "xoauth2 account without an OAuth client (token URL, client id)")
        try:
            client = oauth.Client(found.token_url, found.client_id, client_secret, found.scope)
            tokens = oauth.Tokens(client, secret, tls=self._token_tls or tls)
        except errors.ConfigError as exc:  # a token URL that is neither https nor loopback
            raise LoginFailed(AUTH_REFUSED, str(exc)) from None
        return _Login(None, tokens, self._clock(), tls)

    async def settle(
        self,
        reservation: accounts.Reservation,
        verdicts: Iterable[Verdict],
        *,
        maybe_sent: bool,
        delivery: int | None,
        detail: Mapping[str, object],
    ) -> Settled:
        """Apply the response of a send's verdicts (one per delivery, in order) to its
        reservation and account. maybe_sent: the connection was lost after the data
        went out. delivery: the first delivered delivery, for the reservation."""
        given = list(verdicts)
        responses = [_OURS if v.reason is Reason.INTERNAL else RESPONSES[v.cls] for v in given]
        if any(r.slot is Slot.CONFIRM for r in responses):
            slot = Slot.CONFIRM
        elif maybe_sent or any(r.slot is Slot.KEEP for r in responses):
            slot = Slot.KEEP
        else:
            slot = Slot.RELEASE
        effect = min((r.effect for r in responses), key=_STRENGTH.index, default=Effect.NONE)
        if maybe_sent and _STRENGTH.index(effect) > _STRENGTH.index(Effect.FAILURE):
            effect = Effect.FAILURE
        settled_at = self._at()  # None: PostgreSQL's clock, when the settlement is written
        if slot is Slot.CONFIRM:  # the confirmations of sends ending together are written together
            await self._confirms.submit((reservation.id, delivery, settled_at))
        elif slot is Slot.RELEASE:
            await accounts.release(self._db, reservation.id, settled_at)
        else:
            await accounts.keep(self._db, reservation.id, settled_at)
        account = reservation.account
        moved = await self._affect(account, effect, given, detail)
        metrics.ACCOUNT_SENDS.labels(pool=account.pool, slot=slot.value, effect=effect.value).inc()
        reroute = frozenset(i for i, r in enumerate(responses) if r.reroute)
        return Settled(slot, effect, moved, reroute)

    async def _affect(
        self, account: Account, effect: Effect, verdicts: list[Verdict], detail: Mapping[str, object]
    ) -> State | None:
        now = self._wall()
        reason = str(detail.get("reply") or detail.get("failure") or detail.get("login") or effect.value)
        if effect is Effect.COOL:
            rest = self.settings.gmail_cooldown if _is_gmail(account, reason) else self.settings.cooldown
            return await self._move(account, State.COOLING, now + timedelta(seconds=rest), reason, now)
        if effect is Effect.PARK:
            return await self._move(account, State.PARKED, accounts.day_end(account, now), reason, now)
        if effect is Effect.DISCONNECT:
            self.forget(account)
            return await self._move(account, State.DISCONNECTED, None, reason, now)
        classes = sorted({v.cls.value for v in verdicts})
        if effect is Effect.FAILURE:
            moved = await accounts.failure(self._db, account, now, {**detail, "classes": classes},
                                           self.settings.breaker)  # fmt: skip
            if moved is not None:
                self._changed(account, moved, reason)
            return moved
        if effect is Effect.BOUNCE:
            floor = self.health_floor(account.pool)
            rested = await accounts.bounce(self._db, account, now, {**detail, "classes": classes}, floor)
            if rested is not None:
                self._rested(rested, floor)
                return State.RESTING
        return None

    async def _move(
        self, account: Account, state: State, until: datetime | None, reason: str, now: datetime
    ) -> State | None:
        try:
            await accounts.set_state(self._db, account.name, state, until, reason[:500], now)
        except errors.IllegalTransition as exc:  # an operator's disable, a disconnect or a longer park stands
            log.info("account_state_kept", account=account.name, wanted=state.value, why=str(exc))
            return None
        self._changed(account, state, reason)
        return state

    def _rested(self, rested: accounts.Rested, floor: int) -> None:
        self._changed(rested.account, State.RESTING, f"health {rested.health} is below the floor of {floor}",
                      until=rested.until)  # fmt: skip

    def _changed(self, account: Account, state: State, reason: str, *, until: datetime | None = None) -> None:
        metrics.ACCOUNT_STATE_CHANGES.labels(pool=account.pool, state=state.value).inc()
        log.warning("account_state_changed", account=account.name, pool=account.pool, state=state.value,
                    reason=reason, **({"until": until.isoformat()} if until is not None else {}))  # fmt: skip


def _login(account: Account, secret: str, tls: ssl.SSLContext | None) -> sessions.Login:
    return sessions.Login(account.name, account.login, account.mechanism.value, secret,
                          implicit_tls=account.tls is accounts.Tls.IMPLICIT, tls=tls)  # fmt: skip


def _is_gmail(account: Account, reply: str) -> bool:
    """Whether Google gave the reply: its smarthost, or its servers' signature."""
    host = "." + account.host.lower().rstrip(".")
    return host.endswith(GMAIL_HOSTS) or "gsmtp" in reply.lower()


def target(account: Account) -> sessions.Target:
    """Where the account's sessions go: its smarthost, by name (its certificate is checked against it)."""
    return sessions.Target(account.host, account.host, account.port)
