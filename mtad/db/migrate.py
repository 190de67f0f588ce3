"""Numbered schema migrations: mtad/migrations/NNNN_name.sql, applied in order,
then the functions: mtad/sql/functions/*.sql, applied every time.

`apply()` holds a PostgreSQL advisory lock for the whole run, so two nodes
starting at once apply each migration exactly once; each migration runs in its
own transaction together with its row in `schema_migrations`. Then every
function file runs (CREATE OR REPLACE, by file name, in one transaction), so a
fresh database and an upgraded one end with the functions as those files say;
skipped when neither the files nor the functions changed since the last run
(`schema_functions` keeps both digests).
A migration keeps the text its functions had when it was written (a later
migration or a trigger may need them); one that changes a function's arguments
or result drops the old one, since CREATE OR REPLACE cannot.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from dataclasses import dataclass
from importlib import resources

from mtad import db
from mtad.base import errors

# An arbitrary constant: pg_advisory_lock key "mtad migrations".
LOCK_KEY = 0x6D7461645F6D6967
LOCK_POLL = 0.2  # seconds between tries of a bounded wait for the lock
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class FunctionFile:
    name: str  # the file's name without .sql
    text: str


def available() -> list[Migration]:
    """Every migration shipped with mtad, by version; refuses gaps and duplicates."""
    found: list[Migration] = []
    for entry in resources.files("mtad").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise errors.SpoolError(f"migrations must be numbered 1..n without gaps: {versions}")
    return found


def functions() -> list[FunctionFile]:
    """Every function file shipped with mtad, by name (the order they are applied in),
    with the statements it `\\include`s."""
    names = sorted(
        entry.name.removesuffix(".sql")
        for entry in resources.files("mtad").joinpath("sql", "functions").iterdir()
        if entry.name.endswith(".sql")
    )
    return [FunctionFile(name, db.sql(f"functions/{name}")) for name in names]


async def current(database: db.Database) -> bool:
    """Whether the schema needs nothing: no migration run under way, every migration
    applied, and the functions as the files made them (one query; a spool never
    migrated is not current)."""
    try:
        found = await database.fetchrow("migrate/current", LOCK_KEY)
    except errors.SpoolError:  # no schema_migrations or schema_functions yet
        return False
    return (
        found is not None
        and found["free"]
        and found["version"] == _latest()
        and (found["recorded_files"], found["recorded_installed"]) == (_digest(functions()), found["installed"])
    )


def _latest() -> int:
    """The number of the last migration shipped, from the files' names alone (available()
    reads and checks them all)."""
    names = resources.files("mtad").joinpath("migrations").iterdir()
    return max((int(match.group(1)) for entry in names if (match := _NAME.match(entry.name))), default=0)


def _digest(files: list[FunctionFile]) -> str:
    return hashlib.sha256("".join(f"{f.name}\0{f.text}\0" for f in files).encode()).hexdigest()


async def _apply_functions(conn: db.Connection) -> None:
    """Run the function files unless the database holds what they made last time: a
    tool's start then costs one query, and a running node's plans are not invalidated."""
    files = functions()
    digest = _digest(files)
    await conn.execute("migrate/create_functions_table")
    now = await conn.fetchrow("migrate/functions_now")
    if now is not None and (now["recorded_files"], now["recorded_installed"]) == (digest, now["installed"]):
        return
    async with conn.transaction():
        for function in files:
            await conn.execute_text(function.text)
        await conn.execute("migrate/record_functions", digest)


async def _lock(conn: db.Connection, wait: float | None) -> None:
    if wait is None:
        await conn.execute("migrate/lock", LOCK_KEY)
        return
    deadline = time.monotonic() + wait
    while not await conn.fetchval("migrate/try_lock", LOCK_KEY):
        if time.monotonic() >= deadline:
            raise errors.DatabaseUnavailable(
                f"another process has been migrating the spool's schema for over {wait:g} s ([database] wait); "
                "try again when it is done"
            )
        await asyncio.sleep(LOCK_POLL)


async def apply(dsn: str, wait: float | None = None) -> list[Migration]:
    """Apply every pending migration, then every function file; return the
    migrations applied by this call. `wait`: the seconds to wait at most for another
    process's migration run (errors.DatabaseUnavailable after), else as long as it takes."""
    conn = await db.connect_once(dsn)
    try:
        await _lock(conn, wait)
        try:
            await conn.execute("migrate/create_table")
            done = {row["version"] for row in await conn.fetch("migrate/applied")}
            applied = []
            for migration in available():
                if migration.version in done:
                    continue
                async with conn.transaction():
                    await conn.execute_text(migration.text)
                    await conn.execute("migrate/record", migration.version, migration.name)
                applied.append(migration)
            await _apply_functions(conn)
            return applied
        finally:
            await conn.execute("migrate/unlock", LOCK_KEY)
    finally:
        await db.close(conn)
