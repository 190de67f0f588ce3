"""Submission processes: the submission port served by several Python processes
(one Python process tops out near one CPU core).

The daemon binds the listening sockets and starts `[submission] processes`
children (`python -m mtad.submission.processes`), handing each the sockets, the settings and
one end of a control socket. A child serves the port on its own event loop with
its own database pool and group commit. When the daemon delivers, a child
spools new deliveries already leased to the node and hands them over the
control socket to the daemon's delivery (the fast path, as in one process);
when the daemon holds all it may, or only accepts, they are spooled queued and
the accept statement's NOTIFY wakes the delivering nodes.

The control socket carries pickled tuples, each after its length (4 octets):
  child -> daemon   ("ready",) once it serves the port
                    ("accepted", [NewDelivery, ...]) after each commit that
                    leased deliveries to the node
                    ("metrics", [Counted, ...]) in answer to a request, and
                    once more as it exits cleanly
  daemon -> child   ("metrics",) send your counts now
                    ("room", bool) whether to lease new deliveries to the node
                    (sent when that changes)
Both ends are this program: unpickling what the other end sent is no more
trust than running it.
A child dies with its daemon (kill -9 included) as if the node had crashed: it
exits at once when the daemon's end of the control socket closes, and on Linux
the kernel kills it too (PR_SET_PDEATHSIG), should it be stuck. Nothing is
answered 250 that is not committed, so nothing accepted is lost; the sessions
are cut, as they would be in a crash (no 421 to some and not to others).

Supervision: a child that exits while the daemon runs is started again after a
pause that doubles from 1 s up to 60 s (back to 1 s after a minute of running).
The counters and histograms of a child that is gone stay counted, as of its last
answer. At start-up, a child that exits before it is ready fails the start.

Stop: the daemon closes its copies of the listening sockets and sends SIGTERM;
each child stops listening, lets DATA in flight finish ([submission]
shutdown_timeout), tells the other sessions 421, commits what it holds and exits
0. A child still there KILL_AFTER seconds past that timeout is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import os
import pickle
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from mtad import db, submission
from mtad.base import errors, log, metrics
from mtad.base.endpoints import HostPort
from mtad.outbound import routing
from mtad.spool import commit, tenants

logger = structlog.get_logger("mtad.submission.processes")

RESTART_FIRST = 1.0  # seconds before a child that exited is started again
RESTART_MOST = 60.0
STEADY = 60.0  # a child that ran this long is started again after RESTART_FIRST
START_TIMEOUT = 60.0  # for every child to say it is ready
ANSWER_TIMEOUT = 2.0  # for a child's counts, at a scrape
ROOM_INTERVAL = 0.5  # seconds between looks at whether the delivery has room
KILL_AFTER = 10.0
PR_SET_PDEATHSIG = 1  # prctl(2)
EXIT_ORPHANED = 70  # a child's exit status when its daemon went away (EX_SOFTWARE)


@dataclass(frozen=True, slots=True)
class PortSettings:
    """What serving the submission port needs, in the daemon or in a child: the
    daemon makes it from the configuration (daemon.port_settings)."""

    submission: submission.Settings
    commit_window: float
    commit_max_batch: int
    commit_timeout: float
    idempotency_window: float
    log_format: str
    log_level: str
    dsn: str
    pool_size: int
    nameservers: tuple[HostPort, ...]  # the recipient domains' lookups at RCPT
    dns_timeout: float
    providers: routing.Providers
    routes: Mapping[str, HostPort]
    port: int  # what delivery connects to (a route's relay port)
    node: str  # the fast path hands over leases of this node
    lease_duration: float

    def router(self) -> routing.Router:
        resolver = routing.DnsResolver(self.nameservers, timeout=self.dns_timeout)
        return routing.Router(resolver, self.providers, routes=self.routes, port=self.port)


class InProcess:
    """The submission port served by the daemon's own process ([submission]
    processes = 0), which hands what it accepts to its delivery (the fast path).
    The same interface as Processes: run() owned by the daemon's TaskGroup,
    start(), addresses, stop() (then run() returns), counts(), close()."""

    def __init__(
        self,
        settings: PortSettings,
        database: db.Database,
        router: routing.Router,
        *,
        fast_path: commit.FastPath | None = None,
    ) -> None:
        sub = settings.submission
        self._within = sub.shutdown_timeout
        self.committer = commit.GroupCommitter(
            database,
            window=settings.commit_window,
            max_batch=settings.commit_max_batch,
            timeout=settings.commit_timeout,
            idempotency_window=settings.idempotency_window,
            fast_path=fast_path,
        )
        tls = submission.tls_context(sub.tls_cert, sub.tls_key) if sub.tls_cert and sub.tls_key else None
        handler = submission.Handler(sub, self.committer, tenants.Authenticator(database), router=router)
        self.server = submission.Server(sub, handler, tls)

    async def run(self) -> None:
        await self.committer.run()

    async def start(self, listening: Sequence[socket.socket] | None = None) -> None:
        """Serve the given sockets, or bind the listen addresses; raises OSError."""
        await self.server.start(listening)

    @property
    def addresses(self) -> list[HostPort]:
        return self.server.addresses

    async def stop(self) -> None:
        """Steps 1-4 of the daemon's shutdown: no new sessions, DATA in flight
        finishes (bounded), 421 to the rest, what the committer holds is committed."""
        server = self.server
        if not await server.shutdown(self._within):
            logger.warning("shutdown_timeout", in_data=sum(s.in_data for s in server.sessions()))
        self.committer.close()

    async def counts(self) -> list[list[metrics.Counted]]:
        return []  # this process's own metrics are all there is

    def close(self) -> None:
        self.committer.close()


# --- the daemon's side of the submission processes --------------------------------


@dataclass(frozen=True, slots=True)
class _Start:
    """What a child is handed on its stdin."""

    settings: PortSettings
    index: int
    listening: tuple[int, ...]  # file descriptors of the listening sockets, open in the child
    control: int  # file descriptor of the child's end of the control socket
    fast_path: bool  # lease new deliveries to the node and hand them over


@dataclass(slots=True)
class _Child:
    index: int
    process: asyncio.subprocess.Process | None = None
    writer: asyncio.StreamWriter | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    exited: asyncio.Event = field(default_factory=asyncio.Event)  # before it was ever ready
    answer: asyncio.Future[tuple[list[metrics.Counted], int]] | None = None
    asking: asyncio.Lock = field(default_factory=asyncio.Lock)
    last: list[metrics.Counted] = field(default_factory=list)  # its last counts
    retired: int = 0  # how many times `last` went into the counts of the children gone
    room: bool = True  # what it was last told


class Processes:
    """The submission processes of this node, supervised, serving the listening
    sockets it is given (and closes). `run()` is owned by the daemon's TaskGroup
    and returns after `stop()` once every child has exited."""

    def __init__(
        self,
        settings: PortSettings,
        listening: Sequence[socket.socket],
        count: int,
        *,
        fast_path: commit.FastPath | None = None,
    ) -> None:
        sub = settings.submission
        # Each child counts AUTH failures on its own: together they allow at most
        # the limit plus one per child beyond the first.
        shared = replace(sub, auth_max_failures=math.ceil(sub.auth_max_failures / count))
        self._settings = replace(settings, submission=shared)
        self._listening = tuple(listening)
        self._children = [_Child(index) for index in range(1, count + 1)]
        self._fast_path = fast_path
        self._stopping = asyncio.Event()
        self._killer: asyncio.TimerHandle | None = None
        self._gone: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], float] = {}

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tasks:
                for child in self._children:
                    tasks.create_task(self._supervise(child), name=f"submission-process-{child.index}")
                if self._fast_path is not None:
                    room = tasks.create_task(self._tell_room(self._fast_path), name="submission-room")
                    await self._stopping.wait()
                    room.cancel()
        finally:
            if self._killer is not None:
                self._killer.cancel()

    @property
    def addresses(self) -> list[HostPort]:
        return [HostPort(*sock.getsockname()[:2]) for sock in self._listening if sock.fileno() >= 0]

    async def start(self) -> None:
        """Return once every child serves the port; raise ProcessError if one exits
        first, or does not say it is ready within START_TIMEOUT."""
        for child in self._children:
            ready = asyncio.ensure_future(child.ready.wait())
            exited = asyncio.ensure_future(child.exited.wait())
            try:
                await asyncio.wait((ready, exited), timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ready.cancel()
                exited.cancel()
            if not child.ready.is_set():
                why = "exited" if child.exited.is_set() else f"did not say it was ready within {START_TIMEOUT:.0f} s"
                raise errors.ProcessError(f"submission process {child.index} {why} (its log says why)")

    async def stop(self) -> None:
        """Close the listening sockets here and tell every child to stop (each does
        steps 1-4 of the daemon's shutdown); run() returns once they have exited."""
        self.close()
        self._stopping.set()
        self._signal(signal.SIGTERM)
        within = self._settings.submission.shutdown_timeout + KILL_AFTER
        self._killer = asyncio.get_running_loop().call_later(within, self._signal, signal.SIGKILL)

    def _signal(self, number: int) -> None:
        for child in self._children:
            if child.process is not None and child.process.returncode is None:
                child.process.send_signal(number)

    def close(self) -> None:
        for sock in self._listening:
            sock.close()

    async def counts(self) -> list[list[metrics.Counted]]:
        """Every child's counts now (its last ones when it does not answer in time),
        and those of the children gone, each counted once: a child's answer is left
        out when the child has exited since, for its counts are then among the gone."""
        answers = await asyncio.gather(*(self._ask(child) for child in self._children))
        gone = [(family, kind, name, labels, value) for (family, kind, name, labels), value in self._gone.items()]
        current = [counts for (counts, retired), child in zip(answers, self._children, strict=True)
                   if retired == child.retired]  # fmt: skip
        return [*current, gone]

    async def _ask(self, child: _Child) -> tuple[list[metrics.Counted], int]:
        """The child's counts, and how often it had retired when they were taken."""
        async with child.asking:
            writer = child.writer
            if writer is None or not child.ready.is_set():
                return child.last, child.retired
            child.answer = asyncio.get_running_loop().create_future()
            try:
                _say(writer, ("metrics",))
                async with asyncio.timeout(ANSWER_TIMEOUT):
                    return await child.answer
            except (TimeoutError, ConnectionError):
                return child.last, child.retired
            finally:
                child.answer = None

    async def _supervise(self, child: _Child) -> None:
        loop = asyncio.get_running_loop()
        pause = RESTART_FIRST
        while not self._stopping.is_set():
            started = loop.time()
            code = await self._run_child(child)
            if self._stopping.is_set():
                return
            if not child.ready.is_set():
                child.exited.set()  # at start-up: start() fails
            if loop.time() - started > STEADY:
                pause = RESTART_FIRST
            logger.error("submission_process_exited", process=child.index, code=code, restart_in=pause)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._stopping.wait()
            pause = min(pause * 2, RESTART_MOST)

    async def _run_child(self, child: _Child) -> int:
        """Start the child, read what it says until it closes the control socket,
        and return its exit status (killing it if this task is cancelled)."""
        ours, theirs = socket.socketpair()
        fds = tuple(sock.fileno() for sock in self._listening)
        start = _Start(self._settings, child.index, fds, theirs.fileno(), self._fast_path is not None)
        environ = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}  # only the daemon talks to systemd
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mtad.submission.processes", stdin=asyncio.subprocess.PIPE,
                pass_fds=(*fds, theirs.fileno()), env=environ,
            )  # fmt: skip
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        child.process = process
        if self._stopping.is_set():  # stop() came while it was being started
            process.send_signal(signal.SIGTERM)
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        try:
            assert process.stdin is not None
            process.stdin.write(pickle.dumps(start))
            with contextlib.suppress(ConnectionError):
                await process.stdin.drain()
            process.stdin.close()
            child.writer = writer
            child.room = True
            while (message := await _heard(reader)) is not None:
                self._take(child, message)
            child.writer = None
            return await process.wait()
        finally:
            child.writer = None
            writer.close()
            if process.returncode is None:  # cancelled: nothing may outlive the daemon's TaskGroup
                process.kill()
                await asyncio.shield(process.wait())
            child.process = None
            self._retire(child)

    def _take(self, child: _Child, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "accepted" and self._fast_path is not None:
            self._fast_path.accepted(message[1])
            self._room(child, self._fast_path.has_room())
        elif kind == "metrics":
            child.last = message[1]
            if child.answer is not None and not child.answer.done():
                child.answer.set_result((child.last, child.retired))
        elif kind == "ready":
            child.ready.set()

    def _room(self, child: _Child, room: bool) -> None:
        if child.writer is not None and child.room != room:
            child.room = room
            _say(child.writer, ("room", room))

    async def _tell_room(self, fast_path: commit.FastPath) -> None:
        """Tell the children when the delivery's room changes (it frees up as
        deliveries finish, which no message from a child reports)."""
        while True:
            room = fast_path.has_room()
            for child in self._children:
                self._room(child, room)
            await asyncio.sleep(ROOM_INTERVAL)

    def _retire(self, child: _Child) -> None:
        """A child's counters and histograms, as last heard, into those of the gone."""
        for family, kind, name, labels, value in child.last:
            if kind in metrics.CUMULATIVE:
                key = (family, kind, name, labels)
                self._gone[key] = self._gone.get(key, 0.0) + value
        child.last = []
        child.retired += 1


# --- the child's side -------------------------------------------------------------


def main() -> int:
    """A child: read what the daemon hands over, serve the port until told to stop."""
    import uvloop

    _die_with_parent()
    start: _Start = pickle.load(sys.stdin.buffer)
    settings = start.settings
    log.configure(settings.log_format, settings.log_level)
    try:
        uvloop.run(_serve(start))
    except (errors.MtadError, OSError) as exc:
        logger.error("submission_process_failed", process=start.index, error=str(exc))
        return 1
    finally:
        log.flush()
    return 0


def _die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL to this process when the daemon dies (the
    control socket's end says so too, unless the process is stuck)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        logger.warning("parent_death_signal_not_set", error=os.strerror(ctypes.get_errno()))


async def _serve(start: _Start) -> None:
    settings = start.settings
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=start.control))
    listening = [socket.socket(fileno=fd) for fd in start.listening]
    database = await db.Database.connect(settings.dsn, max_size=settings.pool_size)
    handing = _Handing(settings.node, settings.lease_duration, writer) if start.fast_path else None
    port = InProcess(settings, database, settings.router(), fast_path=handing)
    try:
        async with asyncio.TaskGroup() as tasks:
            committing = tasks.create_task(port.run(), name="group-commit")
            control = tasks.create_task(_answer(reader, writer, handing), name="control")
            await port.start(listening)
            logger.info("submission_process_ready", process=start.index, pid=os.getpid())
            log.flush()  # on stdout before the daemon's own "ready" line, which this message lets it write
            _say(writer, ("ready",))
            await stop.wait()

            await port.stop()
            await committing
            _say(writer, ("metrics", metrics.snapshot()))
            control.cancel()
    finally:
        port.close()
        writer.close()
        await database.close()
    committed = port.committer.statistics().messages
    logger.info("submission_process_stopped", process=start.index, committed=committed)


