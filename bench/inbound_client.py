"""`python -m bench.inbound_client FILE HOST PORT SESSIONS TIMEOUT`: prepared messages sent
to an SMTP listener over SESSIONS sessions at once, from a process of their own (the
load of the feedback part: DSNs to mtad's inbound listener).

FILE is a pickle of (envelope sender, recipient, message) triples, the message in
bytes with CRLF line ends. Each session connects, says EHLO, then takes the next
message until none is left, one command at a time (no pipelining), and QUITs. Any
reply other than the one expected fails the run. Prints one JSON line: the messages
sent and the seconds from the first connect to the last reply; exits 1 (with the
reply on stderr) on a refusal, a lost connection or TIMEOUT seconds passed.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import uvloop

HELO = b"bench-client.example.org"
Message = tuple[str, str, bytes]


class Refused(Exception):
    """A reply other than the one expected."""


async def _reply(reader: asyncio.StreamReader, expected: int) -> None:
    """Read one reply (every line of it); raises Refused unless its code is `expected`."""
    while True:
        line = await reader.readline()
        if not line:
            raise Refused(f"the connection closed while {expected} was expected")
        if line[3:4] != b"-":
            break
    if line[:3] != str(expected).encode():
        raise Refused(f"expected {expected}, got {line.decode(errors='replace').strip()}")


def _stuffed(data: bytes) -> bytes:
    """The message as DATA sends it: dot-stuffed, CRLF-terminated, then the final dot."""
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    if data.startswith(b"."):
        data = b"." + data
    return data.replace(b"\r\n.", b"\r\n..") + b".\r\n"


async def _session(host: str, port: int, messages: Iterator[Message]) -> int:
    """One connection that sends messages until the shared iterator is exhausted."""
    reader, writer = await asyncio.open_connection(host, port)
    sent = 0
    try:
        await _reply(reader, 220)
        writer.write(b"EHLO " + HELO + b"\r\n")
        await _reply(reader, 250)
        for sender, recipient, data in messages:
            writer.write(f"MAIL FROM:<{sender}>\r\n".encode())
            await _reply(reader, 250)
            writer.write(f"RCPT TO:<{recipient}>\r\n".encode())
            await _reply(reader, 250)
            writer.write(b"DATA\r\n")
            await _reply(reader, 354)
            writer.write(_stuffed(data))
            await _reply(reader, 250)
            sent += 1
        writer.write(b"QUIT\r\n")
        await _reply(reader, 221)
    finally:
        writer.close()
    return sent


async def send(host: str, port: int, messages: list[Message], sessions: int, within: float) -> tuple[int, float]:
    """Send every message over `sessions` connections in at most `within` seconds (else
    TimeoutError); returns (messages sent, seconds)."""
    shared = iter(messages)
    started = time.perf_counter()
    async with asyncio.timeout(within), asyncio.TaskGroup() as tasks:
        running = [tasks.create_task(_session(host, port, shared)) for _ in range(sessions)]
    return sum(task.result() for task in running), time.perf_counter() - started


def main(argv: list[str]) -> int:
    path, host, port, sessions, timeout = argv
    if not host.startswith("127."):
        print(f"refusing to send to {host}: the benchmark stays on loopback", file=sys.stderr)
        return 2
    messages: list[Message] = pickle.loads(Path(path).read_bytes())
    failure: BaseException | None = None
    try:
        sent, seconds = uvloop.run(send(host, int(port), messages, int(sessions), float(timeout)))
    except* (Refused, OSError, TimeoutError) as group:
        failure = group.exceptions[0]
    if failure is not None:
        print(f"inbound client: {failure}", file=sys.stderr)
        return 1
    print(json.dumps({"messages": sent, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
