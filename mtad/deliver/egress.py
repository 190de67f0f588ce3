"""Egress: source IP pools for outbound delivery (selection, rotation, warm-up).

A pool is a named list of source IP addresses (`[pools.NAME]` in mtad.toml); the
first address is the pool's primary. By convention a deployment has two pools,
`transactional` (receipts, password resets: few messages, a reputation to keep
spotless) and `bulk` (newsletters), so that a bulk campaign that upsets a
provider does not hold back the mail people are waiting for. An address belongs
to exactly one pool: its reputation is the pool's.

Before each send the delivery path asks `Egress.choose(pool, provider)` and gets a
`Choice` at once (sync, no I/O, never sleeps, O(addresses of the pool)); choosing
changes nothing. When the address's bucket refuses, it asks again with that
address excluded; when one lets the send go, it calls `taken(...)` (the policy
moves on: cursor, sticky address), `sent(...)` (the send counted, also when its
outcome will be unknown), and, once the receiver has answered, `report(...)` with
what came of it and `ended(...)`. A send is never blocked for want of an
address: when no address is eligible the choice is the primary with
`fallback=True` and a `why` for the delivery event. The choice
carries the address's EHLO name: its entry in the pool's `ehlo` table, else the
pool's `ehlo_default`, else None (the caller uses the node's hostname). A pool
name that is not configured raises ConfigError.

Policies, per pool:
- sticky: each provider keeps one address while it stays healthy (providers are
  spread over the addresses by a stable hash of their name); an unhealthy address
  is left for the next healthy one, which the provider then keeps.
- round-robin: each provider cycles through the addresses.
- least-used: the address with the fewest sends to this provider today (UTC),
  ties by the order in `addresses`.
- rotate: an address has a turn of a random number of sends drawn from
  `rotate_after`, counted across every node; once the turn is given out and no
  send of it is in flight on any node, it is parked (rests) for `park` seconds.
  The next turn goes to an address drawn at random among the rested ones.

Leases: a node sends through an address only while it holds a lease on it in
PostgreSQL (deliver.source_leases). When the address a policy picks is not
leased, `choose` returns `Wanted` instead of a `Choice`: the caller takes the
lease and chooses again. A rotate pool's lease carries the sends of a turn this
node may make, and tells which addresses rest and until when (`granted`).

Every policy skips an address that is unhealthy at the provider (deliver.health:
`unhealthy_after` throttling replies or connection failures in a row make it
unhealthy there for `cool_off` seconds).

Warm-up (deliver.warmup): a warming address may send each provider at most its
day's cap; a send over it spills to another address of the pool, a warm one
first. Its days are kept in PostgreSQL (warmup.save, load); everything else
(health, rotation, today's counts) is this node's and starts afresh.

Memory: an entry per (address, provider) sent to today, per provider for sticky
and round-robin, per address leased.
The clock `now` is wall-clock seconds (time.time), since warm-up days are stored
as timestamps.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from mtad.base import errors
from mtad.deliver import health, warmup

ASK_AGAIN = 5.0  # seconds before a rotate pool whose take found no turn asks again


class Policy(enum.StrEnum):
    """How a pool picks an address for a send (see the module docstring)."""

    STICKY = "sticky"
    ROUND_ROBIN = "round-robin"
    LEAST_USED = "least-used"
    ROTATE = "rotate"


class SendOutcome(enum.StrEnum):
    """What came of a send through an address, as `report` takes it."""

    DELIVERED = "delivered"  # accepted: ends a run of throttling or connection failures
    DEFERRED = "deferred"  # a transient reply: counts towards the warm-up day's deferral rate
    THROTTLED = "throttled"  # the receiver asked us to slow down: deferral rate, and a strike against health
    REFUSED = "refused"  # the receiver refused the sender for good (blocked, reputation): a strike against health
    CONNECT_FAILED = "connect_failed"  # no SMTP session through this address: a strike against health


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """One `[pools.NAME]` table, parsed. The defaults are the documented ones."""

    name: str
    addresses: tuple[str, ...]  # the first is the primary
    policy: Policy = Policy.STICKY
    rotate_after: tuple[int, int] = (8, 15)  # rotate: sends in a turn (inclusive range)
    park: float = 900.0  # rotate: seconds an address rests after its turn
    ehlo: Mapping[str, str] = field(default_factory=dict)  # address -> EHLO hostname
    ehlo_default: str | None = None  # None: the node's hostname (the caller's choice)
    warming: frozenset[str] = frozenset()  # new addresses, a subset of addresses
    warmup: warmup.Warmup = field(default_factory=warmup.Warmup)
    unhealthy_after: int = 3  # throttling replies / connection failures in a row
    cool_off: float = 600.0  # seconds an unhealthy address is left alone

    @property
    def primary(self) -> str:
        return self.addresses[0]

    def ehlo_for(self, address: str) -> str | None:
        return self.ehlo.get(address, self.ehlo_default)


@dataclass(frozen=True, slots=True)
class Choice:
    """The address for one send. `why` is None on the ordinary path; it explains a
    spill past a full warming address, or (with fallback=True) what was exhausted.
    What choosing it would change (a policy's cursor, sticky address or rotation)
    is carried here and applied only by Egress.taken, when the send goes."""

    address: str
    ehlo: str | None  # None: the node's hostname
    fallback: bool
    why: str | None
    moves_to: str | None = None  # where the policy moves on to when the send goes (None: it stays)


@dataclass(frozen=True, slots=True)
class Wanted:
    """The lease to take before a send of `pool` can be chosen: on `address`, or for
    a rotate pool (address None) on the turn of any address but `excluding`."""

    pool: str
    address: str | None
    excluding: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Granted:
    """What a take gave this node, and what it learnt of the pool's addresses."""

    address: str | None  # None: no address had a turn to give
    sends: int | None  # rotate: the sends of the turn given; None: a lease without a count
    parked: Mapping[str, float]  # address -> resting until (wall-clock seconds)


@dataclass(frozen=True, slots=True)
class AddressStatistics:
    address: str
    ehlo: str | None
    warming: bool  # listed in `warming` (it may be warm at some providers already)
    sent_today: int  # to every provider, this UTC day, by this node
    sent_today_by_provider: Mapping[str, int]
    parked_until: float | None  # rotate: resting until then, as this node last learnt
    leased: bool  # this node holds a lease on it
    turn_left: int | None  # rotate: sends of its turn this node may still make
    in_flight: int  # sends through it on the wire, on this node
    unhealthy_until: Mapping[str, float]  # provider -> end of the cool-off, for cool-offs not over
    warmup: tuple[warmup.WarmupStatistics, ...]  # per provider, for a warming address


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    name: str
    policy: Policy
    addresses: tuple[AddressStatistics, ...]
    spills: int  # choices that went past a full warming address, since start
    fallbacks: int  # choices that fell back to the primary, since start


@dataclass(frozen=True, slots=True)
class Statistics:
    pools: tuple[PoolStatistics, ...]


# --- live state


@dataclass(slots=True)
class _Lease:
    left: int | None  # rotate: sends of the turn still to make; None: a lease without a count
    in_flight: int = 0


@dataclass(slots=True)
class _Pool:
    settings: PoolSettings
    index: dict[str, int]  # address -> position in addresses
    sticky: dict[str, str] = field(default_factory=dict)  # provider -> address
    cursor: dict[str, int] = field(default_factory=dict)  # provider -> next position (round-robin)
    leases: dict[str, _Lease] = field(default_factory=dict)  # address -> this node's lease
    parked: dict[str, float] = field(default_factory=dict)  # rotate: address -> resting until (as last learnt)
    ask_after: float = -math.inf  # rotate: a take found no turn to give; ask again then
    spills: int = 0
    fallbacks: int = 0


def _checked(pools: Mapping[str, PoolSettings]) -> dict[str, str]:
    """Each address's pool; ConfigError for pools that deliver.pools would have refused
    (no address, warming not a subset, an address in two pools)."""
    problems: list[str] = []
    owner: dict[str, str] = {}
    for name, settings in pools.items():
        if not settings.addresses:
            problems.append(f"[pools.{name}] addresses: a pool needs at least one address")
        if not settings.warming <= set(settings.addresses):
            problems.append(f"[pools.{name}] warming: not a subset of the pool's addresses")
        for address in settings.addresses:
            if address in owner:
                problems.append(f"[pools.{name}] addresses: {address} is also in [pools.{owner[address]}]")
            owner[address] = name
    if problems:
        raise errors.ConfigError(problems)
    return owner


def _schedules(pools: Mapping[str, PoolSettings]) -> tuple[dict[str, warmup.Warmup], frozenset[str]]:
    """Each address's warm-up schedule (its pool's), and the addresses listed as warming."""
    schedules = {address: settings.warmup for settings in pools.values() for address in settings.addresses}
    return schedules, frozenset(address for settings in pools.values() for address in settings.warming)


class Egress:
    """Every pool's live state. Sync, no I/O; see the module docstring.

    `now` is the wall clock in seconds (time.time; injected in tests), `rng` draws
    the rotate policy's counts and addresses. Raises ConfigError for pools that
    deliver.pools would have refused (no address, warming not a subset, an address
    in two pools).
    """

    def __init__(
        self,
        pools: Mapping[str, PoolSettings],
        *,
        now: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        owner = _checked(pools)
        self.now = now
        self._rng = rng if rng is not None else random.Random()
        self._pools = {
            name: _Pool(settings, {a: i for i, a in enumerate(settings.addresses)}) for name, settings in pools.items()
        }
        self._owner = owner
        self.days = warmup.Days()  # the warming addresses' days
        self.days.configure(*_schedules(pools))
        self._today = -1  # the UTC day (days since the epoch) of _sent_today
        self._sent_today: dict[tuple[str, str], int] = {}  # (address, provider) -> sends
        self._health = health.Health()

    @property
    def pools(self) -> Mapping[str, PoolSettings]:
        return {name: pool.settings for name, pool in self._pools.items()}

    def reconfigure(self, pools: Mapping[str, PoolSettings]) -> None:
        """New pool tables (a reload). A pool whose addresses are the same keeps what
        it learnt (its sticky choices, cursor, leases, rests); warm-up days and health
        stay with their addresses. ConfigError as the constructor raises it."""
        owner = _checked(pools)
        kept = {}
        for name, settings in pools.items():
            old = self._pools.get(name)
            if old is not None and old.settings.addresses == settings.addresses:
                kept[name] = dataclasses.replace(old, settings=settings)
            else:
                kept[name] = _Pool(settings, {a: i for i, a in enumerate(settings.addresses)})
        self._pools, self._owner = kept, owner
        self.days.configure(*_schedules(pools))

    # --- selection

    def choose(self, pool: str, provider: str, *, excluding: frozenset[str] = frozenset()) -> Choice | Wanted:
        """The address for one send of `pool` to `provider`, none of `excluding` (those
        the shaper has just refused) unless it falls back to the primary; or the lease
        to take first. Changes nothing: `taken` does, once the send goes. Raises
        ConfigError for a pool that is not configured."""
        state = self._pool(pool)
        settings = state.settings
        now = self.now()
        self._roll_today(now)
        if settings.policy is Policy.ROTATE:
            return self._rotate(state, provider, now, excluding)
        pick, moves_to = self._pick(state, provider, now, excluding)
        if pick is None:
            return self._leased(state, self._fallback(state, provider, now))
        if self.days.has_room(pick, provider):
            return self._leased(state, Choice(pick, settings.ehlo_for(pick), False, None, moves_to))
        spill = self._spill(state, provider, now, pick, excluding)
        if spill is None:
            return self._leased(state, self._fallback(state, provider, now))
        cap = self.days.cap_today(pick, provider)
        why = f"{pick} is at its warm-up cap of {cap} sends to {provider} today; spilled to {spill}"
        return self._leased(state, Choice(spill, settings.ehlo_for(spill), False, why, moves_to))

    def taken(self, pool: str, provider: str, choice: Choice) -> None:
        """The send of `choice` goes: the policy moves on (round-robin's cursor, the
        sticky address), spills and fallbacks are counted. Then `sent` counts the
        send itself."""
        state = self._pool(pool)
        policy = state.settings.policy
        if choice.fallback:
            state.fallbacks += 1
            return
        if choice.why is not None:
            state.spills += 1
        pick = choice.moves_to
        if pick is None:
            return
        if policy is Policy.STICKY:
            state.sticky[provider] = pick
        elif policy is Policy.ROUND_ROBIN:
            state.cursor[provider] = (state.index[pick] + 1) % len(state.settings.addresses)

    def _leased(self, state: _Pool, choice: Choice) -> Choice | Wanted:
        """The choice once its address is leased by this node; else the lease to take."""
        if choice.address in state.leases:
            return choice
        return Wanted(state.settings.name, choice.address)

    def _pick(
        self, state: _Pool, provider: str, now: float, excluding: frozenset[str]
    ) -> tuple[str | None, str | None]:
        """The policy's address among the usable ones (healthy, not excluded), or None;
        and where the policy moves on to if the send goes (None: it stays: an address
        refused by its bucket keeps its turn)."""
        addresses = state.settings.addresses
        policy = state.settings.policy
        if policy is Policy.STICKY:
            current = state.sticky.get(provider)
            usable = current is not None and self._usable(state, current, provider, now)
            if usable and current not in excluding:
                return current, current
            start = state.index[current] + 1 if current is not None else zlib.crc32(provider.encode())
            found = self._first_usable(state, provider, now, start, excluding)
            return found, (None if usable else found)
        if policy is Policy.ROUND_ROBIN:
            found = self._first_usable(state, provider, now, state.cursor.get(provider, 0), excluding)
            return found, found
        return self._least_used(state, provider, now, addresses, excluding), None

    def _rotate(self, state: _Pool, provider: str, now: float, excluding: frozenset[str]) -> Choice | Wanted:
        """A send of this node's turns (the one nearest its end first); else a new turn
        to ask for, leaving out the addresses that cannot send to the provider now;
        else, while no address has a turn to give, the primary as a fallback."""
        settings = state.settings
        turns = [
            (lease.left, address)
            for address, lease in state.leases.items()
            if lease.left and address not in excluding and self._can_send(state, address, provider, now)
        ]
        if turns:
            pick = min(turns)[1]
            return Choice(pick, settings.ehlo_for(pick), False, None)
        if now >= state.ask_after:
            cannot = frozenset(a for a in settings.addresses if not self._can_send(state, a, provider, now))
            return Wanted(settings.name, None, cannot | excluding)
        return self._leased(state, self._fallback(state, provider, now))

    def _can_send(self, state: _Pool, address: str, provider: str, now: float) -> bool:
        return self._usable(state, address, provider, now) and self.days.has_room(address, provider)

    def _first_usable(
        self, state: _Pool, provider: str, now: float, start: int, excluding: frozenset[str]
    ) -> str | None:
        addresses = state.settings.addresses
        for step in range(len(addresses)):
            address = addresses[(start + step) % len(addresses)]
            if address not in excluding and self._usable(state, address, provider, now):
                return address
        return None

    def _least_used(
        self, state: _Pool, provider: str, now: float, among: tuple[str, ...], excluding: frozenset[str]
    ) -> str | None:
        usable = [a for a in among if a not in excluding and self._usable(state, a, provider, now)]
        if not usable:
            return None
        return min(usable, key=lambda a: (self._sent_today.get((a, provider), 0), state.index[a]))

    def _spill(self, state: _Pool, provider: str, now: float, full: str, excluding: frozenset[str]) -> str | None:
        """Where a send goes when `full` is at its cap: a usable address with room,
        warm ones first, then the fewest sends to this provider today."""
        settings = state.settings
        candidates = [
            a
            for a in settings.addresses
            if a != full
            and a not in excluding
            and self._usable(state, a, provider, now)
            and self.days.has_room(a, provider)
        ]
        if not candidates:
            return None
        return min(
            candidates,
            key=lambda a: (
                self.days.warming_at(a, provider),
                self._sent_today.get((a, provider), 0),
                state.index[a],
            ),
        )

    def _fallback(self, state: _Pool, provider: str, now: float) -> Choice:
        settings = state.settings
        reasons = [self._unavailable(state, a, provider, now) for a in settings.addresses]
        why = (
            f"no address of pool {settings.name} can send to {provider} now"
            f" ({'; '.join(r for r in reasons if r)}); fell back to the primary {settings.primary}"
        )
        return Choice(settings.primary, settings.ehlo_for(settings.primary), True, why)

    def _unavailable(self, state: _Pool, address: str, provider: str, now: float) -> str | None:
        """Why an address cannot take a send to the provider now, or None."""
        parked = state.parked.get(address)
        if parked is not None and parked > now:
            return f"{address} parked for {math.ceil(parked - now)}s more"
        until = self._health.unhealthy_until(address, provider, now)
        if until is not None:
            return f"{address} unhealthy at {provider} for {math.ceil(until - now)}s more"
        if not self.days.has_room(address, provider):
            cap = self.days.cap_today(address, provider)
            return f"{address} at its warm-up cap of {cap} to {provider}"
        if state.settings.policy is Policy.ROTATE:
            return f"{address} has no turn to give (its turn is given out, or another's is ending)"
        return None

    def _usable(self, state: _Pool, address: str, provider: str, now: float) -> bool:
        parked = state.parked.get(address)
        if parked is not None:
            if parked > now:
                return False
            del state.parked[address]
        return self._health.unhealthy_until(address, provider, now) is None

    # --- feedback

    def sent(self, pool: str, provider: str, address: str, count: int = 1) -> None:
        """Count `count` messages handed to `provider` through `address` (call at DATA,
        also when the outcome is unknown: an unknown send is counted)."""
        state = self._pool(pool)
        self._check_address(state, address)
        now = self.now()
        self._roll_today(now)
        key = (address, provider)
        self._sent_today[key] = self._sent_today.get(key, 0) + count
        self.days.sent(address, provider, count, now)
        lease = state.leases.get(address)
        if lease is not None:
            lease.in_flight += count
            if lease.left is not None:
                lease.left = max(0, lease.left - count)

    def ended(self, pool: str, address: str, count: int = 1) -> bool:
        """`count` sends through `address` have ended (the receiver answered, or it
        never will). True when that spent this node's lease on it: its turn given out
        and nothing of it in flight; the caller then releases it (`release`)."""
        state = self._pool(pool)
        lease = state.leases.get(address)
        if lease is None:
            return False
        lease.in_flight = max(0, lease.in_flight - count)
        if lease.left == 0 and lease.in_flight == 0:
            del state.leases[address]
            return True
        return False

    # --- leases

    def granted(self, pool: str, granted: Granted) -> None:
        """What a take gave this node (see `take`)."""
        state = self._pool(pool)
        now = self.now()
        state.parked = {a: t for a, t in granted.parked.items() if t > now and a in state.index}
        if granted.address is None:
            state.ask_after = min([now + ASK_AGAIN, *state.parked.values()])
            return
        self._check_address(state, granted.address)
        if granted.sends is not None:
            state.ask_after = -math.inf
        lease = state.leases.get(granted.address)
        if lease is None:
            state.leases[granted.address] = _Lease(granted.sends)
        elif granted.sends is not None:
            lease.left = (lease.left or 0) + granted.sends

    def leases(self) -> dict[str, list[str]]:
        """pool -> the addresses this node holds a lease on."""
        return {name: list(state.leases) for name, state in self._pools.items() if state.leases}

    def kept(self, pool: str, addresses: Iterable[str]) -> list[str]:
        """Only `addresses` of the pool are still leased (a renewal found the others
        gone: this node's lease expired and another node took over); returns the lost."""
        state = self._pool(pool)
        keep = set(addresses)
        lost = [a for a in state.leases if a not in keep]
        for address in lost:
            del state.leases[address]
        return lost

    def report(self, pool: str, provider: str, address: str, outcome: SendOutcome) -> bool:
        """Feed what came of a send back; returns True when this report made the
        address unhealthy at the provider (worth a log line)."""
        state = self._pool(pool)
        settings = state.settings
        self._check_address(state, address)
        now = self.now()
        if outcome in (SendOutcome.DEFERRED, SendOutcome.THROTTLED):
            self.days.deferred(address, provider, now)
        if outcome is SendOutcome.DELIVERED:
            self._health.delivered(address, provider, now)
        elif outcome in (SendOutcome.THROTTLED, SendOutcome.REFUSED, SendOutcome.CONNECT_FAILED):
            return self._health.strike(address, provider, now, after=settings.unhealthy_after,
                                       cool_off=settings.cool_off)  # fmt: skip
        return False

    def set_nodes(self, count: int) -> None:
        """The number of live nodes sharing the pools: each takes its share of a warm-up cap."""
        self.days.set_nodes(count)

    def advance_days(self, now: float) -> list[warmup.DayEnd]:
        """End the warm-up days begun 24 h or more before `now` (warmup.Days.advance)."""
        return self.days.advance(now)

    def draw(self, low: int, high: int) -> int:
        """The sends of a rotate turn, should a take open one."""
        return self._rng.randint(low, high)

    # --- statistics

    def statistics(self) -> Statistics:
        now = self.now()
        self._roll_today(now)
        by_address: dict[str, dict[str, int]] = {}
        for (address, provider), count in self._sent_today.items():
            by_address.setdefault(address, {})[provider] = count
        unhealthy = self._health.statistics(now)
        days = self.days.statistics()
        pools = []
        for name, state in self._pools.items():
            settings = state.settings
            addresses = []
            for address in settings.addresses:
                sent = by_address.get(address, {})
                parked = state.parked.get(address)
                lease = state.leases.get(address)
                addresses.append(
                    AddressStatistics(
                        address=address,
                        ehlo=settings.ehlo_for(address),
                        warming=address in settings.warming,
                        sent_today=sum(sent.values()),
                        sent_today_by_provider=dict(sent),
                        parked_until=parked if parked is not None and parked > now else None,
                        leased=lease is not None,
                        turn_left=lease.left if lease is not None else None,
                        in_flight=lease.in_flight if lease is not None else 0,
                        unhealthy_until=unhealthy.get(address, {}),
                        warmup=tuple(days.get(address, ())),
                    )
                )
            pools.append(PoolStatistics(name, settings.policy, tuple(addresses), state.spills, state.fallbacks))
        return Statistics(tuple(pools))

    # --- helpers

    def _pool(self, name: str) -> _Pool:
        state = self._pools.get(name)
        if state is None:
            known = ", ".join(sorted(self._pools)) or "none"
            raise errors.ConfigError([f"unknown source IP pool {name!r} (configured pools: {known})"])
        return state

    def _check_address(self, state: _Pool, address: str) -> None:
        if address not in state.index:
            raise errors.ConfigError([f"{address} is not an address of source IP pool {state.settings.name!r}"])

    def _roll_today(self, now: float) -> None:
        today = math.floor(now / warmup.DAY)
        if today != self._today:
            self._today = today
            self._sent_today.clear()
