"""Waiting for processes to exit, woken by the exit itself (Linux pidfds), for the
tests and the benchmark."""

from __future__ import annotations

import os
import select
import time


def wait_exit(pids: list[int], timeout: float) -> bool:
    """True once every process in pids has exited, False if one is still running
    after timeout seconds. An exited process that nobody reaps (a zombie) counts
    as exited: its pidfd is readable too."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(fd)
        if not ready:
            return False
    return True
