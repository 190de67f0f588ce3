"""Submission processes started by mtad.workers.Processes, as real child processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mtad import config, errors, submission, workers
from mtad.endpoints import HostPort


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
