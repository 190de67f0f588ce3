"""Tenants: who may submit mail, how they prove it (scrypt password hashes), and
whether they may now: paused (its mail waits, new mail is refused) or on probation
(its mail leaves from the probation pool).

scrypt with N=2^14 costs ~75 ms of CPU; verification runs in a worker thread
and a success is remembered for `cache_ttl` seconds (keyed by a salted digest
of the password, never the password), so an application that opens a session
per message does not pay it every time.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from mtad import db
from mtad.base import errors, events, metrics
from mtad.spool import settings

log = structlog.get_logger("mtad.tenants")

NAME = settings.TENANT_NAME
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


check_name = settings.check_tenant_name


def hash_password(password: str) -> str:
    """`scrypt$N$r$p$salt$hash`, base64 without padding."""
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32)
    return "$".join(["scrypt", str(_SCRYPT_N), str(_SCRYPT_R), str(_SCRYPT_P), _b64(salt), _b64(digest)])


def verify_password(password: str, encoded: str) -> bool:
    """Constant-time check of a password against hash_password()'s output."""
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest + "==")
        actual = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt + "=="),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=128 * 1024 * 1024,
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode().rstrip("=")


async def add(database: db.Database, name: str, password: str, *, replace: bool = False) -> None:
    """Create a tenant (or, with replace, set a new password); Conflict if it exists."""
    check_name(name)
    if not password:
        raise errors.MtadError("the password must not be empty")
    encoded = await asyncio.to_thread(hash_password, password)
    if replace:
        status = await database.execute("tenants/set_password", name, encoded)
        if status.endswith(" 1"):
            return
    try:
        await database.execute("tenants/insert", name, encoded)
    except errors.Conflict:
        raise errors.Conflict(f"tenant {name!r} already exists (use --replace to set a new password)") from None


async def list_all(database: db.Database) -> list[dict[str, Any]]:
    return [dict(row) for row in await database.fetch("tenants/list")]


class Authenticator:
    """Checks tenant credentials against PostgreSQL, remembering recent successes."""

    def __init__(
        self,
        database: db.Database,
        *,
        cache_ttl: float = 60.0,
        cache_size: int = 10_000,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = database
        self._ttl = cache_ttl
        self._size = cache_size
        self._now = now
        self._pepper = os.urandom(16)
        self._ok: OrderedDict[tuple[str, bytes], float] = OrderedDict()

    async def verify(self, name: str, password: str) -> bool:
        """True when `name` is an active tenant with this password.

        Raises DatabaseUnavailable when the tenant cannot be looked up.
        """
        key = (name, hashlib.sha256(self._pepper + password.encode()).digest())
        expires = self._ok.get(key)
        if expires is not None and expires > self._now():
            return True
        row = await self._db.fetchrow("tenants/get", name)
        if row is None or row["state"] != "active" or row["password_hash"] is None:
            return False
        if not await asyncio.to_thread(verify_password, password, row["password_hash"]):
            return False
        self._ok[key] = self._now() + self._ttl
        self._ok.move_to_end(key)
        while len(self._ok) > self._size:
            self._ok.popitem(last=False)
        return True


# --- paused, on probation -------------------------------------------------------------


async def pause(conn: db.Connection | db.Database, tenant: str, reason: str, *, by: str, now: datetime,
                data: Mapping[str, Any] | None = None) -> int | None:  # fmt: skip
    """Pause `tenant` (by "auto" or "operator"): its waiting mail is held, new mail is
    refused (Gate), with a tenant_paused event carrying `data` too. Returns how many
    deliveries were held; None when it was paused already."""
    check_name(tenant)
    held = await conn.fetchval("tenants/pause", tenant, by, reason, now, events.encode(data or {}))
    return None if held is None else int(held)


async def paused(database: db.Database) -> list[dict[str, Any]]:
    """Every paused tenant: {"tenant", "paused_at", "paused_by", "paused_reason"}."""
    return [dict(r) for r in await database.fetch("tenants/paused")]


async def resume(database: db.Database, tenant: str, *, by: str, now: datetime) -> int | None:
    """Resume a paused tenant: its held mail is due now. Returns how many deliveries
    were released; None when it was not paused."""
    check_name(tenant)
    async with database.transaction() as tx:
        if await tx.fetchval("tenants/resume", tenant, now, by) is None:
            return None
        return int(await tx.fetchval("tenants/unhold", tenant, now))


async def set_probation(database: db.Database, tenant: str, on: bool, now: datetime) -> None:
    check_name(tenant)
    await database.fetchrow("tenants/probation", tenant, now, on)


async def state(database: db.Database, tenant: str) -> dict[str, Any]:
    """A tenant's state; the defaults when it has none recorded."""
    row = await database.fetchrow("tenants/state", tenant)
    if row is None:
        return {"tenant": tenant, "paused_at": None, "paused_by": None, "paused_reason": None, "resumed_at": None,
                "probation": False, "probation_since": None, "probation_sent": 0, "graduated_at": None}  # fmt: skip
    return dict(row)


@dataclass(frozen=True, slots=True)
class Paused:
    by: str  # "auto" or "operator"
    reason: str


class States:
    """The tenants paused or on probation, as PostgreSQL said at the last load()
    (quotas.Gate.run loads it every few seconds): what this process's submission and
    delivery heed."""

    def __init__(self, database: db.Database, *, metered: bool = True) -> None:
        self._db = database
        self._metered = metered  # sets the gauges: the daemon's process only (a child's would add up)
        self._paused: dict[str, Paused] = {}
        self._probation: frozenset[str] = frozenset()
        self.loaded = asyncio.Event()

    def paused(self, tenant: str) -> Paused | None:
        return self._paused.get(tenant)

    def on_probation(self, tenant: str) -> bool:
        return tenant in self._probation

    async def load(self) -> None:
        """Read the states once; DatabaseUnavailable (or SpoolError) when it cannot."""
        rows = await self._db.fetch("tenants/states")
        paused = {r["tenant"]: Paused(r["paused_by"], r["paused_reason"]) for r in rows if r["paused_by"] is not None}
        probation = frozenset(r["tenant"] for r in rows if r["probation"])
        if self._metered:
            for tenant, was in self._paused.items():
                metrics.TENANT_PAUSED.labels(tenant=tenant, by=was.by).set(0)
            for tenant, why in paused.items():
                metrics.TENANT_PAUSED.labels(tenant=tenant, by=why.by).set(1)
            for tenant in self._probation | probation:
                metrics.TENANT_PROBATION.labels(tenant=tenant).set(1 if tenant in probation else 0)
        if paused != self._paused or probation != self._probation:
            log.info("tenant_states", paused=sorted(paused), probation=sorted(probation), pid=os.getpid())
        self._paused, self._probation = paused, probation
        self.loaded.set()
