"""One daemon per spool, and one spool for the daemon and its tools: a second `mtad
run` on the same data directory (or the same [node] id on the same database) refuses
before it touches anything; a kill -9 leaves no lock behind; a bind that fails names
its address; a tool reaches the daemon's spool with the daemon's file, waits no longer
than its own timeout for a server the daemon is restarting, and refuses to start a
spool of its own while the daemon of its file runs on another."""

from __future__ import annotations

import json
import os
import signal
import smtplib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.mail import submit
from tests.running import Mtad, write_config

pytestmark = pytest.mark.slow


def postmaster(data_dir: Path) -> str:
    return (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]


def refused(daemon: Mtad, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`mtad run` with the daemon's file, expected to stop by itself: (status, output)."""
    done = subprocess.run([daemon.python, "-m", "mtad", "run", "--config", str(daemon.config)],
                          capture_output=True, text=True, env={**daemon.env, **(env or {})}, timeout=120)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def failure(output: str) -> str:
    """The error of the `startup_failed` record `mtad run` logged."""
    for line in output.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("event") == "startup_failed":
            return str(record["error"])
    raise AssertionError(f"no startup_failed record:\n{output}")


def test_a_second_run_on_the_same_data_directory_refuses_and_the_first_goes_on(
    mtad_factory: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "pgdata"
    first: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{data_dir}"').start()
    assert first.process is not None
    server = postmaster(data_dir)
    with smtplib.SMTP("127.0.0.1", first.smtp_port, timeout=30) as client:
        submit(client, "<before@example.org>")

    status, output = refused(first)
    assert status != 0, output
    error = failure(output)
    assert f"pid {first.process.pid}" in error, error
    assert f"127.0.0.1:{first.smtp_port}" in error, error  # its listen addresses
    assert f"127.0.0.1:{first.http_port}" in error, error
    assert str(data_dir) in error, error

    # Nothing was touched: the same postmaster, the node's row still names the first.
    assert postmaster(data_dir) == server
    assert not first.events("embedded_postgres_died")
    reloaded = first.cli("reload")
    assert reloaded.returncode == 0, reloaded.stderr
    assert f"(pid {first.process.pid})" in reloaded.stdout
    with smtplib.SMTP("127.0.0.1", first.smtp_port, timeout=30) as client:
        submit(client, "<after@example.org>")  # the first goes on accepting

    # A kill -9 leaves no lock that blocks the next start; the server left running is reattached.
    first.kill()
    first.start()
    assert postmaster(data_dir) == server
    listed = first.cli("queue", "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 2
    assert first.stop() == 0


def test_a_second_run_with_the_same_node_id_on_one_database_refuses(mtad_factory: Any, dsn: str) -> None:
    first: Mtad = mtad_factory(f'dsn = "{dsn}"', node="shared").start()
    assert first.process is not None
    status, output = refused(mtad_factory(f'dsn = "{dsn}"', node="shared"))
    assert status != 0, output
    error = failure(output)
    assert f"pid {first.process.pid}" in error, error
    assert f"127.0.0.1:{first.smtp_port}" in error, error
    assert "shared" in error, error
    [node] = pg.rows(dsn, "SELECT pid FROM nodes WHERE id = 'shared'")
    assert node["pid"] == first.process.pid  # its row was not overwritten

    other: Mtad = mtad_factory(f'dsn = "{dsn}"', node="other").start()  # another node id: welcome
    assert other.stop() == 0
    first.kill()  # its session, and its claim on the node id, end with it
    again: Mtad = mtad_factory(f'dsn = "{dsn}"', node="shared").start()
    assert again.stop() == 0


@pytest.fixture
def taken() -> Iterator[socket.socket]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


@pytest.mark.parametrize("key", ["submission", "http"])
def test_an_address_in_use_is_named(mtad_factory: Any, dsn: str, taken: socket.socket, key: str) -> None:
    busy = f"127.0.0.1:{taken.getsockname()[1]}"
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"')
    text = daemon.config.read_text()
    if key == "submission":
        text = text.replace('listen = ["127.0.0.1:0"]', f'listen = ["127.0.0.1:0", "{busy}"]', 1)
    else:
        text = text.replace('[http]\nlisten = "127.0.0.1:0"', f'[http]\nlisten = "{busy}"', 1)
    daemon.config.write_text(text)
    status, output = refused(daemon)
    assert status != 0, output
    error = failure(output)
    assert busy in error, error
    assert f"[{key}] listen" in error, error
    assert "in use" in error, error


def test_an_inbound_address_in_use_is_named(mtad_factory: Any, dsn: str, taken: socket.socket) -> None:
    busy = f"127.0.0.1:{taken.getsockname()[1]}"
    status, output = refused(mtad_factory(f'dsn = "{dsn}"', f'[inbound]\nlisten = ["{busy}"]\n'))
    assert status != 0, output
    error = failure(output)
    assert busy in error, error
    assert "[inbound] listen" in error, error


def test_a_tool_waits_no_longer_than_its_timeout_for_a_server_the_daemon_restarts(
    mtad_factory: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "pgdata"
    daemon: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{data_dir}"')
    daemon.env["MTAD_DATABASE_WAIT"] = "2s"
    daemon.start()
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGSTOP)  # it cannot start its server again while stopped
    try:
        killed = postmaster(data_dir)
        os.kill(int(killed), signal.SIGKILL)
        tool = daemon.cli("queue", "ls")
        assert tool.returncode != 0, tool.stdout
        assert f"pid {daemon.process.pid}" in tool.stderr, tool.stderr
        assert "2 s" in tool.stderr, tool.stderr
        assert postmaster(data_dir) == killed  # the tool started no server of its own
    finally:
        daemon.process.send_signal(signal.SIGCONT)
    daemon.wait_for_log(lambda records: any(r.get("event") == "embedded_postgres_restarted" for r in records))
    listed = daemon.cli("queue", "ls")
    assert listed.returncode == 0, listed.stderr
    assert daemon.stop() == 0


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    """A configuration in ROOT/etc/mtad/mtad.toml with no data_dir, as installed."""
    path = tmp_path / "root" / "etc" / "mtad" / "mtad.toml"
    path.parent.mkdir(parents=True)
    return write_config(path, 'dsn = ""')


def test_a_tool_with_the_daemons_file_reaches_its_spool(etc: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    daemon = Mtad(etc, cwd=Path("/")).start()  # as systemd starts it
    try:
        with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
            submit(client, "<installed@example.org>")
        assert (root / "var" / "lib" / "mtad" / "pgdata" / "postmaster.pid").exists()  # the state directory
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        listed = subprocess.run([sys.executable, "-m", "mtad", "queue", "ls", "--json", "--config", str(etc)],
                                capture_output=True, text=True, env=daemon.env, cwd=elsewhere, timeout=120)  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout.splitlines()) == 1
    finally:
        assert daemon.stop() == 0


def test_a_tool_refuses_a_spool_of_its_own_while_the_daemon_of_its_file_runs_on_another(
    mtad_factory: Any, tmp_path: Path
) -> None:
    theirs, ours = tmp_path / "theirs" / "pgdata", tmp_path / "ours" / "pgdata"
    daemon: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{ours}"', env={"MTAD_DATABASE_DATA_DIR": str(theirs)}).start()
    assert daemon.process is not None
    tool = subprocess.run([sys.executable, "-m", "mtad", "queue", "ls", "--config", str(daemon.config)],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in daemon.env.items() if not k.startswith("MTAD_")})  # fmt: skip
    assert tool.returncode != 0, tool.stdout
    assert str(theirs) in tool.stderr, tool.stderr
    assert f"pid {daemon.process.pid}" in tool.stderr, tool.stderr
    assert not ours.exists()  # no spool of its own was made
    assert daemon.stop() == 0
