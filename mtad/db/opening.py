"""Opening the spool database: the configured DSN, or the embedded PostgreSQL started
(or attached to) for it; pending migrations applied; a pool yielded.

The daemon opens its spool as its owner (it holds the data directory's lock,
mtad.db.owner): it starts the server or attaches to it, and stops it at exit. A tool
opens it as a guest: while a daemon owns the data directory it only attaches (when
the daemon is starting its server again, it waits at most `wait` seconds for it);
with none it starts the server itself, within `wait`, and stops it again when it is
done and no one else uses it. A tool never starts a spool of its own while a daemon
of its configuration file runs on another.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

import structlog

from mtad import db
from mtad.base import errors
from mtad.db import embedded, migrate, owner

logger = structlog.get_logger("mtad.db")

T = TypeVar("T")

WAIT = 30.0  # seconds a tool waits for the embedded server, by default ([database] wait)
POLL = 0.1  # seconds between looks at a server the daemon is starting again


@dataclass(slots=True)
class Spool:
    """An open spool database, and the embedded server behind it if there is one."""

    database: db.Database
    server: embedded.EmbeddedPostgres | None


@contextlib.asynccontextmanager
async def open_spool(
    dsn: str | None,
    data_dir: Path,
    pool_size: int,
    *,
    lock: owner.SpoolLock | None = None,
    before_migrations: Callable[[str], Awaitable[None]] | None = None,
    wait: float = WAIT,
    config: Path | None = None,
    defaults: Sequence[Path] = (),
) -> AsyncIterator[Spool]:
    """Connect to `dsn`, or with none start (or attach to) the embedded server in
    `data_dir`; run `before_migrations(dsn)`; apply pending migrations; yield a pool
    of `pool_size`. A tool's pool looks first: a current schema costs it one query.

    lock: the daemon's lock on data_dir (it owns the server: on exit the server is
    stopped, unless it was found running and the daemon failed before it served).
    Without one, a tool's: `wait` bounds every wait for the server; `config` (and the
    `defaults` it is found by) says which daemons are this one's
    (errors.SpoolInUse when one runs on another spool).
    """
    server: embedded.EmbeddedPostgres | None = None
    served = False
    admin_dsn: str | None = None  # the embedded server found running: its database made if missing
    if dsn is None:
        server = embedded.EmbeddedPostgres(data_dir)
        if lock is not None:
            admin_dsn = await asyncio.to_thread(server.start)
        else:
            admin_dsn = await _as_guest(server, wait, config, defaults)
        dsn = server.dsn(admin_dsn)
        if lock is not None or server.started_here:
            await db.ensure_database(admin_dsn, embedded.DATABASE)
            admin_dsn = None
    database: db.Database | None = None
    try:
        try:
            if before_migrations is not None:
                await before_migrations(dsn)
            if lock is None:
                database = await _as_tool(dsn, pool_size, wait, admin_dsn)
            else:
                await _migrated(dsn, None)
                database = await db.Database.connect(dsn, max_size=pool_size)
        except errors.DatabaseUnavailable as exc:
            if server is not None:
                raise
            where = _where(dsn)
            raise errors.DatabaseUnavailable(
                f"cannot reach the spool database at {where} ([database] dsn): {exc}"
            ) from exc
        served = True
        yield Spool(database, server)
    finally:
        stop = False
        if server is not None:
            if lock is not None:
                stop = served or server.started_here
            else:
                stop = (
                    server.started_here
                    and (database is None or not await _others_connected(database))
                    and await asyncio.to_thread(owner.holder, server.data_dir) is None  # no daemon took it meanwhile
                )
        if database is not None:
            await database.close()
        if server is not None and stop:
            await asyncio.to_thread(server.stop, 60.0 if lock is not None else wait)
            logger.info("embedded_postgres_stopped", data_dir=str(server.data_dir))


async def _as_tool(dsn: str, pool_size: int, wait: float, admin_dsn: str | None) -> db.Database:
    """A tool's pool: its first connection asks whether the schema is current (it
    usually is: the daemon migrated it), and only a spool behind is migrated, waiting
    `wait` at most for another process's run. With `admin_dsn` (the daemon's embedded
    server), the database is made first if it is missing."""
    try:
        database = await db.Database.connect(dsn, max_size=pool_size)
    except errors.SpoolError:
        if admin_dsn is None:
            raise
        await db.ensure_database(admin_dsn, embedded.DATABASE)  # a server whose first start was cut short
        database = await db.Database.connect(dsn, max_size=pool_size)
    try:
        if not await migrate.current(database):
            await _migrated(dsn, wait)
    except BaseException:
        await database.close()
        raise
    return database


async def _migrated(dsn: str, wait: float | None) -> None:
    for migration in await migrate.apply(dsn, wait):
        logger.info("migrated", version=migration.version, name=migration.name)


async def _as_guest(
    server: embedded.EmbeddedPostgres, wait: float, config: Path | None, defaults: Sequence[Path]
) -> str:
    """The admin DSN of the embedded server for a tool: the daemon's (waited for at most
    `wait`), else one started here (within `wait`)."""
    data_dir = server.data_dir
    found = await asyncio.to_thread(owner.holder, data_dir)
    if found is not None:
        deadline = time.monotonic() + wait
        while (admin_dsn := await asyncio.to_thread(server.attach)) is None:
            if time.monotonic() > deadline:
                raise errors.EmbeddedDatabaseError(
                    f"the embedded PostgreSQL in {data_dir} is not running, and {found.describe()}, which owns it, "
                    f"has not started it again within {wait:g} s ([database] wait); see its log, and try again"
                )
            await asyncio.sleep(POLL)
        return admin_dsn
    if config is not None:
        elsewhere = [d for d in await asyncio.to_thread(owner.daemons_of, config, defaults) if d.data_dir != data_dir]
        if elsewhere:
            raise errors.SpoolInUse(_elsewhere(config, data_dir, elsewhere))
    try:
        return await _within(wait, server.start)
    except TimeoutError:
        raise errors.EmbeddedDatabaseError(
            f"the embedded PostgreSQL in {data_dir} did not start within {wait:g} s ([database] wait)"
        ) from None


def _elsewhere(config: Path, data_dir: Path, daemons: Sequence[owner.Holder]) -> str:
    where = "; ".join(
        f"{d.describe()}, keeps its spool in {d.data_dir}"
        if d.data_dir is not None
        else f"mtad run (pid {d.pid}) holds no data directory (a DSN from its environment, or still starting)"
        for d in daemons
    )
    return (
        f"this command would start a spool of its own in {data_dir}, but the daemon of {config.resolve()} runs on "
        f"another: {where}. An MTAD_DATABASE_* variable (the daemon's or this command's) overrides the file, or "
        "the file changed since the daemon started: give both the same settings, best in the file"
    )


async def _within(seconds: float, call: Callable[[], T]) -> T:
    """call() in a thread, waited for at most `seconds` (TimeoutError). The thread is
    a daemon thread: a call that hangs does not keep the process from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def target() -> None:
        try:
            result = call()
        except BaseException as exc:  # handed to the waiting coroutine
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: no one waits any more
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(target=target, name="embedded-postgres", daemon=True).start()
    async with asyncio.timeout(seconds):
        return await future


async def _others_connected(database: db.Database) -> bool:
    try:
        return bool(await database.fetchval("admin/other_clients"))
    except errors.SpoolError:
        return True


def _where(dsn: str) -> str:
    """host:port/database of a DSN, without its user or password."""
    parts = urlsplit(dsn)
    host = parse_qs(parts.query).get("host", [parts.hostname or "localhost"])[0]
    return f"{host}:{parts.port or 5432}/{parts.path.lstrip('/')}"
