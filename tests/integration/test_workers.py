"""Submission processes started by mtad.workers.Processes, as real child processes."""

from __future__ import annotations

import asyncio
import pickle
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mtad import config, errors, spool, submission, workers
from mtad.endpoints import HostPort
from mtad.envelope import Address


async def test_a_child_that_cannot_start_fails_the_start(tmp_path: Path) -> None:
    path = tmp_path / "mtad.toml"
    # Nothing listens on port 1: the child cannot reach its database and exits.
    path.write_text('[database]\ndsn = "postgresql://mtad@127.0.0.1:1/mtad"\n[submission]\nprocesses = 1\n')
    settings = config.load(path, environ={})
    listening = submission.bind([HostPort("127.0.0.1", 0)])
    processes = workers.Processes(settings, listening, 1)
    assert processes.addresses[0].port != 0
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(processes.run())
        with pytest.raises(errors.ProcessError, match="submission process 1 exited"):
            await processes.start()
        await processes.stop()
        await running
    assert all(sock.fileno() == -1 for sock in listening)  # stop() closed them
    assert await processes.counts() == [[], []]


def test_what_a_child_hands_over_arrives_whole() -> None:
    message = spool.NewMessage(
        id=spool.new_queue_id(), tenant="shop", sender="app@example.org",
        recipients=(Address("a", "example.com"), Address("bé", "xn--bcher-kva.example")), message_id="<m@x>",
        idempotency_key="msgid:<m@x>:d", body=b"Subject: x\r\n\r\nbody\r\n", client_address="127.0.0.1",
        received_at=datetime.now(UTC), smtputf8=True, priority=20, pool="bulk", account_pool="outreach",
    )  # fmt: skip
    handed = [spool.NewDelivery(7, message, "a@example.com", "example.com"), spool.NewDelivery(8, message, "x", "y")]
    back = pickle.loads(pickle.dumps(("accepted", handed), protocol=pickle.HIGHEST_PROTOCOL))
    assert back == ("accepted", handed)
    assert back[1][0].message is back[1][1].message  # the body travels once per message
