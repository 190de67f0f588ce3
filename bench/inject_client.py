"""`python -m bench.inject_client URL TOKEN_FILE CONCURRENCY MESSAGES SIZE TIMEOUT OUT`: raw
messages injected over HTTP (`POST /v1/messages`), CONCURRENCY requests at once over as
many keep-alive connections of one aiohttp session, from a process of its own (the
load of the inject part).

Each request is `{"envelope_sender", "recipients", "content"}` with one recipient and
a message like smtp-source's: From, To, Date and a Message-Id unique within the run,
then a SIZE-octet body in CRLF-ended lines of 80 octets. The requests are made first;
then it prints `ready` and waits for a line on its stdin, so that the caller's clock
leaves its start-up out. Any answer but 202 fails the run. Writes a JSON object to the
file OUT (a pipe lost or mangled 200 KB of it now and then): the
seconds from the first request to the last answer, the CPU seconds this process used
meanwhile, and the queue id of every answer; exits 1 (with why on stderr) on a
refusal, a lost connection or TIMEOUT seconds passed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from email.utils import formatdate
from pathlib import Path

import aiohttp
import uvloop

SENDER = "bench@example.org"
_NUMBER = "@@N@@"  # stands for the message's number in the prepared request


class Refused(Exception):
    """An answer other than 202 with a queue id."""


def template(size: int) -> bytes:
    """The JSON request, with _NUMBER where the message's number goes (recipient, To, Message-Id)."""
    body = b"".join(f"{n}".ljust(78, "X").encode() + b"\r\n" for n in range(1, size // 80 + 2))[: size - 2] + b"\r\n"
    recipient = f"{_NUMBER}rcpt@example.com"
    content = (f"From: <{SENDER}>\r\nTo: <{recipient}>\r\nDate: {formatdate()}\r\n"
               f"Message-Id: <{_NUMBER}.bench@bench-client.example.org>\r\n\r\n{body.decode()}")  # fmt: skip
    return json.dumps({"envelope_sender": SENDER, "recipients": [recipient], "content": content}).encode()


def bodies(size: int, messages: int) -> list[bytes]:
    """The request of every message, numbered from 1."""
    made = template(size)
    return [made.replace(_NUMBER.encode(), str(n).encode()) for n in range(1, messages + 1)]


async def post_all(
    url: str, token: str, prepared: list[bytes], concurrency: int, within: float
) -> tuple[float, list[str]]:
    """Post every prepared body, `concurrency` at once; returns (seconds, queue ids)."""
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    queue_ids: list[str] = []
    shared = iter(prepared)

    async def one_connection(session: aiohttp.ClientSession) -> None:
        for body in shared:
            async with session.post(url, data=body) as response:
                answer = await response.read()
                if response.status != 202:
                    raise Refused(f"HTTP {response.status}: {answer.decode(errors='replace')[:300]}")
            queue_ids.append(json.loads(answer)["queue_id"])

    # No timer per request (the burst has one) and no cookie jar: 4 % of the client's instructions.
    unbounded = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(
        connector=connector, headers=headers, timeout=unbounded, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        started = time.perf_counter()
        async with asyncio.timeout(within), asyncio.TaskGroup() as tasks:
            for _ in range(concurrency):
                tasks.create_task(one_connection(session))
        seconds = time.perf_counter() - started
    return seconds, queue_ids


def main(argv: list[str]) -> int:
    url, token_file, concurrency, messages, size, timeout, out = argv
    if not url.startswith("http://127."):
        print(f"refusing to send to {url}: the benchmark stays on loopback", file=sys.stderr)
        return 2
    token = Path(token_file).read_text().strip()
    prepared = bodies(int(size), int(messages))
    print("ready", flush=True)
    sys.stdin.readline()
    failure: BaseException | None = None
    cpu_before = time.process_time()
    try:
        seconds, queue_ids = uvloop.run(post_all(url, token, prepared, int(concurrency), float(timeout)))
    except* (Refused, aiohttp.ClientError, OSError, TimeoutError) as group:
        failure = group.exceptions[0]
    if failure is not None:
        print(f"inject client: {type(failure).__name__}: {failure}", file=sys.stderr)
        return 1
    cpu = time.process_time() - cpu_before
    result = {"messages": len(queue_ids), "seconds": seconds, "cpu": cpu, "queue_ids": queue_ids}
    Path(out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
