"""Tenants: who may submit mail, and how they prove it (scrypt password hashes).

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
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from mtad import db
from mtad.base import errors

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise errors.MtadError(
            f"invalid tenant name {name!r}: 1-64 characters of letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name


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
