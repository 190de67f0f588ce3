"""What the log says when the database goes away: asyncpg's pool, reconnecting in
the background, logs each failure; mtad writes it as one structured line (the
exception's type and text), not a traceback."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from mtad import db
from mtad.base import errors, log
from tests.proxy import PgProxy


class _Seen(logging.Handler):
    """Sets `arrived` (on the test's loop) when asyncpg logs."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        self._loop.call_soon_threadsafe(self.arrived.set)


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    log.configure("json", "info", stream=stream)
    try:
        yield stream
    finally:
        log.configure("json", "info")  # back to stdout for the tests that follow


async def test_a_lost_database_is_one_line_a_time_without_a_traceback(dsn: str, logged: io.StringIO) -> None:
    seen = _Seen()
    asyncpg_log = logging.getLogger("asyncpg")
    asyncpg_log.addHandler(seen)
    try:
        with PgProxy(dsn) as proxy:
            database = await db.Database.connect(proxy.dsn, min_size=1, max_size=2)
            try:
                proxy.cut()  # the server is gone: the pool's connection is closed, a new one refused
                with pytest.raises(errors.DatabaseUnavailable):
                    await database.fetchval("retention/lock", 1)
                await asyncio.wait_for(seen.arrived.wait(), 30)  # the pool tried to reconnect, and logged
            finally:
                database.terminate()
    finally:
        asyncpg_log.removeHandler(seen)
    log.flush()
    records = [json.loads(line) for line in logged.getvalue().splitlines()]
    failed = [r for r in records if r.get("logger", "").startswith("asyncpg")]
    assert failed, records
    for record in failed:
        assert "exception" not in record
        assert (record["event"], record["level"]) == ("database_unavailable", "warning")
        assert record["error"].startswith("ConnectionRefusedError: "), record
        assert record["detail"] == "Failed to restore the pool connection floor; retrying"
