"""The tests' PostgreSQL from outside the code under test: ad-hoc SQL for assertions, and
coroutines run to completion from sync code (fixtures, acceptance tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mtad import db

T = TypeVar("T")


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion on a loop of its own, in a thread of its own
    (safe from sync fixtures while a test's loop exists)."""
    result: list[Any] = []

    def target() -> None:
        async def wrapped() -> T:
            return await make()

        try:
            result.append(asyncio.run(wrapped()))
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]  # type: ignore[no-any-return]


def with_database(admin_dsn: str, name: str) -> str:
    """admin_dsn with its database name replaced."""
    head, sep, query = admin_dsn.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{name}{sep}{query}"


async def admin(admin_dsn: str, *statements: str) -> None:
    conn = await db.connect_once(admin_dsn)
    try:
        for statement in statements:
            await conn.execute_text(statement)
    finally:
        await db.close(conn)


async def query(database: db.Database, text: str, *args: Any) -> list[Any]:
    """Ad-hoc SQL for assertions (the code under test uses named statements only)."""
    async with database.connection() as conn:
        return list(await conn._conn.fetch(text, *args))


def rows(dsn: str, text: str, *args: Any) -> list[dict[str, Any]]:
    """Ad-hoc SQL from sync code (acceptance tests, beside a running mtad), on a
    connection of its own: the rows as dicts."""

    async def fetch() -> list[dict[str, Any]]:
        database = await db.Database.connect(dsn, max_size=1)
        try:
            return [dict(r) for r in await query(database, text, *args)]
        finally:
            await database.close()

    return run_sync(fetch)
