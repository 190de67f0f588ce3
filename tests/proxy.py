"""A TCP proxy in front of PostgreSQL, to make the database unreachable on demand.

It runs its own event loop in a thread, so sync tests (mtad as a subprocess) and
async tests (mtad on the test's loop) can both use it. `cut()` closes every
proxied connection and stops listening (clients see connection refused);
`restore()` listens again on the same port. `drop_reply(marker)` lets the next
statement whose text holds `marker` run and commit, then cuts its connection
before the reply reaches the client: a write whose outcome the client cannot know.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import parse_qs, urlsplit


class PgProxy:
    def __init__(self, target_dsn: str) -> None:
        parts = urlsplit(target_dsn)
        self._database = parts.path.lstrip("/")
        self._user = parts.username or "postgres"
        host = parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
        if host.startswith("/"):
            self._target: tuple[str, int] | str = f"{host}/.s.PGSQL.{parts.port or 5432}"
        else:
            self._target = (host, parts.port or 5432)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._trap: tuple[bytes, threading.Event] | None = None
        self.port = 0

    def __enter__(self) -> PgProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def __exit__(self, *exc: object) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @property
    def dsn(self) -> str:
        return f"postgresql://{self._user}@127.0.0.1:{self.port}/{self._database}"

    def cut(self) -> None:
        self._call(self._close())

    def restore(self) -> None:
        self._call(self._listen())

    def drop_reply(self, marker: bytes) -> threading.Event:
        """Arm the trap for the next statement holding `marker`; the event is set once
        it committed and its connection was cut."""
        sprung = threading.Event()
        self._trap = (marker, sprung)
        return sprung

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if isinstance(self._target, str):
                up_reader, up_writer = await asyncio.open_unix_connection(self._target)
            else:
                up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update({writer, up_writer})
        caught = _Caught()
        await asyncio.gather(
            self._pipe(reader, up_writer, lambda data: self._watch_query(caught, data)),
            self._pipe(up_reader, writer, lambda data: self._watch_reply(caught, data, (writer, up_writer))),
        )

    def _watch_query(self, caught: _Caught, data: bytes) -> bool:
        if self._trap is not None and not caught.armed and self._trap[0] in data:
            caught.armed, caught.event, self._trap = True, self._trap[1], None
        return True

    def _watch_reply(self, caught: _Caught, data: bytes, ends: tuple[asyncio.StreamWriter, ...]) -> bool:
        """False (the chunk is not passed on, both ends are cut) once the server has
        completed the trapped statement and is ready again: it has committed."""
        if not caught.armed:
            return True
        caught.pending += data
        while len(caught.pending) >= 5:  # type byte, then a length that counts itself
            kind, length = caught.pending[:1], struct.unpack("!I", caught.pending[1:5])[0]
            if len(caught.pending) < 1 + length:
                break
            caught.pending = caught.pending[1 + length :]
            caught.completed |= kind == b"C"
            if kind == b"Z" and caught.completed:
                for end in ends:
                    end.transport.abort()
                assert caught.event is not None
                caught.event.set()
                return False
        return True

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, passes: Callable[[bytes], bool]
    ) -> None:
        try:
            while data := await reader.read(65536):
                if not passes(data):
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.transport.abort()


class _Caught:
    """One connection's part in the trap: armed once its query held the marker."""

    def __init__(self) -> None:
        self.armed = False
        self.event: threading.Event | None = None
        self.pending = b""  # the server's messages since, read whole
        self.completed = False