class _Handing:
    """The daemon's delivery as a child's fast path (commit.FastPath): new
    deliveries are leased to the node and handed over the control socket."""

    def __init__(self, node: str, lease_duration: float, writer: asyncio.StreamWriter) -> None:
        self.node = node
        self._lease = timedelta(seconds=lease_duration)
        self._writer = writer
        self.room = True

    def lease_until(self, now: datetime) -> datetime:
        return now + self._lease

    def has_room(self) -> bool:
        return self.room and not self._writer.is_closing()

    def accepted(self, deliveries: list[commit.NewDelivery]) -> None:
        _say(self._writer, ("accepted", deliveries))


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handing: _Handing | None) -> None:
    """Answer the daemon; when it is gone, exit at once, as if the node had crashed.
    (Its files close before the kernel sends the parent-death signal: a child that
    stopped gracefully meanwhile would tell some sessions 421.)"""
    while (message := await _heard(reader)) is not None:
        if message[0] == "metrics":
            _say(writer, ("metrics", metrics.snapshot()))
        elif message[0] == "room" and handing is not None:
            handing.room = message[1]
    logger.error("daemon_gone", pid=os.getpid())
    log.flush()
    os._exit(EXIT_ORPHANED)


# --- the control socket -----------------------------------------------------------

_LENGTH = 4


def _say(writer: asyncio.StreamWriter, message: tuple[Any, ...]) -> None:
    if not writer.is_closing():
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        writer.write(len(data).to_bytes(_LENGTH, "big") + data)


async def _heard(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or None once the other end has closed."""
    try:
        length = int.from_bytes(await reader.readexactly(_LENGTH), "big")
        message: tuple[Any, ...] = pickle.loads(await reader.readexactly(length))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return message


if __name__ == "__main__":  # `python -m mtad.submission.processes`: run the module's code, not this copy's
    from mtad.submission import processes

    sys.exit(processes.main())
