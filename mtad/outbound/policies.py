"""The TLS policy an attempt to a domain's MX hosts must meet.

`Policies.of(route)` answers with an `Applied`: which MX hosts may be used and
what a session to each must show once TLS is up (`Verify`):
- DANE (RFC 7672), with `dane` on: for an MX host whose TLSA records
  (`_25._tcp.<host>`) come from an answer the validating resolver marked secure
  (the AD bit); they are looked up only for a host in a signed zone (its address
  records secure), as Postfix does, so broken DNS servers of unsigned zones cost
  nothing. STARTTLS is then required and the certificate must match them
  (a DANE-TA chain must name the host, or the domain when its MX records were
  secure too: an unsigned domain hosted on a signed provider's MX still gets
  DANE, section 2.2.1). DANE takes precedence over MTA-STS, host by host
  (RFC 8461 section 2).
- MTA-STS (RFC 8461), with `mta_sts` on: when the domain publishes a policy. In
  `enforce` mode only the MX hosts its patterns match are used, over TLS with a
  certificate valid for the host's name (the trust store, or [tls] ca_file);
  with none matching, the attempt is refused and defers. In `testing` mode the
  hosts are used as without a policy and a failure is only recorded.
- Otherwise nothing: opportunistic TLS.

Policies are fetched over HTTPS (outbound.fetching) and kept in PostgreSQL (`mta_sts_policies`)
until their max_age, so every node shares them and a restart fetches nothing.
A domain's `_mta-sts` TXT id is looked up for each use (cached for its TTL): a
new id fetches the policy again; when a fetch fails, or the TXT record is gone,
the cached policy holds until it expires (section 5.1). Static routes (relays)
get no policy: the operator chose them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from mtad import db
from mtad.base import errors
from mtad.outbound import dane, fetching, mtasts, routing, settings

MIN_TTL, MAX_TTL = 5.0, 3600.0  # bounds on how long a TXT or TLSA answer is remembered
REMEMBERED = 10_000  # domains (and MX hosts) whose TXT id, policy and TLSA records are kept in memory


class Kind(StrEnum):
    DANE = "dane"
    MTA_STS = "mta-sts"


@dataclass(frozen=True, slots=True)
class Failed:
    """Why a receiver failed its domain's policy: the result type of TLS reporting
    (RFC 8460 4.3: "starttls-not-supported", "certificate-host-mismatch", ...) and
    the words for events and logs."""

    result: str
    text: str


# Declared in settings.py: the configuration builds it without loading this module.
Settings = settings.PolicySettings


@dataclass(frozen=True, slots=True)
class Verify:
    """What a session to one MX host must show once TLS is up."""

    kind: Kind
    domain: str  # the policy domain (the recipient domain)
    names: tuple[str, ...]  # the names the certificate may be valid for
    enforce: bool = True  # False: MTA-STS testing, a failure is recorded and the mail goes on
    tlsa: tuple[dane.Tlsa, ...] = ()  # DANE: the usable records (none: TLS required, not authenticated)

    @property
    def proves(self) -> tuple[Kind, tuple[str, ...], bool, tuple[dane.Tlsa, ...]]:
        """What a session held to this shows, whichever domain asked: sessions are
        reused across the domains an MX host serves when it is the same."""
        return self.kind, self.names, self.enforce, self.tlsa


@dataclass(frozen=True, slots=True)
class Applied:
    """A domain's policy for one attempt."""

    kind: Kind | None = None  # None: no policy, opportunistic TLS
    verify: Mapping[str, Verify] = field(default_factory=dict)  # by MX host name; absent: opportunistic
    excluded: frozenset[str] = frozenset()  # MX hosts the policy rules out
    refused: str | None = None  # why no MX host may be used now: the attempt defers with it

    def allows(self, host: str) -> bool:
        return host not in self.excluded


NONE = Applied()


