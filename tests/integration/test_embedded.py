"""The embedded PostgreSQL: started once, attached to after, stopped on request."""

from __future__ import annotations

from pathlib import Path

from mtad import db
from mtad.db import embedded


async def test_start_attach_and_stop(tmp_path: Path) -> None:
    data_dir = tmp_path / "nested" / "pgdata"  # parents are created
    first = embedded.EmbeddedPostgres(data_dir)
    admin_dsn = first.start()
    try:
        assert first.started_here
        assert first.is_running()
        pid = (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]

        second = embedded.EmbeddedPostgres(data_dir)  # another process would do the same
        assert second.start() == admin_dsn
        assert not second.started_here  # attached, not started twice
        assert (data_dir / "postmaster.pid").read_text().split("\n", 1)[0] == pid

        await db.ensure_database(admin_dsn, embedded.DATABASE)
        await db.ensure_database(admin_dsn, embedded.DATABASE)  # idempotent
        database = await db.Database.connect(first.dsn(admin_dsn))
        try:
            assert await database.fetchval("admin/ping") == 1
        finally:
            await database.close()
    finally:
        first.stop()
    assert not first.is_running()
    assert not (data_dir / "postmaster.pid").exists()
