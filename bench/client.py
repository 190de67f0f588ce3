"""The load generators: Postfix's `smtp-source` for rates, `mtad blast` for latency,
each the same for every server.

`send()` runs one burst and measures its wall time: `sessions` parallel SMTP sessions
that stay connected (-d) and share `messages` messages, each with a `size`-octet body
(-l; smtp-source adds From, To, Date and a Message-Id unique within the run), one
recipient each (or `recipients`, -r), numbered so that recipients differ (-N).
smtp-source has no pipelining: every command waits for its reply, like most
submitting applications.
Any reply other than the expected 2xx/3xx makes smtp-source stop with an error,
which `send()` raises as ClientError.

`latency()` runs one burst of `mtad blast` (as a process of its own, like
smtp-source) and returns its end-of-DATA latencies: from handing the final dot to
the socket to reading the reply, which is the server's accept whether or not the
commands before were pipelined.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

SENDER = "bench@example.org"
RECIPIENT = "rcpt@example.com"
HELO = "bench-client.example.org"


class ClientError(Exception):
    """smtp-source failed, timed out or could not run."""


@dataclass(frozen=True, slots=True)
class Burst:
    messages: int
    seconds: float
    started: float = 0.0  # perf_counter() just before smtp-source started

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def smtp_source() -> str | None:
    """Path of smtp-source (Debian's postfix package installs it in /usr/sbin), or None."""
    return shutil.which("smtp-source") or shutil.which("smtp-source", path="/usr/sbin:/usr/bin")


def send(
    host: str,
    port: int,
    *,
    sessions: int,
    messages: int,
    size: int,
    timeout: float,
    recipients: int = 1,
    recipient: str = RECIPIENT,
) -> Burst:
    """Send one burst to host:port (a loopback address) and time it; blocks until done."""
    if not host.startswith("127."):
        raise ClientError(f"refusing to send to {host}: the benchmark stays on loopback")
    program = smtp_source()
    if program is None:
        raise ClientError("smtp-source is missing (Debian package postfix)")
    argv = [program, "-d", "-N", "-s", str(sessions), "-m", str(messages), "-l", str(size)]
    argv += ["-r", str(recipients)] if recipients > 1 else []
    argv += ["-M", HELO, "-f", SENDER, "-t", recipient, f"{host}:{port}"]
    started = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ClientError(f"smtp-source did not finish within {timeout:.0f} s") from None
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise ClientError(f"smtp-source exited {done.returncode}: {said[-1] if said else 'no message'}")
    return Burst(messages, seconds, started)


@dataclass(frozen=True, slots=True)
class Latency:
    """End of DATA to its reply, in ms, over one burst of `messages`."""

    messages: int
    p50: float
    p99: float


def latency(host: str, port: int, *, sessions: int, messages: int, size: int, timeout: float) -> Latency:
    """One burst of `mtad blast` as fast as the server answers: `sessions` connections
    sharing `messages` messages of `size` octets (headers included), one recipient
    each, at example.com like smtp-source's. ClientError unless every one was accepted."""
    if not host.startswith("127."):
        raise ClientError(f"refusing to send to {host}: the benchmark stays on loopback")
    argv = [sys.executable, "-m", "mtad", "blast", f"{host}:{port}", "-n", str(messages), "-c", str(sessions),
            "--size", str(size), "--domains", "example.com", "--from", SENDER, "--json", "-q"]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ClientError(f"mtad blast did not finish within {timeout:.0f} s") from None
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        said = done.stderr.strip().splitlines()
        raise ClientError(f"mtad blast exited {done.returncode}: {said[-1] if said else 'no summary'}") from None
    if done.returncode != 0 or summary["accepted"] != messages:
        raise ClientError(f"mtad blast: {summary['accepted']} of {messages} accepted; replies {summary['replies']}, "
                          f"failures {summary['failures']}")  # fmt: skip
    marks = summary["data_latency_ms"]
    return Latency(messages, marks["p50"], marks["p99"])
