"""An operator's command held on every live node before it returns.

A command (suspend, resume, tenants pause|resume, queue reroute, accounts
disable|enable) commits its change, then `announce()`s it: the controls' version
goes up and every node is told at once (NOTIFY mtad_controls). Each node's
`Heeding` reads the version, applies the controls (the suspensions and reroutes
delivery heeds, the tenants' states in every process that serves the submission
port) and only then writes the version on its `nodes` row. `wait()` returns once
every live node (a heartbeat within node_timeout) has written it, or after
`within` seconds, naming those that did not. A node also reads the version every
few seconds, should a NOTIFY be lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from mtad import db
from mtad.base import errors

log = structlog.get_logger("mtad.controls")

CHANNEL = "mtad_controls"
WITHIN = 5.0  # seconds a command waits for the live nodes to apply it
POLL = 0.05  # seconds between reads of the acknowledgements while a command waits


@dataclass(frozen=True, slots=True)
class Late:
    """A live node that had not applied a change when the wait ended."""

    node: str
    heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class Acks:
    """Which live nodes applied the controls of `version`, and which did not in time."""

    version: int
    applied: tuple[str, ...]
    late: tuple[Late, ...] = ()

    @property
    def live(self) -> int:
        return len(self.applied) + len(self.late)

    def said(self) -> str:
        """`held on 2 of 2 live nodes (n1, n2)`: what a command prints."""
        if not self.live:
            return "no live node: each node reads it as it starts"
        named = f" ({', '.join(self.applied)})" if self.applied else ""
        return f"held on {len(self.applied)} of {self.live} live node{'s' if self.live > 1 else ''}{named}"

    def warnings(self, within: float, now: datetime) -> list[str]:
        """One line per live node that did not apply it within the wait."""
        return [f"node {late.node} did not apply it within {within:g} s (its last heartbeat "
                f"{max(0.0, (now - late.heartbeat_at).total_seconds()):.0f} s ago): it may not heed it yet"
                for late in self.late]  # fmt: skip

    def as_dict(self) -> dict[str, object]:
        """What the admin API answers of it."""
        return {"version": self.version, "live": self.live, "applied": list(self.applied),
                "late": [late.node for late in self.late]}  # fmt: skip


async def announce(database: db.Database) -> int:
    """A change was committed: the controls' next version, every node told at once.
    Call it after the change's COMMIT, never inside its transaction."""
    return int(await database.fetchval("controls/announce"))


async def version(database: db.Database) -> int:
    return int(await database.fetchval("controls/version"))


async def applied(database: db.Database, node: str, version: int) -> None:
    """Node `node` has applied the controls of `version` in every process."""
    await database.execute("controls/applied", node, version)


async def acks(database: db.Database, version: int, since: datetime) -> Acks:
    """Which nodes live since `since` have applied `version` (one read)."""
    rows = await database.fetch("controls/acks", since, version)
    return Acks(version, tuple(r["id"] for r in rows if r["applied"]),
                tuple(Late(r["id"], r["heartbeat_at"]) for r in rows if not r["applied"]))  # fmt: skip


async def wait(
    database: db.Database,
    version: int,
    node_timeout: float,
    *,
    within: float = WITHIN,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Acks:
    """Until every live node (a heartbeat within node_timeout) has applied `version`,
    at most `within` seconds: the acknowledgements, with the nodes still late."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        found = await acks(database, version, now() - timedelta(seconds=node_timeout))
        if not found.late or loop.time() >= deadline:
            return found
        await asyncio.sleep(min(POLL, max(0.0, deadline - loop.time())))


async def held(database: db.Database, node_timeout: float, *, within: float = WITHIN) -> Acks:
    """announce() a committed change, then wait() for the live nodes to apply it."""
    return await wait(database, await announce(database), node_timeout, within=within)


class Heeding:
    """A node's side: on each NOTIFY (and every `every` seconds), read the version,
    `apply()` the controls (raising when it could not), then acknowledge the
    version on the node's row. run() is owned by the daemon's TaskGroup."""

    def __init__(
        self, database: db.Database, node: str, apply: Callable[[], Awaitable[None]], *, every: float = 2.0
    ) -> None:
        self._db = database
        self._node = node
        self._apply = apply
        self._every = every
        self._told = asyncio.Event()
        self._listening = db.Listening(database.dsn, CHANNEL, self._told.set)
        self.applied: int | None = None  # the version acknowledged last

    async def heed(self) -> int:
        """Apply and acknowledge the controls' version now, if it is new; returns it.
        SpoolError (or another MtadError of apply) when it could not."""
        found = await version(self._db)
        if found != self.applied:
            await self._apply()
            await applied(self._db, self._node, found)
            log.info("controls_heeded", version=found)
            self.applied = found
        return found

    async def run(self) -> None:
        try:
            while True:
                await self._listening.keep()
                self._told.clear()  # a NOTIFY from now on brings another turn
                try:
                    await self.heed()
                except errors.MtadError as exc:
                    log.warning("controls_not_heeded", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._every):
                        await self._told.wait()
        finally:
            await self._listening.close()
