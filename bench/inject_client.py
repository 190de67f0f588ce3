"""`python -m bench.inject_client URL TOKEN_FILE CONCURRENCY MESSAGES SIZE TIMEOUT OUT`: raw
messages injected over HTTP (`POST /v1/messages`), CONCURRENCY requests at once over as
many keep-alive connections, from a process of its own (the load of the inject part).

Each request is `{"envelope_sender", "recipients", "content"}` with one recipient and
a message like smtp-source's: From, To, Date and a Message-Id unique within the run,
then a SIZE-octet body in CRLF-ended lines of 80 octets. The requests are made first;
then it prints `ready` and waits for a line on its stdin, so that the caller's clock
leaves its start-up out. Any answer but 202 fails the run. Writes a JSON object to the
file OUT (a pipe lost or mangled 200 KB of it now and then): the
seconds from the first request to the last answer, the CPU seconds this process used
meanwhile, and the queue id of every answer; exits 1 (with why on stderr) on a
refusal, a lost connection or TIMEOUT seconds passed.

Hand-written HTTP/1.1 on asyncio's protocols (one request at a time per connection,
answers with a Content-Length, as aiohttp's server gives them): aiohttp's client spent
0.28-0.40 ms of CPU a request, three times smtp-source's 0.12-0.14 ms a message, and
the burst measured the load generator more than the server.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import uvloop

SENDER = "bench@example.org"
_NUMBER = "@@N@@"  # stands for the message's number in the prepared request


class Refused(Exception):
    """An answer other than 202 with a queue id, or one this client cannot read."""


def template(size: int) -> bytes:
    """The JSON request body, with _NUMBER where the message's number goes (recipient, To, Message-Id)."""
    body = b"".join(f"{n}".ljust(78, "X").encode() + b"\r\n" for n in range(1, size // 80 + 2))[: size - 2] + b"\r\n"
    recipient = f"{_NUMBER}rcpt@example.com"
    content = (f"From: <{SENDER}>\r\nTo: <{recipient}>\r\nDate: {formatdate()}\r\n"
               f"Message-Id: <{_NUMBER}.bench@bench-client.example.org>\r\n\r\n{body.decode()}")  # fmt: skip
    return json.dumps({"envelope_sender": SENDER, "recipients": [recipient], "content": content}).encode()


def bodies(size: int, messages: int) -> list[bytes]:
    """The request body of every message, numbered from 1."""
    made = template(size)
    return [made.replace(_NUMBER.encode(), str(n).encode()) for n in range(1, messages + 1)]


def requests(url: str, token: str, prepared: list[bytes]) -> list[bytes]:
    """Each body as a whole HTTP/1.1 request to url, keep-alive."""
    parts = urlsplit(url)
    head = (f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n").encode()  # fmt: skip
    return [head + b"Content-Length: %d\r\n\r\n" % len(body) + body for body in prepared]


class _Connection(asyncio.Protocol):
    """One keep-alive connection: sends the next request when the last one is answered."""

    def __init__(self, shared: Iterator[bytes], queue_ids: list[str], done: asyncio.Future[None]) -> None:
        self._shared = shared
        self._ids = queue_ids
        self._done = done
        self._buffer = bytearray()
        self._status = 0
        self._length = -1  # of the answer's body being read; -1: its head is still to come
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is one, not a subclass
        self._send()

    def _send(self) -> None:
        assert self._transport is not None
        request = next(self._shared, None)
        if request is None:
            self._finish(None)
        else:
            self._transport.write(request)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        try:
            while self._answer():
                self._send()
        except Refused as exc:
            self._finish(exc)

    def _answer(self) -> bool:
        """Reads one whole answer from the buffer when it is there."""
        if self._length < 0:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(self._buffer[:end]).lower()
            del self._buffer[: end + 4]
            self._status = int(head[9:12])
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip() == b"content-length":
                    self._length = int(value)
            if self._length < 0:
                raise Refused(f"an answer without Content-Length: {head[:200]!r}")
        if len(self._buffer) < self._length:
            return False
        answer = bytes(self._buffer[: self._length])
        del self._buffer[: self._length]
        self._length = -1
        if self._status != 202:
            raise Refused(f"HTTP {self._status}: {answer.decode(errors='replace')[:300]}")
        self._ids.append(json.loads(answer)["queue_id"])
        return True

    def _finish(self, failure: BaseException | None) -> None:
        if self._transport is not None:
            self._transport.close()
        if not self._done.done():
            if failure is None:
                self._done.set_result(None)
            else:
                self._done.set_exception(failure)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done.done():
            self._done.set_exception(exc or ConnectionError("the server closed the connection"))


async def post_all(url: str, prepared: list[bytes], concurrency: int, within: float) -> tuple[float, list[str]]:
    """Send every prepared request, `concurrency` at once; returns (seconds, queue ids)."""
    loop = asyncio.get_running_loop()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    shared = iter(prepared)
    queue_ids: list[str] = []
    started = time.perf_counter()
    async with asyncio.timeout(within):
        finished = [loop.create_future() for _ in range(concurrency)]
        for done in finished:
            await loop.create_connection(functools.partial(_Connection, shared, queue_ids, done), host, port)
        await asyncio.gather(*finished)
    return time.perf_counter() - started, queue_ids


def main(argv: list[str]) -> int:
    url, token_file, concurrency, messages, size, timeout, out = argv
    if not url.startswith("http://127."):
        print(f"refusing to send to {url}: the benchmark stays on loopback", file=sys.stderr)
        return 2
    token = Path(token_file).read_text().strip()
    prepared = requests(url, token, bodies(int(size), int(messages)))
    print("ready", flush=True)
    sys.stdin.readline()
    failure: BaseException | None = None
    cpu_before = time.process_time()
    try:
        seconds, queue_ids = uvloop.run(post_all(url, prepared, int(concurrency), float(timeout)))
    except (Refused, OSError, TimeoutError) as exc:
        failure = exc
    if failure is not None:
        print(f"inject client: {type(failure).__name__}: {failure}", file=sys.stderr)
        return 1
    cpu = time.process_time() - cpu_before
    result = {"messages": len(queue_ids), "seconds": seconds, "cpu": cpu, "queue_ids": queue_ids}
    Path(out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
