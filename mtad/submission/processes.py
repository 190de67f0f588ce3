"""The supervisor of the submission processes: the port served by several Python processes
(one Python process tops out near one CPU core).

The daemon binds the listening sockets and starts `[submission] processes`
children (`python -m mtad.submission.child`), handing each a control.Start (the
sockets, its port.PortSettings and one end of a control socket). A child serves
the port on its own event loop with its own database pool and group commit. When
the daemon delivers, a child spools new deliveries already leased to the node
and hands them over the control socket to the daemon's delivery (the fast path,
as in one process); when the daemon holds all it may, or only accepts, they are
spooled queued and the accept statement's NOTIFY wakes the delivering nodes. The
messages on the control socket are control's typed values.

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
import math
import os
import pickle
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import structlog

from mtad.base import errors, metrics
from mtad.base.endpoints import HostPort
from mtad.spool import commit
from mtad.submission import control
from mtad.submission.port import PortSettings

logger = structlog.get_logger("mtad.submission.processes")

RESTART_FIRST = 1.0  # seconds before a child that exited is started again
RESTART_MOST = 60.0
STEADY = 60.0  # a child that ran this long is started again after RESTART_FIRST
START_TIMEOUT = 60.0  # for every child to say it is ready
ANSWER_TIMEOUT = 2.0  # for a child's counts, at a scrape
ROOM_INTERVAL = 0.5  # seconds between looks at whether the delivery has room
KILL_AFTER = 10.0


@dataclass(slots=True)
class _Child:
    index: int
    process: asyncio.subprocess.Process | None = None
    writer: asyncio.StreamWriter | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    exited: asyncio.Event = field(default_factory=asyncio.Event)  # before it was ever ready
    answer: asyncio.Future[tuple[list[metrics.Counted], int]] | None = None
    asking: asyncio.Lock = field(default_factory=asyncio.Lock)
    heeded: asyncio.Future[bool] | None = None  # its answer to Heed
    heeding: asyncio.Lock = field(default_factory=asyncio.Lock)
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
        self._count = count
        self._settings = self._shared(settings)
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
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(START_TIMEOUT):
                    await _either(child.ready, child.exited)
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

    def _shared(self, settings: PortSettings) -> PortSettings:
        """A child's settings: each counts AUTH failures on its own, so together they
        allow at most the limit plus one per child beyond the first."""
        sub = settings.submission
        return replace(settings, submission=replace(sub, auth_max_failures=math.ceil(sub.auth_max_failures
                                                                                     / self._count)))  # fmt: skip

    def reconfigure(self, settings: PortSettings) -> None:
        """A reload: every child gets the new settings now, a child started later
        gets them at its start."""
        self._settings = self._shared(settings)
        for child in self._children:
            if child.writer is not None:
                control.say(child.writer, control.Reconfigure(self._settings))

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
                control.say(writer, control.AskCounts())
                async with asyncio.timeout(ANSWER_TIMEOUT):
                    return await child.answer
            except (TimeoutError, ConnectionError):
                return child.last, child.retired
            finally:
                child.answer = None

    async def heed(self) -> None:
        """Every child's gate reads the tenants' states again now; ProcessError names
        a child that did not within ANSWER_TIMEOUT. A child not started yet reads
        them as it starts."""
        answers = await asyncio.gather(*(self._heed(child) for child in self._children))
        late = [child.index for child, ok in zip(self._children, answers, strict=True) if not ok]
        if late:
            raise errors.ProcessError(f"submission process {', '.join(map(str, late))} did not read the tenants' "
                                      f"states within {ANSWER_TIMEOUT:g} s")  # fmt: skip

    async def _heed(self, child: _Child) -> bool:
        async with child.heeding:
            writer = child.writer
            if writer is None:
                return True
            child.heeded = asyncio.get_running_loop().create_future()
            try:
                control.say(writer, control.Heed())
                async with asyncio.timeout(ANSWER_TIMEOUT):
                    return await child.heeded
            except (TimeoutError, ConnectionError):
                return child.writer is None  # it exited meanwhile: its next life reads them as it starts
            finally:
                child.heeded = None

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
        start = control.Start(self._settings, child.index, fds, theirs.fileno(), self._fast_path is not None)
        environ = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}  # only the daemon talks to systemd
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mtad.submission.child", stdin=asyncio.subprocess.PIPE,
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
            while (message := await control.heard(reader)) is not None:
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

    def _take(self, child: _Child, message: control.Message) -> None:
        match message:
            case control.Accepted(deliveries) if self._fast_path is not None:
                self._fast_path.accepted(deliveries)
                self._room(child, self._fast_path.has_room())
            case control.Counts(counts):
                child.last = counts
                if child.answer is not None and not child.answer.done():
                    child.answer.set_result((child.last, child.retired))
            case control.Ready():
                child.ready.set()
            case control.Heeded(ok):
                if child.heeded is not None and not child.heeded.done():
                    child.heeded.set_result(ok)
            case _:
                logger.warning("control_message_unexpected", process=child.index, message=type(message).__name__)

    def _room(self, child: _Child, room: bool) -> None:
        if child.writer is not None and child.room != room:
            child.room = room
            control.say(child.writer, control.Room(room))

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


async def _either(*events: asyncio.Event) -> None:
    """Until one of `events` is set: a wait for each, in a TaskGroup, the first done
    cancelling the others."""
    async with asyncio.TaskGroup() as waits:
        waiting = [waits.create_task(event.wait()) for event in events]

        def the_rest_cancelled(_: asyncio.Task[bool]) -> None:
            for wait in waiting:
                wait.cancel()

        for wait in waiting:
            wait.add_done_callback(the_rest_cancelled)
