"""PostgreSQL access: the asyncpg pool, named SQL, and error translation (the names
mtad.db gives).

Every statement lives in a file under mtad/sql/ and is referred to by its name
(`"spool/insert_messages"`); files are read once. asyncpg and socket errors are
translated here, once, into errors.DatabaseUnavailable (connection-level, retryable),
errors.OutcomeUnknown (lost during COMMIT), errors.Conflict (unique violation) or
errors.SpoolError.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from importlib import resources
from typing import Any, TypeVar, cast

import asyncpg
import structlog

from mtad.base import errors
from mtad.db.settings import CONNECT_TIMEOUT

Row = Mapping[str, Any]  # an asyncpg.Record: read-only, by column name
T = TypeVar("T")


_INCLUDE = re.compile(r"^\\include (\S+)\n", re.MULTILINE)


@functools.cache
def sql(name: str) -> str:
    """The text of mtad/sql/<name>.sql, read once; a line `\\include OTHER` stands for
    the text of mtad/sql/OTHER.sql, so that a clause several statements share is
    written once."""
    text = (resources.files("mtad") / "sql" / f"{name}.sql").read_text()
    return _INCLUDE.sub(lambda m: sql(m[1]), text)


def translate(exc: BaseException) -> errors.MtadError | None:
    """The mtad error for a foreign exception, or None if it is not ours to translate."""
    if isinstance(exc, asyncpg.UniqueViolationError):
        return errors.Conflict(str(exc))
    if isinstance(
        exc,
        (
            OSError,
            TimeoutError,
            asyncpg.PostgresConnectionError,
            asyncpg.exceptions.OperatorInterventionError,
            asyncpg.TooManyConnectionsError,
            asyncpg.InternalClientError,  # the protocol out of step: a server killed mid-statement
        ),
    ):
        return errors.DatabaseUnavailable(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, asyncpg.exceptions.DataError):
        return errors.DatabaseUnavailable(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, (asyncpg.PostgresError, asyncpg.InterfaceError)):
        return errors.SpoolError(f"{type(exc).__name__}: {exc}")
    return None


@contextlib.contextmanager
def _translated() -> Any:
    try:
        yield
    except errors.MtadError:
        raise
    except Exception as exc:
        mtad_error = translate(exc)
        if mtad_error is None:
            raise
        raise mtad_error from exc


class Connection:
    """One connection (inside or outside a transaction) running named SQL."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def execute(self, name: str, *args: Any) -> str:
        with _translated():
            return cast(str, await self._conn.execute(sql(name), *args))

    async def fetch(self, name: str, *args: Any) -> list[Row]:
        with _translated():
            return cast(list[Row], await self._conn.fetch(sql(name), *args))

    async def fetchrow(self, name: str, *args: Any) -> Row | None:
        with _translated():
            return cast(Row | None, await self._conn.fetchrow(sql(name), *args))

    async def fetchval(self, name: str, *args: Any) -> Any:
        with _translated():
            return await self._conn.fetchval(sql(name), *args)

    async def executemany(self, name: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run a named statement once per row, pipelined: one round trip."""
        with _translated():
            await self._conn.executemany(sql(name), rows)

    async def execute_text(self, text: str, *args: Any) -> str:
        """Run SQL text that is not a named statement (migrations, DDL)."""
        with _translated():
            return cast(str, await self._conn.execute(text, *args))

    async def cursor(self, name: str, *args: Any, prefetch: int = 500) -> AsyncIterator[Row]:
        """Stream the rows of a named query; must run inside a transaction."""
        with _translated():
            async for row in self._conn.cursor(sql(name), *args, prefetch=prefetch):
                yield row

    async def copy_in(self, table: str, source: Any, columns: Sequence[str]) -> None:
        """COPY CSV with a header line from `source` (a path or a binary file) into
        `table`; a row that cannot be read is a SpoolError that names its line."""
        with _translated():
            try:
                await self._conn.copy_to_table(table, source=source, columns=list(columns), format="csv", header=True)
            except asyncpg.PostgresError as exc:
                line = re.match(r"COPY [^,]+, line (\d+)", getattr(exc, "context", None) or "")
                if line is None:
                    raise
                raise errors.SpoolError(f"line {line.group(1)}: {exc}") from exc

    async def copy_out(self, name: str, output: Any, *args: Any) -> None:
        """COPY the rows of a named query to `output` (a path or a binary file) as CSV
        with a header line."""
        with _translated():
            await self._conn.copy_from_query(sql(name), *args, output=output, format="csv", header=True)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A transaction on this connection; a lost COMMIT raises OutcomeUnknown."""
        with _translated():
            tx = self._conn.transaction()
            await tx.start()
        try:
            yield self
        except BaseException:
            with contextlib.suppress(Exception):
                await tx.rollback()
            raise
        try:
            await tx.commit()
        except Exception as exc:
            mtad_error = translate(exc)
            if isinstance(mtad_error, errors.DatabaseUnavailable):
                raise errors.OutcomeUnknown(str(mtad_error)) from exc
            if mtad_error is None:
                raise
            raise mtad_error from exc


async def _no_session_state(conn: asyncpg.Connection) -> None:
    """What a pooled connection needs on release beyond asyncpg's own clean-up
    (which rolls back an open transaction): nothing, since mtad leaves no session
    state on pooled connections (no SET, LISTEN or session-level advisory lock;
    those get a connection of their own). asyncpg's default reset costs a round
    trip per release (RESET ALL, UNLISTEN *, ...), once per group commit."""


class Database:
    """An asyncpg pool. Create with `await Database.connect(dsn)`; close with `close()`."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, name: str = "main") -> None:
        self._pool = pool
        self.dsn = dsn
        self.name = name  # in the pool metrics

    @classmethod
    async def connect(
        cls, dsn: str, *, min_size: int = 1, max_size: int = 10, replan: bool = False, name: str = "main"
    ) -> Database:
        """Open the pool; raises DatabaseUnavailable if the server cannot be reached.

        replan: plan every statement with the table sizes of the moment, never
        reuse a generic plan. A generic plan made while the spool was drained (a
        sequential scan of a tiny table) stays for the connection's life as the
        table grows; the delivery queries (leasing, recording) need this, the
        accept statement does not (it only inserts, through unique indexes).
        """
        with _translated():
            pool = await asyncpg.create_pool(
                dsn,
                server_settings={"plan_cache_mode": "force_custom_plan"} if replan else None,
                min_size=min_size,
                max_size=max_size,
                timeout=CONNECT_TIMEOUT,
                # Recycle connections now and then, so that plans cached while a
                # table was empty (a seq-scan plan for a lookup) do not live forever.
                max_queries=100_000,
                max_inactive_connection_lifetime=300.0,
                reset=_no_session_state,
            )
        assert pool is not None
        return cls(pool, dsn, name)

    def use(self) -> tuple[int, int, int]:
        """Connections in use, idle, and at most. Sync, no I/O."""
        size, idle = self._pool.get_size(), self._pool.get_idle_size()
        return size - idle, idle, self._pool.get_max_size()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._pool.close()

    def terminate(self) -> None:
        self._pool.terminate()

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection for several statements."""
        with _translated():
            conn = await self._pool.acquire(timeout=CONNECT_TIMEOUT)
        try:
            yield Connection(conn)
        finally:
            with contextlib.suppress(Exception):
                await self._pool.release(conn)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Connection]:
        """A pooled connection inside a transaction: committed on clean exit."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def execute(self, name: str, *args: Any) -> str:
        async with self.connection() as conn:
            return await conn.execute(name, *args)

    async def fetch(self, name: str, *args: Any) -> list[Row]:
        async with self.connection() as conn:
            return await conn.fetch(name, *args)

    async def fetchrow(self, name: str, *args: Any) -> Row | None:
        async with self.connection() as conn:
            return await conn.fetchrow(name, *args)

    async def fetchval(self, name: str, *args: Any) -> Any:
        async with self.connection() as conn:
            return await conn.fetchval(name, *args)

    async def executemany(self, name: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run a named statement once per row, pipelined, as one transaction."""
        async with self.connection() as conn:
            await conn.executemany(name, rows)

    async def call(self, name: str, *args: Any) -> Row | None:
        """Run one statement as its own transaction; return its first row after COMMIT.

        DatabaseUnavailable: no connection, nothing was sent. OutcomeUnknown: the
        connection broke while the statement ran, so it may have committed.
        """
        async with self.connection() as conn:
            try:
                return await conn.fetchrow(name, *args)
            except errors.OutcomeUnknown:
                raise
            except errors.DatabaseUnavailable as exc:
                raise errors.OutcomeUnknown(str(exc)) from exc


