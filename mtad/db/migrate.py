"""Numbered schema migrations: mtad/migrations/NNNN_name.sql, applied in order.

`apply()` holds a PostgreSQL advisory lock for the whole run, so two nodes
starting at once apply each migration exactly once; each migration runs in its
own transaction together with its row in `schema_migrations`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from mtad import db, errors

# An arbitrary constant: pg_advisory_lock key "mtad migrations".
LOCK_KEY = 0x6D7461645F6D6967
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
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


async def apply(dsn: str) -> list[Migration]:
    """Apply every pending migration; return the ones applied by this call."""
    conn = await db.connect_once(dsn)
    try:
        await conn.execute("migrate/lock", LOCK_KEY)
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
            return applied
        finally:
            await conn.execute("migrate/unlock", LOCK_KEY)
    finally:
        await db.close(conn)
