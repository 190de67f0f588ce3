"""DKIM key rotation that runs itself: DNS decides when a key may sign, time when
an old one may go.

`Rotation.step()` is one pass over every key (run at start and every
`check_interval`, by any number of nodes: each move is one conditional
statement, so two nodes make it once):

- pending: its record is looked up (TXT at SELECTOR._domainkey.DOMAIN, through the
  configured resolver). Not published, or published with another key: it waits
  (a record that stops matching is forgotten). Published right: the first sighting
  and its TTL are kept; a domain's first key of its algorithm becomes active at
  once, a replacement once that TTL has passed since the first sighting (caches
  that held the old answer have let it go). The active key it replaces retires.
- retiring: after `overlap` (default 7 days: delayed and forwarded mail still
  verifies) it is revoked, and the event, the log and the return say that its
  record can now be emptied (`p=`).
- with `rotate_every`: an active key older than that, whose domain has no pending
  key of its algorithm, gets a successor generated (pending), and the event, the
  log and the metric say what to publish.

Every move writes a `dkim_key` event. Lookups that fail (SERVFAIL, timeouts)
change nothing. The signer reloads the active keys on its own schedule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from mtad import db
from mtad.base import errors, metrics, vault
from mtad.outbound import routing
from mtad.signing import dkim, settings
from mtad.signing.dkim import KeyState

log = structlog.get_logger("mtad.rotation")


# Declared in settings.py: the configuration builds it without loading this module.
Settings = settings.Rotation


@dataclass(frozen=True, slots=True)
class Move:
    """What one pass did to one key."""

    domain: str
    selector: str
    to: str  # "seen", "active", "retiring", "revoked", "pending" (generated)
    publish: str | None = None  # the TXT record to publish (or empty) now, for the operator


class Rotation:
    def __init__(
        self,
        database: db.Database,
        resolver: routing.Resolver,
        sealer: vault.Vault,
        settings: Settings,
        *,
        now: Callable[[], datetime],
    ) -> None:
        self._db = database
        self._resolver = resolver
        self._sealer = sealer
        self.settings = settings
        self._now = now

    async def run(self, changed: Callable[[], Awaitable[None]] | None = None) -> None:
        """step() at start and every check_interval, until cancelled; `changed()` after
        a pass that changed which keys sign (the signer reloads at once)."""
        while True:
            try:
                moves = await self.step()
                if changed is not None and any(m.to in ("active", "retiring") for m in moves):
                    await changed()
            except errors.SpoolError as exc:
                log.warning("dkim_rotation_failed", error=str(exc))
            await asyncio.sleep(self.settings.check_interval)

    async def step(self) -> list[Move]:
        now = self._now()
        keys = await dkim.list_all(self._db)
        moves: list[Move] = []
        for key in keys:
            over = now >= key.changed_at + timedelta(seconds=self.settings.overlap)
            if key.state is KeyState.PENDING:
                moves += await self._pending(key, keys, now)
            elif key.state is KeyState.RETIRING and over and await dkim.revoke(self._db, key.id, now):
                empty = f'{key.selector}._domainkey.{key.domain}. IN TXT "v=DKIM1; p="'
                log.warning("dkim_key_revoked", domain=key.domain, selector=key.selector, publish=empty)
                moves.append(Move(key.domain, key.selector, "revoked", empty))
        if self.settings.rotate_every is not None:
            moves += await self._successors(await dkim.list_all(self._db), now)
        self._gauges(await dkim.list_all(self._db))
        return moves

    async def _pending(self, key: dkim.Stored, keys: list[dkim.Stored], now: datetime) -> list[Move]:
        name = f"{key.selector}._domainkey.{key.domain}"
        try:
            answer = await self._resolver.lookup(name, "TXT")
        except errors.RouteTempFail as exc:
            log.info("dkim_lookup_failed", domain=key.domain, selector=key.selector, error=str(exc))
            return []
        if not dkim.matches(answer.values, key.record):
            if key.published_at is not None:
                await dkim.published(self._db, key.id, None, None)  # it was, and is no longer
            return []
        moves = []
        if key.published_at is None:
            await dkim.published(self._db, key.id, now, answer.ttl)
            moves.append(Move(key.domain, key.selector, "seen"))
            key_seen, ttl = now, answer.ttl
        else:
            key_seen, ttl = key.published_at, key.published_ttl or 0.0
        replaces = any(k.domain == key.domain and k.algorithm is key.algorithm and k.state is KeyState.ACTIVE
                       for k in keys)  # fmt: skip
        if replaces and now < key_seen + timedelta(seconds=ttl):
            return moves  # resolvers may still hold the answer from before the record was published
        for domain, selector, _, state in await dkim.activate(self._db, key.id, now):
            log.info("dkim_key_" + state, domain=domain, selector=selector)
            moves.append(Move(domain, selector, state))
        return moves

    async def _successors(self, keys: list[dkim.Stored], now: datetime) -> list[Move]:
        assert self.settings.rotate_every is not None
        moves = []
        for key in keys:
            if key.state is not KeyState.ACTIVE or now < key.changed_at + timedelta(seconds=self.settings.rotate_every):
                continue
            if any(
                k.domain == key.domain and k.algorithm is key.algorithm and k.state is KeyState.PENDING for k in keys
            ):
                continue  # a successor already waits for its record
            selector = dkim.free_selector(key.algorithm, now, {k.selector for k in keys if k.domain == key.domain})
            try:
                made = await dkim.add(self._db, dkim.generate(key.domain, selector, key.algorithm), self._sealer)
            except errors.Conflict:
                continue  # another node generated it meanwhile
            await dkim.generated(self._db, made, now)
            publish = f'{made.name}. IN TXT "{made.record()}"'
            log.warning("dkim_key_generated", domain=made.domain, selector=made.selector, publish=publish)
            moves.append(Move(made.domain, made.selector, "pending", publish))
            keys = [*keys, dkim.Stored(made.id, made.domain, made.selector, made.algorithm, KeyState.PENDING,
                                       made.record(), now, now)]  # fmt: skip
        return moves

    def _gauges(self, keys: list[dkim.Stored]) -> None:
        for state in KeyState:
            metrics.DKIM_KEYS.labels(state=state.value).set(sum(1 for k in keys if k.state is state))
        metrics.DKIM_AWAITING_DNS.set(sum(1 for k in keys if k.state is KeyState.PENDING and k.published_at is None))
