"""A raw SMTP client for probes that a polite client library would not send
(bare line endings, smuggled end-of-data sequences, pipelined commands)."""

from __future__ import annotations

import asyncio
import base64
import contextlib


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, host: str, port: int, *, source: str | None = None) -> RawClient:
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0) if source else None)
        client = cls(reader, writer)
        greeting = await client.reply()
        assert greeting.startswith("220 "), greeting
        return client

    async def reply(self) -> str:
        """One whole reply (all lines of a multi-line one), without CRLFs."""
        lines = []
        while True:
            line = (await asyncio.wait_for(self.reader.readline(), 10)).decode()
            if not line:
                raise ConnectionError("connection closed: " + " | ".join(lines))
            lines.append(line.rstrip("\r\n"))
            if len(line) < 4 or line[3] != "-":
                return "\n".join(lines)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def command(self, line: str) -> str:
        await self.send(line.encode() + b"\r\n")
        return await self.reply()

    async def ehlo(self, name: str = "client.example") -> str:
        return await self.command(f"EHLO {name}")

    async def envelope(self, sender: str = "app@example.org", *recipients: str) -> None:
        assert (await self.command(f"MAIL FROM:<{sender}>")).startswith("250"), sender
        for rcpt in recipients or ("rcpt@example.com",):
            reply = await self.command(f"RCPT TO:<{rcpt}>")
            assert reply.startswith("250"), reply

    async def data(self, raw: bytes) -> str:
        """DATA with `raw` sent exactly as given (it must carry its own end of data)."""
        assert (await self.command("DATA")).startswith("354")
        await self.send(raw)
        return await self.reply()

    async def auth_plain(self, user: str, password: str) -> str:
        token = base64.b64encode(f"\0{user}\0{password}".encode()).decode()
        return await self.command(f"AUTH PLAIN {token}")

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
