"""The HTTP endpoint: GET /metrics (Prometheus text format) and GET /healthz.

A deliberately small HTTP/1.1 server on asyncio streams (one request per
connection, no keep-alive): two read-only routes do not justify a web framework
as a dependency. At scrape time, spool depth is read from PostgreSQL and the
node's submission processes are asked for their counts (`others`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

import structlog
from prometheus_client import CONTENT_TYPE_LATEST

from mtad.base import errors, metrics
from mtad.base.endpoints import HostPort

log = structlog.get_logger("mtad.http")

REQUEST_TIMEOUT = 10.0
MAX_HEADER_BYTES = 16 * 1024


class Server:
    """Serves /metrics and /healthz; `depth`, `healthy` and `others` are read per request."""

    def __init__(
        self,
        listen: HostPort,
        *,
        depth: Callable[[], Awaitable[dict[str, int]]],
        healthy: Callable[[], Awaitable[bool]],
        others: Callable[[], Awaitable[Sequence[Sequence[metrics.Counted]]]] | None = None,
    ) -> None:
        self._listen = listen
        self._depth = depth
        self._healthy = healthy
        self._others = others
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> HostPort | None:
        if self._server is None or not self._server.sockets:
            return None
        host, port = self._server.sockets[0].getsockname()[:2]
        return HostPort(host, port)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._listen.host, self._listen.port, reuse_address=True)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
                status, ctype, body = await self._route(head)
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _route(self, head: bytes) -> tuple[str, str, bytes]:
        if len(head) > MAX_HEADER_BYTES:
            return "431 Request Header Fields Too Large", "text/plain", b"too large\n"
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target, _ = parts
        path = target.split("?", 1)[0]
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        if path == "/metrics":
            try:
                metrics.set_spool_depth(await self._depth())
            except errors.SpoolError as exc:
                log.warning("metrics_depth_unavailable", error=str(exc))
            others = await self._others() if self._others is not None else ()
            return "200 OK", CONTENT_TYPE_LATEST, metrics.exposition(others)
        if path == "/healthz":
            if await self._healthy():
                return "200 OK", "text/plain", b"ok\n"
            return "503 Service Unavailable", "text/plain", b"spool database unavailable\n"
        return "404 Not Found", "text/plain", b"not found\n"
