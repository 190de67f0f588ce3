"""What the two servers under test have in common: started on entry, stopped on exit."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Self


class Managed:
    """A server used as a context manager: `start()` on entry (and `stop()` if that
    fails half-way), `stop()` on exit, even on error."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_listening(
    process: subprocess.Popen[bytes],
    address: tuple[str, int],
    within: float,
    ready: Callable[[socket.socket], bool] = lambda sock: True,
) -> str | None:
    """Connect to a process's port until a connection is `ready` (bounded): None, else
    why not (it exited, or `within` seconds passed)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with socket.create_connection(address, timeout=within) as sock:
                if ready(sock):
                    return None
        except OSError:
            pass
        try:
            process.wait(0.05)  # returns early only when the process exited
            return f"exited with status {process.returncode}"
        except subprocess.TimeoutExpired:
            pass
        if time.monotonic() > deadline:
            return f"did not answer on {address[0]}:{address[1]} within {within:.0f} s"
