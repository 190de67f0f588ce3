"""Opening the spool for a tool: every wait bounded, and an error that says what
it waited for."""

import socket
from pathlib import Path

import pytest

from mtad import db
from mtad.base import errors
from mtad.db import migrate, opening


async def test_a_tool_waits_for_another_migration_run_no_longer_than_it_was_told(dsn: str, tmp_path: Path) -> None:
    other = await db.connect_once(dsn)  # another process, in the middle of its migration run
    try:
        await other.execute("migrate/lock", migrate.LOCK_KEY)
        with pytest.raises(errors.DatabaseUnavailable, match=r"migrating the spool's schema for over 0.5 s"):
            async with opening.open_spool(dsn, tmp_path, 1, wait=0.5):
                pass
        await other.execute("migrate/unlock", migrate.LOCK_KEY)
        async with opening.open_spool(dsn, tmp_path, 1, wait=0.5) as opened:  # its turn came
            assert await opened.database.fetchval("migrate/try_lock", migrate.LOCK_KEY)
    finally:
        await db.close(other)


async def test_a_configured_database_that_is_not_there_is_named(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(
        errors.DatabaseUnavailable, match=rf"spool database at 127.0.0.1:{port}/spool \(\[database\] dsn\)"
    ):
        async with opening.open_spool(f"postgresql://mtad:secret@127.0.0.1:{port}/spool", tmp_path, 1, wait=1):
            pass
