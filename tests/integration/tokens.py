"""An OAuth token endpoint on loopback for the integration tests."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from dataclasses import dataclass, field


@dataclass
class TokenServer:
    """An OAuth token endpoint: refresh token "good" gets access tokens "access-N"."""

    lifetime: int = 3600
    status: int = 200  # 500: a server error
    chunked: bool = False
    requests: list[dict[str, str]] = field(default_factory=list)
    port: int = 0
    _server: asyncio.base_events.Server | None = None

    async def start(self) -> TokenServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        form = dict(urllib.parse.parse_qsl((await reader.readexactly(length)).decode()))
        self.requests.append(form)
        if self.status != 200:
            status, answer = self.status, {"error": "server_error"}
        elif form.get("refresh_token") != "good" or form.get("client_id") != "mtad-client":
            status, answer = 400, {"error": "invalid_grant", "error_description": "Token has been expired or revoked."}
        else:
            status, answer = 200, {"access_token": f"access-{len(self.requests)}", "expires_in": self.lifetime}
        body = json.dumps(answer).encode()
        if self.chunked:
            payload = b"".join(
                b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7]) for i in range(0, len(body), 7)
            )
            writer.write(b"HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n%s0\r\n\r\n" % (status, payload))
        else:
            writer.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()
        writer.close()
