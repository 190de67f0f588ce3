"""Submission processes started by mtad.submission.processes.Processes, as real child processes,
and the control socket between them (mtad.submission.control)."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mtad import config, daemon, submission
from mtad.base import errors, metrics
from mtad.base.endpoints import HostPort
from mtad.base.envelope import Address
from mtad.spool import commit
from mtad.submission import control, processes


async def test_a_child_that_cannot_start_fails_the_start(tmp_path: Path) -> None:
    path = tmp_path / "mtad.toml"
    # Nothing listens on port 1: the child cannot reach its database and exits.
    path.write_text('[database]\ndsn = "postgresql://mtad@127.0.0.1:1/mtad"\n[submission]\nprocesses = 1\n')
    settings = config.load(path, environ={})
    listening = submission.bind([HostPort("127.0.0.1", 0)])
    children = processes.Processes(daemon.port_settings(settings, settings.database.dsn or ""), listening, 1)
    assert children.addresses[0].port != 0
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(children.run())
        with pytest.raises(errors.ProcessError, match="submission process 1 exited"):
            await children.start()
        await children.stop()
        await running
    assert all(sock.fileno() == -1 for sock in listening)  # stop() closed them
    assert await children.counts() == [[], []]


async def test_a_child_that_exits_during_a_scrape_is_counted_once(tmp_path: Path) -> None:
    """A scrape asks every child; one that has answered may exit before the others
    have, and its counts then move to those of the children gone: they must not
    be added twice (a counter that jumps, then falls back, reads as a reset)."""
    path = tmp_path / "mtad.toml"
    path.write_text('[database]\ndsn = "postgresql://mtad@127.0.0.1:1/mtad"\n[submission]\nprocesses = 2\n')
    settings = config.load(path, environ={})
    handed = daemon.port_settings(settings, settings.database.dsn or "")
    children = processes.Processes(handed, submission.bind([HostPort("127.0.0.1", 0)]), 2)
    first, second = children._children

    def accepted(value: float) -> list[metrics.Counted]:
        name = "mtad_submission_accepted_messages"
        return [(name, "counter", f"{name}_total", (), value)]

    first.last = accepted(5)  # it has no control socket (yet): its last counts are its answer
    ours, theirs = socket.socketpair()
    with theirs:
        _, second.writer = await asyncio.open_connection(sock=ours)
        second.ready.set()
        scrape = asyncio.create_task(children.counts())
        loop = asyncio.get_running_loop()
        theirs.setblocking(False)
        assert await loop.sock_recv(theirs, 64)  # the second child is being asked ...
        children._retire(first)  # ... when the first, which has answered, exits
        children._take(second, control.Counts(accepted(2)))
        counted = await scrape
        second.writer.close()
    children.close()
    assert sum(value for counts in counted for *_, value in counts) == 5 + 2


async def test_what_a_child_hands_over_arrives_whole() -> None:
    message = commit.NewMessage(
        id=commit.new_queue_id(), tenant="shop", sender="app@example.org",
        recipients=(Address("a", "example.com"), Address("bé", "xn--bcher-kva.example")), message_id="<m@x>",
        idempotency_key="msgid:<m@x>:d", body=b"Subject: x\r\n\r\nbody\r\n", client_address="127.0.0.1",
        received_at=datetime.now(UTC), smtputf8=True, priority=20, pool="bulk", account_pool="outreach",
    )  # fmt: skip
    handed = [commit.NewDelivery(7, message, "a@example.com", "example.com"), commit.NewDelivery(8, message, "x", "y")]
    ours, theirs = socket.socketpair()
    reader, reading = await asyncio.open_unix_connection(sock=ours)
    _, writer = await asyncio.open_unix_connection(sock=theirs)
    control.say(writer, control.Accepted(handed))  # over the control socket, as a child says it
    back = await control.heard(reader)
    writer.close()
    reading.close()
    assert back == control.Accepted(handed)
    assert isinstance(back, control.Accepted)
    assert back.deliveries[0].message is back.deliveries[1].message  # the body travels once per message
