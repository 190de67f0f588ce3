"""`mtad run` as a subprocess, with a temporary configuration.

The harness reads mtad's JSON log from its stdout and waits for the `ready`
record (which names the ports it bound: the configuration asks for port 0),
never for a fixed time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

STARTUP_TIMEOUT = 60.0


class Mtad:
    def __init__(
        self, config: Path, env: dict[str, str] | None = None, *, python: str = sys.executable, cwd: Path | None = None
    ) -> None:
        self.config = config
        self.python = python  # another installation's interpreter, for the packaged install
        self.cwd = cwd
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("MTAD_")}
        self.env = {**inherited, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.records: list[dict[str, Any]] = []
        self.output: list[str] = []
        self._ready = threading.Event()
        self._logged = threading.Condition()
        self._reader: threading.Thread | None = None

    def start(self) -> Mtad:
        self.records.clear()
        self._ready.clear()
        self.process = subprocess.Popen(
            [self.python, "-m", "mtad", "run", "--config", str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.cwd,
        )
        self._reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
        self._reader.start()
        if not self._ready.wait(STARTUP_TIMEOUT):
            self.process.kill()
            raise AssertionError("mtad did not become ready:\n" + "\n".join(self.output[-30:]))
        if self.ready is None:
            raise AssertionError("mtad exited before it was ready:\n" + "\n".join(self.output[-30:]))
        return self

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.output.append(line)
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._logged:
                self.records.append(record)
                self._logged.notify_all()
            if record.get("event") == "ready":
                self._ready.set()
        process.stdout.close()
        self._ready.set()  # exited: start() reports it

    @property
    def ready(self) -> dict[str, Any] | None:
        return next((r for r in self.records if r.get("event") == "ready"), None)

    @property
    def smtp_port(self) -> int:
        assert self.ready is not None
        return int(self.ready["smtp"][0].rsplit(":", 1)[1])

    @property
    def http_port(self) -> int:
        assert self.ready is not None
        return int(self.ready["http"].rsplit(":", 1)[1])

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == name]

    def wait_for_log(self, predicate: Callable[[list[dict[str, Any]]], bool], within: float = 60) -> None:
        """Until predicate(records) holds (the log is read as mtad writes it), or fail."""
        with self._logged:
            if not self._logged.wait_for(lambda: predicate(self.records), timeout=within):
                raise AssertionError("mtad did not log what was expected:\n" + "\n".join(self.output[-20:]))

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait for the exit; returns the exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        assert self._reader is not None
        self._reader.join(10)
        return code

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)
        assert self._reader is not None
        self._reader.join(10)

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.python, "-m", "mtad", *args, "--config", str(self.config)],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.cwd,
            timeout=120,
        )


CONF = Path(__file__).parents[2] / "conf"
TESTS = Path(__file__).parents[1]


def write_config(
    path: Path,
    database: str,
    extra: str = "",
    *,
    delivery: str = "enabled = false",
    submission: str = "check_recipient_domains = false",
    node: str = "test-node",
    heartbeat: str = "10s",
    providers: Path = TESTS / "providers.toml",
) -> Path:
    """A configuration for tests: free ports, JSON logs, the given [database] lines.

    By default the node only accepts (delivery off) and does not look recipient
    domains up: there is no DNS here unless a test brings its own."""
    path.write_text(
        f"""
[database]
{database}
pool_size = 5

[submission]
listen = ["127.0.0.1:0"]
hostname = "mtad.test"
shutdown_timeout = "20s"
{submission}

[http]
listen = "127.0.0.1:0"

[log]
format = "json"
level = "info"

[node]
id = "{node}"
heartbeat_interval = "{heartbeat}"

[delivery]
providers = "{providers}"
{delivery}
{extra}
"""
    )
    return path


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