@dataclass(frozen=True, slots=True)
class Cached:
    """A domain's MTA-STS policy as kept in PostgreSQL, with its last failure."""

    domain: str
    policy_id: str | None
    policy: mtasts.Policy | None
    fetched_at: datetime | None
    expires_at: datetime | None
    failure: str | None = None
    failed_at: datetime | None = None

    def live(self, now: datetime) -> mtasts.Policy | None:
        """The policy, while it has not expired."""
        return self.policy if self.expires_at is not None and self.expires_at > now else None

    def describe(self, now: datetime) -> dict[str, Any]:
        policy = self.policy
        return {
            "domain": self.domain,
            "policy_id": self.policy_id,
            "mode": policy.mode.value if policy else None,
            "mx": list(policy.mx) if policy else [],
            "max_age": policy.max_age if policy else None,
            "fetched_at": self.fetched_at.isoformat() if self.fetched_at else None,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "expired": self.live(now) is None if policy else None,
            "last_failure": self.failure,
            "failed_at": self.failed_at.isoformat() if self.failed_at else None,
        }


def _cached(row: db.Row) -> Cached:
    policy = None
    if row["mode"] is not None:
        policy = mtasts.Policy(mtasts.Mode(row["mode"]), row["max_age"], tuple(row["mx"]))
    return Cached(row["domain"], row["policy_id"], policy, row["fetched_at"], row["expires_at"],
                  row["failure"], row["failed_at"])  # fmt: skip


async def cached(database: db.Database, domain: str) -> Cached | None:
    """The policy kept for `domain` (`mtad tls show`)."""
    row = await database.fetchrow("tls/get", domain)
    return _cached(row) if row is not None else None


async def failed(database: db.Database, domain: str, why: str, now: datetime | None = None) -> None:
    """Keep the last failure of a domain's policy (a fetch, or a delivery held to it)."""
    await database.execute("tls/failed", domain, why[:500], now or datetime.now(UTC))


