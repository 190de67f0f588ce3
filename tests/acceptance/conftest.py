"""Fixtures of the acceptance tier: `mtad run` nodes (tests/running.py), the DNS and
the SMTP sink they deliver to, sending mailboxes behind a smarthost, a webhook
endpoint."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.mailboxes import Rig
from tests.dnsserver import Dnsmasq
from tests.hooks import Receiver
from tests.running import Mtad, write_config
from tests.sink import ThreadedSink


@pytest.fixture
def mtad_factory(tmp_path: Path) -> Iterator[Any]:
    """mtad_factory(database_lines, extra_toml, env, **write_config options) -> Mtad (not
    started); every one still running is stopped at the end."""
    started: list[Mtad] = []

    def make(database: str, extra: str = "", env: dict[str, str] | None = None, **options: Any) -> Mtad:
        config = write_config(tmp_path / f"mtad{len(started)}.toml", database, extra, **options)
        daemon = Mtad(config, env)
        started.append(daemon)
        return daemon

    yield make
    for daemon in started:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.stop()


@pytest.fixture
def dns() -> Iterator[Dnsmasq]:
    """dnsmasq answering for sink.test (MX 10 on 127.0.0.2, MX 20 on 127.0.0.3) and
    nullmx.test (a null MX): `running.delivering` points a node at it."""
    server = Dnsmasq(
        "test",
        [
            "--mx-host=sink.test,mx1.sink.test,10",
            "--mx-host=sink.test,mx2.sink.test,20",
            "--host-record=mx1.sink.test,127.0.0.2",
            "--host-record=mx2.sink.test,127.0.0.3",
            "--dns-rr=nullmx.test,15,000000",
        ],
    )
    yield server
    server.close()


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    """An SMTP sink on 127.0.0.2 and 127.0.0.3, the MX hosts of sink.test."""
    with ThreadedSink(("127.0.0.2", "127.0.0.3")) as started:
        yield started


@pytest.fixture
def rig(mtad_factory: Any, dsn: str, tls_files: tuple[Path, Path], tmp_path: Path) -> Rig:
    """Nodes that relay through sending mailboxes at a smarthost process (tests/acceptance/mailboxes.py)."""
    return Rig(mtad_factory, dsn, tls_files, tmp_path)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook endpoint on loopback, serving in a thread."""
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
