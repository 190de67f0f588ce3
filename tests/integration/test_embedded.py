"""The embedded PostgreSQL: started once, attached to after, stopped on request; its
data directory locked by one process at a time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mtad import db
from mtad.base import errors
from mtad.db import embedded, owner


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


HOLD = """
import sys
from pathlib import Path
from mtad.db import owner
owner.SpoolLock.take(Path(sys.argv[1]), None, {"submission": ["127.0.0.1:2525"]})
print("held", flush=True)
sys.stdin.read()
"""


def test_one_process_locks_a_data_directory_until_it_dies(tmp_path: Path) -> None:
    data_dir = tmp_path / "state" / "pgdata"
    assert owner.holder(data_dir) is None  # no lock file yet
    with subprocess.Popen([sys.executable, "-c", HOLD, str(data_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:  # fmt: skip
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "held\n"
            found = owner.holder(data_dir)
            assert found is not None
            assert (found.pid, found.data_dir) == (child.pid, data_dir)
            assert dict(found.listening) == {"submission": ["127.0.0.1:2525"]}
            with pytest.raises(errors.SpoolInUse) as refused:
                owner.SpoolLock.take(data_dir, None, {})
            assert f"pid {child.pid}" in str(refused.value)
            assert "127.0.0.1:2525 (submission)" in str(refused.value)
        finally:
            child.kill()  # kill -9: the kernel drops its lock
    assert owner.holder(data_dir) is None
    lock = owner.SpoolLock.take(data_dir, None, {})
    try:
        lock.announce({"submission": ["127.0.0.1:2526"], "http": []})
        found = owner.holder(data_dir)
        assert found is not None
        assert dict(found.listening) == {"submission": ["127.0.0.1:2526"]}
        with pytest.raises(errors.SpoolInUse):
            owner.SpoolLock.take(data_dir, None, {})  # another open of the file: refused in one process too
    finally:
        lock.release()
    assert owner.holder(data_dir) is None