class Policies:
    """The policy of each route, from DNS, the cache in PostgreSQL and HTTPS."""

    def __init__(
        self,
        database: db.Database,
        resolver: routing.Resolver,
        settings: Settings,
        *,
        fetcher: fetching.Fetcher | None = None,
        count_failure: Callable[[str, str, Failed], Awaitable[None]] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._db = database
        self._resolver = resolver
        self._fetcher = fetcher or fetching.Fetcher(
            resolver, port=settings.https_port, timeout=settings.fetch_timeout, ca_file=settings.ca_file
        )
        self._count_failure = count_failure  # (domain, MX host, why) for TLS reporting
        self._now = now
        self._clock = clock
        self._ids: dict[str, tuple[str | None, float]] = {}  # domain -> (TXT id, until when)
        self._tlsas: dict[str, tuple[tuple[dane.Tlsa, ...] | None, float]] = {}  # TLSA name -> (records, until)
        self._policies: dict[str, Cached | None] = {}  # what PostgreSQL holds, as last read or written
        self._fetching: dict[str, asyncio.Future[Cached | None]] = {}

    async def close(self) -> None:
        await self._fetcher.close()

    async def of(self, route: routing.Route) -> Applied:
        """The policy of an attempt along `route`; raises RouteTempFail when DANE's
        records cannot be looked up (the attempt must not go unverified meanwhile)."""
        if route.relay or not (self.settings.mta_sts or self.settings.dane):
            return NONE
        verify: dict[str, Verify] = {}
        if self.settings.dane:
            for hop in (h for h in route.hops if h.secure):
                found = await self._tlsa(hop)
                if found is not None:
                    names = (hop.name, route.domain) if route.secure else (hop.name,)
                    verify[hop.name] = Verify(Kind.DANE, route.domain, names, tlsa=found)
        sts = await self.mta_sts(route.domain) if self.settings.mta_sts else None
        policy = sts.live(self._now()) if sts is not None else None
        if policy is None or policy.mode is mtasts.Mode.NONE:
            return Applied(Kind.DANE, verify) if verify else NONE
        enforce = policy.mode is mtasts.Mode.ENFORCE
        excluded = set()
        for hop in route.hops:
            if hop.name in verify:
                continue
            if enforce and not policy.allows(hop.name):
                excluded.add(hop.name)
                continue
            verify[hop.name] = Verify(Kind.MTA_STS, route.domain, (hop.name,), enforce=enforce)
        refused = None
        if len(excluded) == len(route.hops):
            refused = (f"MTA-STS: no MX host of {route.domain} ({', '.join(h.name for h in route.hops)}) matches "
                       f"its policy (mx: {', '.join(policy.mx)})")  # fmt: skip
            await failed(self._db, route.domain, refused, self._now())
            if self._count_failure is not None:
                await self._count_failure(route.domain, route.hops[0].name, Failed("validation-failure", refused))
        kind = Kind.DANE if any(v.kind is Kind.DANE for v in verify.values()) else Kind.MTA_STS
        return Applied(kind, verify, frozenset(excluded), refused)

    async def _tlsa(self, hop: routing.Hop) -> tuple[dane.Tlsa, ...] | None:
        """The usable TLSA records of an MX host from a secure answer (an empty tuple:
        records, none usable: TLS is still required), or None: DANE does not apply.
        Remembered for the answer's TTL."""
        name = f"_{hop.port}._tcp.{hop.name}"
        known = self._tlsas.get(name)
        if known is not None and known[1] > self._clock():
            return known[0]
        answer = await self._resolver.lookup(name, "TLSA")
        found = None
        if answer.secure and answer.values:
            records = []
            for value in answer.values:
                try:
                    records.append(dane.parse(value))
                except dane.TlsaError:
                    continue
            found = tuple(dane.usable(records))
        _remember(self._tlsas, name, (found, self._clock() + min(max(answer.ttl, MIN_TTL), MAX_TTL)))
        return found

    async def mta_sts(self, domain: str) -> Cached | None:
        """The domain's MTA-STS policy as it stands now, fetched when its TXT id says
        it changed; None: it has none."""
        policy_id = await self._txt_id(domain)
        if domain not in self._policies:
            _remember(self._policies, domain, await cached(self._db, domain))
        kept = self._policies[domain]
        now = self._now()
        if policy_id is None or (kept is not None and kept.policy_id == policy_id and kept.live(now)):
            return kept
        while (fetching := self._fetching.get(domain)) is not None:  # another caller fetches: its answer is ours
            try:
                return await asyncio.shield(fetching)
            except _Abandoned:  # that caller was cancelled: this one fetches
                continue
        fetching = self._fetching[domain] = asyncio.get_running_loop().create_future()
        fetching.add_done_callback(_retrieved)
        try:
            found = await self._refresh(domain, policy_id)
        except BaseException as exc:
            fetching.set_exception(exc if isinstance(exc, Exception) else _Abandoned())
            raise
        else:
            fetching.set_result(found)
            return found
        finally:
            del self._fetching[domain]

    async def _refresh(self, domain: str, policy_id: str) -> Cached | None:
        """The policy of TXT id `policy_id`: as another node fetched it, or fetched now."""
        now = self._now()
        shared = await cached(self._db, domain)
        if shared is not None and shared.policy_id == policy_id and shared.live(now):
            self._policies[domain] = shared
            return shared
        try:
            policy = await self._fetcher.fetch(domain)
        except fetching.FetchError as exc:
            await failed(self._db, domain, str(exc), now)
            if self._count_failure is not None:
                await self._count_failure(domain, "", Failed(exc.result, str(exc)))
            self._policies[domain] = await cached(self._db, domain)
            return self._policies[domain]
        await self._db.execute("tls/save", domain, policy_id, policy.mode.value, list(policy.mx), policy.max_age, now)
        self._policies[domain] = await cached(self._db, domain)
        return self._policies[domain]

    async def _txt_id(self, domain: str) -> str | None:
        known = self._ids.get(domain)
        if known is not None and known[1] > self._clock():
            return known[0]
        try:
            answer = await self._resolver.lookup(f"_mta-sts.{domain}", "TXT")
        except errors.RouteTempFail:
            return known[0] if known is not None else None  # the cached policy decides meanwhile
        policy_id = mtasts.txt_id(answer.values)
        _remember(self._ids, domain, (policy_id, self._clock() + min(max(answer.ttl, MIN_TTL), MAX_TTL)))
        return policy_id


class _Abandoned(Exception):
    """The caller fetching a domain's policy for the others was cancelled."""


def _retrieved(fetching: asyncio.Future[Cached | None]) -> None:
    """A fetch's exception is its fetcher's to raise: none is logged as never retrieved."""
    if not fetching.cancelled():
        fetching.exception()


def _remember(memory: dict[str, Any], key: str, value: Any) -> None:
    """Keep an entry, forgetting the oldest beyond REMEMBERED."""
    memory.pop(key, None)
    memory[key] = value
    if len(memory) > REMEMBERED:
        del memory[next(iter(memory))]
