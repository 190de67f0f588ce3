"""mtad as a subprocess, as an operator runs it: `mtad run` with a temporary
configuration, `mtad sink`, and what the tests ask of them over SMTP and HTTP.

The harness reads mtad's JSON log from its stdout and waits for the `ready`
record (which names the ports it bound: the configuration asks for port 0),
never for a fixed time."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.dnsserver import Dnsmasq
from tests.sink import ThreadedSink

STARTUP_TIMEOUT = 60.0


class Mtad:
    """`mtad run --config CONFIG` as a subprocess: start() returns once it logs `ready`
    (the ports it bound are read from that record), its JSON log is kept as it
    writes it, cli() runs `mtad ARGS` against the same configuration."""

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


CONF = Path(__file__).parents[1] / "conf"
TESTS = Path(__file__).parent


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


def http_get(port: int, path: str) -> tuple[int, str]:
    """GET a path of mtad's HTTP endpoint; (status, body), errors included."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def admin_call(port: int, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    """A request to mtad's admin API on 127.0.0.1:port: (status, the JSON answer), errors included."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None)  # fmt: skip
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.loads(refused.read())


def free_port() -> int:
    """A port of 127.0.0.1 free now, for a listener mtad does not report in `ready`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hearing(tmp_path: Path) -> tuple[int, str]:
    """A free port for the inbound listener, and the [inbound] and [bounces] tables that
    take reports there: complaints to fbl@bounces.example.org, bounces to the VERP
    addresses of bounces.example.org (its key written into tmp_path)."""
    inbound = free_port()
    key = tmp_path / "bounces.key"
    key.write_bytes(os.urandom(32).hex().encode())
    return inbound, (f'[inbound]\nlisten = ["127.0.0.1:{inbound}"]\ncomplaints = "fbl@bounces.example.org"\n'
                     f'[bounces]\ndomain = "bounces.example.org"\nkey_file = "{key}"\n')  # fmt: skip


def delivering(dns: Dnsmasq, sink: ThreadedSink, **overrides: str) -> dict[str, str]:
    """write_config options for a node that delivers to the sink, quickly."""
    settings = {
        "enabled": "true",
        "port": str(sink.port),
        "retry": '"1s"',
        "max_age": '"5s"',
        "poll_interval": '"250ms"',
        "lease_duration": '"8s"',
        "shutdown_timeout": '"10s"',
        **overrides,
    }
    return {
        "delivery": "\n".join(f"{k} = {v}" for k, v in settings.items()),
        "submission": "check_recipient_domains = true",
        "extra": f'[dns]\nnameservers = ["127.0.0.1:{dns.port}"]\ntimeout = "2s"\n',
    }


class SinkProcess:
    """`mtad sink ARGS` as a subprocess; its stdout is read line by line as it prints."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mtad", "sink", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONIOENCODING": "utf-8"},
            text=True,
            encoding="utf-8",
        )
        self.lines: list[str] = []
        self._closed = False
        self._printed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        listening = self.wait_for(lambda line: line.startswith("mtad sink: listening on "))
        self.port = int(listening.split(";")[0].rsplit(":", 1)[1])

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._printed:
                self.lines.append(line.rstrip("\n"))
                self._printed.notify_all()
        with self._printed:
            self._closed = True
            self._printed.notify_all()

    def wait_for(self, holds: Callable[[str], bool], within: float = 30) -> str:
        """The first line printed for which holds(line), waiting for it (bounded)."""
        with self._printed:
            self._printed.wait_for(lambda: self._closed or any(map(holds, self.lines)), timeout=within)
            found = [line for line in self.lines if holds(line)]
        if not found:
            raise AssertionError(f"mtad sink did not print the line; it printed {self.lines}")
        return found[0]

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send the signal and wait for the exit; returns the exit status."""
        self.process.send_signal(sig)
        code = self.process.wait(30)
        self._reader.join(10)
        return code

    def summary(self) -> dict[str, str]:
        """The key=value pairs of the summary the sink printed when it stopped."""
        line = self.wait_for(lambda line: line.startswith("mtad sink: summary: "))
        return dict(pair.split("=", 1) for pair in line.removeprefix("mtad sink: summary: ").split())

    def __enter__(self) -> SinkProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


# The mtad command as an operator types it: the installed entry point, else the module.
ENTRY_POINT = Path(sys.executable).with_name("mtad")  # .venv/bin/mtad beside .venv/bin/python
MTAD = [str(ENTRY_POINT)] if ENTRY_POINT.exists() else [sys.executable, "-m", "mtad"]


def blast(port: int, *args: str, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    """`mtad blast 127.0.0.1:PORT ARGS --json` run to its end: its exit status, its
    summary and what it said on stderr."""
    done = subprocess.run([*MTAD, "blast", f"127.0.0.1:{port}", *args, "--json"], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr
