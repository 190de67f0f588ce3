"""The processes DKIM's RSA signatures are made in (mtad.signing.rsa_worker), spoken
to over their pipes."""

from __future__ import annotations

import asyncio
import itertools
import sys
import typing

from mtad.base import errors
from mtad.signing import rsa_worker


class WorkerGone(errors.ProcessError):
    """A signing process ended (killed, or its pipe broke) with requests unanswered,
    or could not make a signature."""


class Worker(asyncio.SubprocessProtocol):
    """One signing process (mtad.signing.rsa_worker), spoken to over its pipes by the
    event loop itself: its answers are read in the loop's callbacks, with no task and
    no helper thread (which would wait for the GIL to hand each signature back, up
    to the switch interval, 5 ms, while the loop is busy)."""

    def __init__(self) -> None:
        self._transport: asyncio.SubprocessTransport | None = None
        self._requests: asyncio.WriteTransport | None = None
        self._waiting: dict[int, asyncio.Future[bytes]] = {}
        self._numbers = itertools.count()
        self._unread = bytearray()
        self._exited = asyncio.get_running_loop().create_future()
        self.alive = True

    @classmethod
    async def start(cls) -> Worker:
        _, worker = await asyncio.get_running_loop().subprocess_exec(
            cls, sys.executable, "-m", "mtad.signing.rsa_worker", stderr=None
        )
        return worker

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio's classes, only of their shape
        self._transport = typing.cast(asyncio.SubprocessTransport, transport)
        self._requests = typing.cast(asyncio.WriteTransport, self._transport.get_pipe_transport(0))

    @property
    def pid(self) -> int:
        assert self._transport is not None
        return self._transport.get_pid()

    async def sign(self, der: bytes, digest: bytes) -> bytes:
        """The signature; WorkerGone when the process is."""
        if not self.alive or self._requests is None or self._requests.is_closing():
            raise WorkerGone("the signing process ended")
        number = next(self._numbers)
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        self._requests.write(rsa_worker.REQUEST.pack(number, len(der), len(digest)) + der + digest)
        return await answer

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        """Each whole answer in what the process wrote, to the request it answers."""
        unread = self._unread
        unread += data
        size = rsa_worker.ANSWER.size
        while len(unread) >= size:
            number, ok, length = rsa_worker.ANSWER.unpack_from(unread)
            if len(unread) < size + length:
                return
            made = bytes(unread[size : size + length])
            del unread[: size + length]
            answer = self._waiting.pop(number, None)
            if answer is None or answer.done():
                continue
            if ok:
                answer.set_result(made)
            else:  # signed on the loop instead, where the error is raised
                answer.set_exception(WorkerGone(made.decode(errors="replace")))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._gone(str(exc) if exc else "its output ended")

    def process_exited(self) -> None:
        self._gone("it exited")
        if not self._exited.done():
            self._exited.set_result(None)

    def _gone(self, why: str) -> None:
        self.alive = False
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(WorkerGone(f"the signing process ended: {why}"))
        self._waiting.clear()

    async def stop(self) -> None:
        """Its input closed: it ends once it has answered; killed if it has not in 5 s."""
        self._gone("stopped")
        if self._transport is None:
            return
        if self._requests is not None:
            self._requests.close()
        try:
            async with asyncio.timeout(5):
                await asyncio.shield(self._exited)
        except TimeoutError:
            self._transport.kill()
            await self._exited
        self._transport.close()
