"""`python -m bench.webhook_receiver`: the webhook endpoint of the webhooks part, a
process of its own (aiohttp on uvloop, 127.0.0.1, a free port, printed on the first
line of its output).

POST /hook takes a request (one event, or a JSON array of them) and answers 204; it
counts each event once by its event_id, and counts again what came twice, and what
came before an older event of its message (out of order). Every SAMPLE-th request is
verified with the standardwebhooks package and the secret given to /reset, at once
(the signature's timestamp is checked against the clock). GET /stats says what came
so far, with the time.monotonic() of the last event (CLOCK_MONOTONIC: the same clock
in every process); POST /reset {"secret": ...} starts a run. SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from dataclasses import asdict, dataclass, field

import uvloop
from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SAMPLE = 50  # one request in SAMPLE is verified


@dataclass
class Stats:
    requests: int = 0
    arrays: int = 0  # requests whose body was a JSON array
    events: int = 0  # distinct event ids
    id_sum: int = 0  # of the distinct event ids
    twice: int = 0  # events that came again
    out_of_order: int = 0  # events that came after a newer one of their message
    verified: int = 0
    bad: int = 0  # requests whose signature did not verify
    last: float = 0.0  # time.monotonic() when the last new event came
    problems: list[str] = field(default_factory=list)


class Receiver:
    def __init__(self) -> None:
        self.stats = Stats()
        self.signer: Webhook | None = None
        self.seen: set[int] = set()
        self.newest: dict[str, int] = {}  # message -> the newest event id come of it

    async def hook(self, request: web.Request) -> web.Response:
        body = await request.read()
        stats = self.stats
        stats.requests += 1
        parsed = json.loads(body)
        if isinstance(parsed, list):
            stats.arrays += 1
            found = parsed
        else:
            found = [parsed]
        for event in found:
            data = event["data"]
            number = data["event_id"]
            if number in self.seen:
                stats.twice += 1
                continue
            self.seen.add(number)
            stats.events += 1
            stats.id_sum += number
            message = data.get("message")
            if message is not None:
                if number < self.newest.get(message, 0):
                    stats.out_of_order += 1
                else:
                    self.newest[message] = number
        if self.signer is not None and stats.requests % SAMPLE == 1:
            try:
                self.signer.verify(body.decode(), dict(request.headers))
                stats.verified += 1
            except WebhookVerificationError as exc:
                stats.bad += 1
                if len(stats.problems) < 5:
                    stats.problems.append(f"{request.headers.get('webhook-id')}: {exc}")
        stats.last = time.monotonic()
        return web.Response(status=204)

    async def reset(self, request: web.Request) -> web.Response:
        given = await request.json()
        self.stats = Stats()
        self.seen.clear()
        self.newest.clear()
        self.signer = Webhook(given["secret"]) if given.get("secret") else None
        return web.json_response({"ok": True})

    async def report(self, request: web.Request) -> web.Response:
        return web.json_response(asdict(self.stats))


async def main() -> None:
    receiver = Receiver()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/hook", receiver.hook)
    app.router.add_post("/reset", receiver.reset)
    app.router.add_get("/stats", receiver.report)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(runner.addresses[0][1], flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    uvloop.run(main())
