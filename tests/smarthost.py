"""A smarthost in a process of its own, which times every send of every mailbox.

    python -m tests.smarthost --port P --cert CERT --key KEY --logins FILE
        [--address 127.0.0.1] [--delay SECONDS] [--stall-after N --stall-for SECONDS]

It is a `tests.sink.Sink` with STARTTLS, and AUTH (PLAIN, LOGIN) required before
MAIL; `--logins` names a JSON object {user: password}. It writes one JSON line to
stdout, flushed, per event (times are time.time(), so comparable across processes):

    {"event": "ready", "port": P}                                   once listening
    {"event": "mail", "login": U, "session": S, "mail": M, "code": C, "at": T}
    {"event": "data", "login": U, "session": S, "mail": M, "recipients": R, "at": T}
    {"event": "answered", "login": U, "session": S, "mail": M, "code": C, "recipients": R, "at": T}

`data` is written when the end of DATA arrives (before any delay or stall), and
`answered` right before the reply to it goes out; both carry the session and MAIL
number of the MAIL they end. SIGTERM stops it.

`Smarthost` runs it for a test, and `violations` checks what it timed against a
mailbox's minimum gap.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mtad import submission
from tests import sink

STARTUP_TIMEOUT = 30.0
PARENT = "TESTS_SMARTHOST_PARENT"  # the harness's pid, to notice a parent that went before prctl
ROOT = Path(__file__).parents[1]  # the repository: `tests` is importable from here

Timeline = dict[str, list[tuple[float, float | None]]]  # login -> (MAIL at, answered at or None)


def free_port(address: str = "127.0.0.1") -> int:
    """A port nothing listens on at address now (another process may take it before the caller binds)."""
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def violations(timeline: Timeline, min_gap: float) -> list[str]:
    """Every pair of sends of one login where the later MAIL comes before the earlier
    send's answer (an overlap) or less than min_gap seconds after it. A send that was
    never answered (its MAIL refused, or the connection lost) ends at its MAIL. Pure."""
    found: list[str] = []
    for login, sends in sorted(timeline.items()):
        ordered = sorted(sends, key=lambda send: send[0])
        for (i, (mail, answered)), (_, (later, _)) in itertools.combinations(enumerate(ordered), 2):
            end = mail if answered is None else answered
            if later < end:
                found.append(f"{login}: MAIL at {later:.3f} overlaps send {i} (MAIL {mail:.3f}, answered {end:.3f})")
            elif later - end < min_gap:
                found.append(f"{login}: MAIL at {later:.3f} is {later - end:.3f}s after send {i} ended (< {min_gap}s)")
    return found


class Smarthost:
    """`python -m tests.smarthost` as a child process, read line by line as it writes.

    Every wait is bounded and wakes on the smarthost's own output; the records are
    the JSON lines it wrote so far (see the module docstring)."""

    def __init__(
        self,
        cert: Path,
        key: Path,
        logins: Mapping[str, str],
        *,
        port: int | None = None,
        address: str = "127.0.0.1",
        delay: float = 0,
        stall_after: int | None = None,
        stall_for: float = 0,
    ) -> None:
        self.address = address
        self._port = port or free_port(address)
        self._options = [
            "--port", str(self._port), "--address", address, "--cert", str(cert.resolve()), "--key", str(key.resolve()),
            "--delay", str(delay),
        ]  # fmt: skip
        if stall_after is not None:
            self._options += ["--stall-after", str(stall_after), "--stall-for", str(stall_for)]
        self._logins = dict(logins)
        self.process: subprocess.Popen[bytes] | None = None
        self.records: list[dict[str, Any]] = []
        self.output: list[str] = []  # every line it wrote, JSON or not (stderr included)
        self._exited = False
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None

    def start(self) -> Smarthost:
        with tempfile.TemporaryDirectory() as directory:  # read once at startup
            logins = Path(directory) / "logins.json"
            logins.write_text(json.dumps(self._logins))
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.smarthost", *self._options, "--logins", str(logins)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, PARENT: str(os.getpid())},
            )
            self._reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
            self._reader.start()
            with self._changed:
                self._changed.wait_for(lambda: self._exited or self._events("ready"), STARTUP_TIMEOUT)
                ready = bool(self._events("ready"))
        if not ready:
            self.stop()
            raise AssertionError("the smarthost did not become ready:\n" + self._tail())
        return self

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            with self._changed:
                self.output.append(line)
                if isinstance(record, dict):
                    self.records.append(record)
                self._changed.notify_all()
        process.stdout.close()
        with self._changed:
            self._exited = True
            self._changed.notify_all()

    def __enter__(self) -> Smarthost:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM, then wait for the exit (SIGKILL after timeout seconds); returns the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout)
        assert self._reader is not None
        self._reader.join(timeout)
        return code

    @property
    def port(self) -> int:
        return self._port

    def _events(self, kind: str, login: str | None = None) -> list[dict[str, Any]]:
        with self._changed:
            return [r for r in self.records if r.get("event") == kind and login in (None, r.get("login"))]

    def mails(self, login: str | None = None) -> list[float]:
        """When each MAIL (of login, or of anyone) arrived, refused ones included, in arrival order."""
        return [float(r["at"]) for r in self._events("mail", login)]

    def answers(self, login: str | None = None) -> list[float]:
        """When each reply to the end of DATA (of login, or of anyone) went out, in order."""
        return [float(r["at"]) for r in self._events("answered", login)]

    def timeline(self) -> Timeline:
        """Each login's sends in MAIL order: (MAIL at, answered at or None), paired by session and MAIL number."""
        answered = {(r["session"], r["mail"]): float(r["at"]) for r in self._events("answered")}
        sends: Timeline = {}
        for mail in self._events("mail"):
            if mail.get("login") is not None:
                at = float(mail["at"])
                sends.setdefault(mail["login"], []).append((at, answered.get((mail["session"], mail["mail"]))))
        return {login: sorted(times, key=lambda send: send[0]) for login, times in sends.items()}

    def wait_for_answers(self, count: int, within: float = 30) -> list[float]:
        """Until count replies to the end of DATA have gone out (bounded by within seconds); their times."""
        return self._wait_for("answered", count, within)

    def wait_for_mails(self, count: int, within: float = 30) -> list[float]:
        """Until count MAIL commands have arrived (bounded by within seconds); their times."""
        return self._wait_for("mail", count, within)

    def wait_for_data(self, count: int, within: float = 30) -> list[float]:
        """Until count ends of DATA have arrived, answered or not (bounded by within seconds); their times."""
        return self._wait_for("data", count, within)

    def _wait_for(self, kind: str, count: int, within: float) -> list[float]:
        with self._changed:
            done = self._changed.wait_for(lambda: self._exited or len(self._events(kind)) >= count, within)
            times = [float(r["at"]) for r in self._events(kind)]
        if not done or len(times) < count:
            raise AssertionError(f"{len(times)} of {count} {kind} events at the smarthost:\n" + self._tail())
        return times

    def _tail(self) -> str:
        with self._changed:
            return "\n".join(self.output[-30:])


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM when the parent goes (best effort: elsewhere, nothing). The
    signal follows the thread that started us, so start it from one that outlives it."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    parent = os.environ.get(PARENT)
    if parent and os.getppid() != int(parent):  # the parent went before the request was made
        sys.exit("the smarthost's parent has exited")


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _on_event(event: sink.Event) -> None:
    _emit({"event": event.kind, "login": event.login, "session": event.session, "mail": event.mail,
           "code": event.code, "at": event.at, "recipients": event.recipients})  # fmt: skip


async def _serve(args: argparse.Namespace) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    smarthost = sink.Sink(
        (args.address,), port=args.port, tls=submission.tls_context(args.cert, args.key),
        logins=json.loads(args.logins.read_text()), data_delay=args.delay, stall_after=args.stall_after,
        stall_for=args.stall_for, observer=_on_event,
    )  # fmt: skip
    await smarthost.start()
    _emit({"event": "ready", "port": smarthost.port})
    await stopping.wait()
    await smarthost.stop()


def _port(text: str) -> int:
    port = int(text)
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError("a port from 1 to 65535: the caller picks a free one")
    return port


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.smarthost", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--port", type=_port, required=True)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--logins", type=Path, required=True, help="a JSON object {user: password}")
    parser.add_argument("--delay", type=float, default=0, help="seconds each reply to the end of DATA waits")
    parser.add_argument("--stall-after", type=int, help="stall once this many messages were answered 250")
    parser.add_argument("--stall-for", type=float, default=0, help="seconds the stall holds DATA replies")
    args = parser.parse_args(argv)
    if args.stall_after is not None and args.stall_after < 1:
        parser.error("--stall-after must be at least 1")
    _die_with_parent()
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
