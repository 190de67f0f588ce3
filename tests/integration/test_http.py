"""/metrics and /healthz over a real socket, served by aiohttp."""

from __future__ import annotations

import asyncio

import aiohttp

from mtad.base import errors, http
from mtad.base.endpoints import HostPort


async def raw(port: int, request: bytes) -> str:
    """The status line of the answer to `request`, sent exactly as given."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return line.decode().rstrip()


async def test_routes() -> None:
    healthy = [True]

    async def depth() -> dict[str, int]:
        if not healthy[0]:
            raise errors.DatabaseUnavailable("down")
        return {"queued": 7}

    async def is_healthy() -> bool:
        return healthy[0]

    server = http.Listener(http.observability(depth=depth, healthy=is_healthy))
    await server.start([HostPort("127.0.0.1", 0)])
    try:
        base = f"http://127.0.0.1:{server.addresses[0].port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/metrics") as response:
                body = await response.read()
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=")
            assert b'mtad_spool_deliveries{state="queued"} 7.0' in body
            assert b"# HELP mtad_submission_rejected_total" in body
            async with session.get(f"{base}/healthz") as response:
                assert (response.status, await response.text()) == (200, "ok\n")
            healthy[0] = False
            async with session.get(f"{base}/healthz") as response:
                assert response.status == 503
            async with session.get(f"{base}/metrics") as response:  # still served, depth is stale
                assert response.status == 200
            async with session.post(f"{base}/metrics") as response:
                assert response.status == 405
            async with session.get(f"{base}/x") as response:
                assert response.status == 404
        assert (await raw(server.addresses[0].port, b"NONSENSE\r\n\r\n")).endswith(" 400 Bad Request")
    finally:
        await server.stop()
