"""Opening the spool database: the configured DSN, or the embedded PostgreSQL started
(or attached to) for it; pending migrations applied; a pool yielded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from mtad import db
from mtad.base import errors
from mtad.db import embedded, migrate

logger = structlog.get_logger("mtad.db")


@dataclass(slots=True)
class Spool:
    """An open spool database, and the embedded server behind it if there is one."""

    database: db.Database
    server: embedded.EmbeddedPostgres | None


@contextlib.asynccontextmanager
async def open_spool(
    dsn: str | None, data_dir: Path, pool_size: int, *, stop_embedded: bool | None = None
) -> AsyncIterator[Spool]:
    """Connect to `dsn`, or with none start (or attach to) the embedded server in
    `data_dir`; apply pending migrations; yield a pool of `pool_size`.

    On exit the pool is closed and the embedded server stopped when stop_embedded
    is true; None means "only if this call started it and no other client is
    connected" (what a command-line tool wants while the daemon may be running).
    """
    server: embedded.EmbeddedPostgres | None = None
    if dsn is None:
        server = embedded.EmbeddedPostgres(data_dir)
        admin_dsn = await asyncio.to_thread(server.start)
        await db.ensure_database(admin_dsn, embedded.DATABASE)
        dsn = server.dsn(admin_dsn)
    database: db.Database | None = None
    try:
        applied = await migrate.apply(dsn)
        for migration in applied:
            logger.info("migrated", version=migration.version, name=migration.name)
        database = await db.Database.connect(dsn, max_size=pool_size)
        yield Spool(database, server)
    finally:
        stop = False
        if server is not None:
            if stop_embedded is not None:
                stop = stop_embedded
            else:
                stop = server.started_here and (database is None or not await _others_connected(database))
        if database is not None:
            await database.close()
        if server is not None and stop:
            await asyncio.to_thread(server.stop)
            logger.info("embedded_postgres_stopped", data_dir=str(server.data_dir))


async def _others_connected(database: db.Database) -> bool:
    try:
        return bool(await database.fetchval("admin/other_clients"))
    except errors.SpoolError:
        return True
