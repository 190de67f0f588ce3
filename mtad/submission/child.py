"""A submission process: `python -m mtad.submission.child`, started by the daemon's
supervisor (processes.py). It reads its control.Start on stdin, serves the port
with its own event loop, database pool and group commit, and talks to the daemon
over the control socket; it dies with the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import pickle
import signal
import socket
import sys
from datetime import datetime, timedelta

import structlog

from mtad import db
from mtad.base import errors, log, metrics
from mtad.spool import commit, quotas, tenants
from mtad.submission import control
from mtad.submission.port import InProcess

logger = structlog.get_logger("mtad.submission.child")

PR_SET_PDEATHSIG = 1  # prctl(2)
EXIT_ORPHANED = 70  # a child's exit status when its daemon went away (EX_SOFTWARE)


def main() -> int:
    """A child: read what the daemon hands over, serve the port until told to stop."""
    import uvloop

    _die_with_parent()
    start: control.Start = pickle.load(sys.stdin.buffer)
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


async def _serve(start: control.Start) -> None:
    settings = start.settings
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=start.control))
    listening = [socket.socket(fileno=fd) for fd in start.listening]
    database = await db.Database.connect(settings.dsn, max_size=settings.pool_size)
    handing = _Handing(settings.node, settings.lease_duration, writer) if start.fast_path else None
    gate = settings.gate(database, tenants.States(database, metered=False))
    port = InProcess(settings, database, settings.router(), fast_path=handing, gate=gate)
    try:
        async with asyncio.TaskGroup() as tasks:
            committing = tasks.create_task(port.run(), name="group-commit")
            checking = tasks.create_task(gate.run(), name="tenant-states")
            answering = tasks.create_task(_answer(reader, writer, handing, port, gate), name="control")
            with contextlib.suppress(errors.SpoolError):  # the states before the first session (else gate.run's)
                await gate.refresh()
            await port.start(listening)
            logger.info("submission_process_ready", process=start.index, pid=os.getpid())
            log.flush()  # on stdout before the daemon's own "ready" line, which this message lets it write
            control.say(writer, control.Ready())
            await stop.wait()

            await port.stop()
            await committing
            control.say(writer, control.Counts(metrics.snapshot()))
            answering.cancel()
            checking.cancel()
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
        control.say(self._writer, control.Accepted(deliveries))


async def _answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handing: _Handing | None, port: InProcess,
    gate: quotas.Gate,
) -> None:  # fmt: skip
    """Answer the daemon; when it is gone, exit at once, as if the node had crashed.
    (Its files close before the kernel sends the parent-death signal: a child that
    stopped gracefully meanwhile would tell some sessions 421.)"""
    while (message := await control.heard(reader)) is not None:
        match message:
            case control.AskCounts():
                control.say(writer, control.Counts(metrics.snapshot()))
            case control.Room(room) if handing is not None:
                handing.room = room
            case control.Reconfigure(settings):
                port.reconfigure(settings)
                logger.info("reconfigured", pid=os.getpid())
            case control.Heed():
                try:
                    await gate.refresh()
                    await gate.settle(quotas.SETTLE_WITHIN)
                except errors.SpoolError as exc:
                    logger.warning("tenant_states_unread", error=str(exc))
                    control.say(writer, control.Heeded(False))
                else:
                    control.say(writer, control.Heeded(True))
            case _:
                logger.warning("control_message_unexpected", message=type(message).__name__)
    logger.error("daemon_gone", pid=os.getpid())
    log.flush()
    os._exit(EXIT_ORPHANED)


if __name__ == "__main__":  # `python -m mtad.submission.child`: run the module's code, not this copy's
    from mtad.submission import child

    sys.exit(child.main())