class Listener:
    """A connection of its own that LISTENs on a channel and calls `callback()` for
    every notification (never a pooled connection: LISTEN is session state)."""

    def __init__(self, conn: asyncpg.Connection, channel: str, callback: Callable[[], None]) -> None:
        self._conn = conn
        self._channel = channel
        self._callback = callback

    @classmethod
    async def open(cls, dsn: str, channel: str, callback: Callable[[], None]) -> Listener:
        with _translated():
            conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
            listener = cls(conn, channel, callback)
            await conn.add_listener(channel, listener._notified)
        return listener

    def _notified(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self._callback()

    @property
    def alive(self) -> bool:
        return not self._conn.is_closed()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._conn.close()


class Listening:
    """A LISTEN kept: `keep()` opens it, and again once its connection was lost (the
    database restarted); until then the caller's poll finds the work.

    The Listenings of a process on one database share one connection (_Channels):
    PostgreSQL signals every listening connection of a database at every NOTIFY,
    whatever its channel, so each more costs every NOTIFY of every node."""

    def __init__(self, dsn: str, channel: str, callback: Callable[[], None]) -> None:
        self._dsn = dsn
        self._channel = channel
        self._callback = callback
        self._channels: _Channels | None = None

    def _notified(self, conn: object, pid: int, channel: str, payload: str) -> None:
        self._callback()

    async def keep(self) -> None:
        if self._channels is None:
            self._channels = _Channels.of(self._dsn)
        try:
            await self._channels.listen(self._channel, self._notified)
        except errors.DatabaseUnavailable as exc:
            structlog.get_logger("mtad.db").warning("listen_failed", channel=self._channel, error=str(exc))

    async def close(self) -> None:
        if self._channels is not None:
            await self._channels.unlisten(self._channel, self._notified)
            self._channels = None


Notified = Callable[[object, int, str, str], None]
_CHANNELS: dict[str, _Channels] = {}  # by DSN: the shared LISTEN connection (of the loop that made it)


class _Channels:
    """The one LISTEN connection of this process's event loop on a database, with every
    channel and callback its Listenings asked for; closed when the last lets go."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._loop = asyncio.get_running_loop()
        self._conn: asyncpg.Connection | None = None
        self._wanted: list[tuple[str, Notified]] = []
        self._lock = asyncio.Lock()

    @classmethod
    def of(cls, dsn: str) -> _Channels:
        """The shared one of this DSN on the running loop (a new one on another loop)."""
        found = _CHANNELS.get(dsn)
        if found is None or found._loop is not asyncio.get_running_loop():
            found = _CHANNELS[dsn] = cls(dsn)
        return found

    async def listen(self, channel: str, callback: Notified) -> None:
        """Listen for `callback` too, on a connection that is open (opened again if it was lost)."""
        async with self._lock:
            fresh = (channel, callback) not in self._wanted
            if fresh:
                self._wanted.append((channel, callback))
            try:
                with _translated():
                    if self._conn is None or self._conn.is_closed():
                        self._conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT)
                        for each, told in self._wanted:
                            await self._conn.add_listener(each, told)
                    elif fresh:
                        await self._conn.add_listener(channel, callback)
            except BaseException:
                await self._close()  # the next listen() opens it again with every channel
                raise

    async def unlisten(self, channel: str, callback: Notified) -> None:
        async with self._lock:
            if (channel, callback) in self._wanted:
                self._wanted.remove((channel, callback))
            if not self._wanted:
                await self._close()
                if _CHANNELS.get(self._dsn) is self:
                    del _CHANNELS[self._dsn]
            elif self._conn is not None:
                with contextlib.suppress(Exception):
                    await self._conn.remove_listener(channel, callback)

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


async def connect_once(dsn: str) -> Connection:
    """A single connection outside any pool (for administrative work); close with close()."""
    with _translated():
        conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
    return Connection(conn)


async def close(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        await conn._conn.close()


async def ensure_database(admin_dsn: str, name: str) -> None:
    """Create database `name` on the server of admin_dsn unless it exists."""
    if not name.replace("_", "").isalnum():
        raise errors.SpoolError(f"refusing to create a database named {name!r}")
    conn = await connect_once(admin_dsn)
    try:
        if not await conn.fetchval("admin/database_exists", name):
            try:
                await conn.execute_text(f'CREATE DATABASE "{name}"')
            except errors.SpoolError:
                if not await conn.fetchval("admin/database_exists", name):
                    raise  # not merely a concurrent creation
    finally:
        await close(conn)


async def retrying(op: Callable[[], Awaitable[T]], *, attempts: int = 2) -> T:
    """Run op again on a fresh connection if it failed before COMMIT was sent.

    A pooled connection can be dead without the pool knowing (the server
    restarted); the first use fails and the pool replaces it. OutcomeUnknown is
    never retried here: the caller must decide.
    """
    for attempt in range(attempts):
        try:
            return await op()
        except errors.OutcomeUnknown:
            raise
        except errors.DatabaseUnavailable:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
