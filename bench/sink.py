"""The discard sink: Postfix's `smtp-sink` (C) on a loopback address, the same for every sender.

`Sink` runs one smtp-sink that throws every message away. With `count=True` it runs
with -c, which prints `sess=N quit=N mesg=N` after every message ("." received);
a thread reads those counters as they come and notes the time each one arrived, so
`wait_for(n)` gives the time of the n-th receipt without polling a directory or
sleeping. `delay` (-w) makes it wait that long before answering DATA: a sink that
holds deliveries on the wire. The counter is never reset: callers take `count()`
before a run and wait for that plus the run's messages.

smtp-sink needs `-u USER` when it runs as root (it drops to that user after binding).
"""

from __future__ import annotations

import bisect
import io
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable

from bench import server
from bench.server import Managed

START_TIMEOUT = 10.0
_MESSAGES = re.compile(rb"mesg=(\d+)")


class SinkError(Exception):
    """smtp-sink could not start, died, or did not receive what it should have in time."""


def smtp_sink() -> str | None:
    """Path of smtp-sink (Debian's postfix package installs it in /usr/sbin), or None."""
    return shutil.which("smtp-sink") or shutil.which("smtp-sink", path="/usr/sbin:/usr/bin")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port of host that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class Sink(Managed):
    """One smtp-sink on host:port; use as a context manager (it is killed on exit)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        count: bool = True,
        delay: float | None = None,
        max_connections: int = 256,
        idle_timeout: int = 100,
    ) -> None:
        if not host.startswith("127."):
            raise SinkError(f"refusing to listen on {host}: the benchmark stays on loopback")
        self.host, self.port = host, port
        self.count_messages = count
        self.delay = delay
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._changed = threading.Condition()
        self._messages = 0
        self._counts: list[int] = [0]  # the counter as it was read, rising,
        self._times: list[float] = [0.0]  # and the perf_counter() time it was read at

    def start(self) -> None:
        program = smtp_sink()
        if program is None:
            raise SinkError("smtp-sink is missing (Debian package postfix)")
        self.port = self.port or free_port(self.host)
        argv = [program, "-m", str(self.max_connections), "-t", str(self.idle_timeout)]
        argv += ["-c"] if self.count_messages else []
        argv += ["-w", str(self.delay)] if self.delay is not None else []
        argv += ["-u", "nobody"] if os.geteuid() == 0 else []
        argv += [f"{self.host}:{self.port}", "1024"]
        stdout = subprocess.PIPE if self.count_messages else subprocess.DEVNULL
        self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout)
        if self.count_messages:
            self._reader = threading.Thread(target=self._read, name=f"sink-{self.port}", daemon=True)
            self._reader.start()
        self._wait_listening()

    def _wait_listening(self) -> None:
        """Connect until smtp-sink answers (bounded); a connection that only greets counts no message."""
        assert self._process is not None
        why = server.wait_listening(self._process, (self.host, self.port), START_TIMEOUT,
                                    lambda sock: sock.recv(64).startswith(b"220"))  # fmt: skip
        if why is not None:
            raise SinkError(f"smtp-sink on {self.host}:{self.port} {why}")

    def _read(self) -> None:
        assert self._process is not None
        assert isinstance(self._process.stdout, io.BufferedReader)
        stdout = self._process.stdout
        while chunk := stdout.read1(1 << 16):
            now = time.perf_counter()
            found = _MESSAGES.findall(chunk)
            if not found:
                continue
            with self._changed:
                self._messages = int(found[-1])
                self._counts.append(self._messages)
                self._times.append(now)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def count(self) -> int:
        """Messages received so far (the counter of this sink's whole life)."""
        with self._changed:
            return self._messages

    def wait_for(self, messages: int, timeout: float, check: Callable[[], str | None] | None = None) -> float:
        """Block until the sink has received `messages` in all; returns the perf_counter() time
        of that receipt. Every second `check()` may say why it will never come (it raises then)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._messages < messages:
                if self._process is None or self._process.poll() is not None:
                    raise SinkError(f"smtp-sink on port {self.port} exited")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SinkError(f"the sink received {self._messages} of {messages} in {timeout:.0f} s")
                if not self._changed.wait(min(1.0, left)) and check is not None:
                    self._changed.release()
                    try:
                        problem = check()
                    finally:
                        self._changed.acquire()
                    if problem:
                        raise SinkError(f"the sink received {self._messages} of {messages}: {problem}")
            return self._times[bisect.bisect_left(self._counts, messages)]

    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        if self._reader is not None:
            self._reader.join(10)
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()
