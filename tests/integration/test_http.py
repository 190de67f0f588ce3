"""/metrics and /healthz over a real socket."""

from __future__ import annotations

import asyncio

from mtad.base import errors, http
from mtad.base.endpoints import HostPort


async def get(port: int, request: bytes) -> tuple[str, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), body


async def test_routes() -> None:
    healthy = [True]

    async def depth() -> dict[str, int]:
        if not healthy[0]:
            raise errors.DatabaseUnavailable("down")
        return {"queued": 7}

    async def is_healthy() -> bool:
        return healthy[0]

    server = http.Server(HostPort("127.0.0.1", 0), depth=depth, healthy=is_healthy)
    await server.start()
    try:
        assert server.address is not None
        port = server.address.port
        status, body = await get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == "HTTP/1.1 200 OK"
        assert b'mtad_spool_deliveries{state="queued"} 7.0' in body
        assert b"# HELP mtad_submission_rejected_total" in body
        assert await get(port, b"GET /healthz HTTP/1.1\r\n\r\n") == ("HTTP/1.1 200 OK", b"ok\n")
        healthy[0] = False
        assert (await get(port, b"GET /healthz HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 503 Service Unavailable"
        status, body = await get(port, b"GET /metrics HTTP/1.1\r\n\r\n")  # still served, depth is stale
        assert status == "HTTP/1.1 200 OK"
        assert (await get(port, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 405 Method Not Allowed"
        assert (await get(port, b"GET /x HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 404 Not Found"
        assert (await get(port, b"NONSENSE\r\n\r\n"))[0] == "HTTP/1.1 400 Bad Request"
    finally:
        await server.close()
