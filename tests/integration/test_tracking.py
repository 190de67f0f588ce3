"""Open and click tracking in one process, against real PostgreSQL, a real SMTP sink
and a real HTTP socket: the engine rewrites a tracked tenant's HTML per recipient
(each in a transaction of its own) and leaves another tenant's alone; HTML it cannot
read safely goes out untouched with its event saying so; the endpoints record
people and machines by the time since delivery (a clock of the test's), by
network behind a proxy, and by method; a token whose delivery is gone still counts."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from mtad import db
from mtad.base import http, values
from mtad.base.endpoints import HostPort
from mtad.deliver import delivery, egress
from mtad.feedback import settings, tracking_http, unsubscribe
from mtad.feedback.tracking import Kind, Tokens, Tracked, Tracking
from mtad.outbound import outcomes, routing, sessions
from tests.integration.delivering import PROVIDERS, RULES, ZONE, accept, deliveries, new_message
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

TRACKER = Tracking(Tokens(b"u" * 32), "https://t.example.org", "https://unsub.example.org")
HTML = (
    b"Subject: t\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    b'<html><body><a href="https://shop.example.com/x">x</a></body></html>\r\n'
)
HIDDEN = HTML.replace(b"<body>", b"<body><!-- <a href='https://shop.example.com/y'> -->")
CLICK = re.compile(rb'"https://t\.example\.org/c/([A-Za-z0-9_-]+)"')
OPEN = re.compile(rb'"https://t\.example\.org/o/([A-Za-z0-9_-]+)"')


async def run_engine(database: db.Database, sink: Sink, tracked: dict[str, tuple[bool, bool]]) -> None:
    router = routing.Router(ZoneResolver(ZONE), PROVIDERS, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    engine_settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0), tracked=tracked)
    engine = delivery.Delivery(engine_settings, database, router, pool, RULES, pools=egress.Egress({}),
                               tracking=TRACKER)  # fmt: skip
    await engine.run_until_idle()


async def test_a_tracked_tenants_html_is_rewritten_per_recipient_and_what_cannot_be_goes_untouched(
    database: db.Database, sink: Sink
) -> None:
    await accept(database, new_message("a@sink.test", "b@sink.test", body=HTML),
                 new_message("c@sink.test", body=HIDDEN),
                 dataclasses.replace(new_message("d@sink.test", "e@sink.test", body=HTML), tenant="t2"))  # fmt: skip
    await run_engine(database, sink, {"t1": (True, True)})
    ids = {r: int(str(d["id"])) for r, d in (await deliveries(database)).items()}
    by_recipient = {tuple(m.recipients): m.data for m in sink.received}
    for recipient in ("a@sink.test", "b@sink.test"):
        data = by_recipient[(recipient,)]  # a transaction each
        [click] = CLICK.findall(data)
        [opened] = OPEN.findall(data)
        assert TRACKER.tokens.read(click.decode(), Kind.CLICK) == Tracked(
            Kind.CLICK, ids[recipient], "t1", "https://shop.example.com/x"
        )
        assert TRACKER.tokens.read(opened.decode(), Kind.OPEN) == Tracked(Kind.OPEN, ids[recipient], "t1")
    assert by_recipient[("c@sink.test",)].endswith(HIDDEN.split(b"\r\n\r\n", 1)[1])  # untouched
    assert by_recipient[("d@sink.test", "e@sink.test")].endswith(HTML.split(b"\r\n\r\n", 1)[1])  # t2: not tracked
    [event] = await query(database, "SELECT data->>'tracking' AS why FROM events WHERE kind = 'delivered' "
                                    "AND delivery = $1", ids["c@sink.test"])  # fmt: skip
    assert event["why"].startswith("untouched: 2 link tags in the text, 1 read as tags")


@dataclass
class Endpoint:
    base: str
    client: aiohttp.ClientSession
    clock: list[datetime]

    async def get(self, path: str, method: str = "GET", **headers: str) -> aiohttp.ClientResponse:
        agent = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0", **headers}
        async with self.client.request(method, self.base + path, headers=agent, allow_redirects=False) as response:
            await response.read()
            return response


@pytest.fixture
async def endpoint(database: db.Database) -> AsyncIterator[Endpoint]:
    clock = [datetime.now(UTC)]
    rules = settings.Tracking(url=TRACKER.url, proxies=(values.network("127.0.0.1/32"),))
    application = unsubscribe.app(unsubscribe.Tokens(b"u" * 32), functools.partial(unsubscribe.record, database))
    tracking_http.add_routes(application, TRACKER.tokens, functools.partial(tracking_http.record, database, rules),
                             rules.proxies, now=lambda: clock[0])  # fmt: skip
    listener = http.Listener(application)
    await listener.start([HostPort("127.0.0.1", 0)])
    [where] = listener.addresses
    try:
        async with aiohttp.ClientSession() as client:
            yield Endpoint(f"http://{where.host}:{where.port}", client, clock)
    finally:
        await listener.stop()


async def recorded(database: db.Database) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT kind, delivery, tenant, data->>'machine' AS machine, "
                                 "data->>'machine_why' AS why, data->>'url' AS url, data->>'delivery' AS gone "
                                 "FROM events WHERE kind IN ('opened', 'clicked') ORDER BY id")  # fmt: skip
    return [dict(r) for r in rows]


async def test_people_and_machines_by_time_network_and_method(
    database: db.Database, sink: Sink, endpoint: Endpoint
) -> None:
    await accept(database, new_message("a@sink.test", body=HTML))
    await run_engine(database, sink, {"t1": (True, True)})
    [row] = await query(database, "SELECT id, updated_at FROM deliveries WHERE state = 'delivered'")
    delivered, at = row["id"], row["updated_at"]
    click = "/c/" + TRACKER.tokens.make(Kind.CLICK, delivered, "t1", "https://shop.example.com/x")
    opened = "/o/" + TRACKER.tokens.make(Kind.OPEN, delivered, "t1")

    endpoint.clock[0] = at + timedelta(seconds=3)  # a scanner follows links as the mail arrives
    assert (await endpoint.get(click)).status == 302
    endpoint.clock[0] = at + timedelta(seconds=1)
    assert (await endpoint.get(opened)).status == 200  # a prefetcher
    endpoint.clock[0] = at + timedelta(hours=2)  # a person, later: no click within burst_window before
    response = await endpoint.get(click)
    assert (response.status, response.headers["Location"]) == (302, "https://shop.example.com/x")
    assert (await endpoint.get(opened)).status == 200
    endpoint.clock[0] = at + timedelta(hours=3)
    assert (await endpoint.get(opened, **{"X-Forwarded-For": "198.51.100.7, 17.58.0.9"})).status == 200  # via proxy
    endpoint.clock[0] = at + timedelta(hours=4)
    assert (await endpoint.get(click, "HEAD")).status == 302
    gone = "/c/" + TRACKER.tokens.make(Kind.CLICK, 10**12, "t1", "https://shop.example.com/z")
    assert (await endpoint.get(gone)).headers["Location"] == "https://shop.example.com/z"
    refused = await endpoint.get(click[:-1] + ("A" if click[-1] != "A" else "B"))
    assert refused.status == 400
    assert "Location" not in refused.headers

    assert [(e["kind"], e["machine"], e["why"]) for e in await recorded(database)] == [
        ("clicked", "true", "scanner"),
        ("opened", "true", "prefetch"),
        ("clicked", "false", None),
        ("opened", "false", None),
        ("opened", "true", "apple_privacy_proxy"),
        ("clicked", "true", "head"),
        ("clicked", "false", None),
    ]
    events = await recorded(database)
    assert all(e["delivery"] == delivered and e["tenant"] == "t1" for e in events[:-1])
    assert (events[-1]["delivery"], events[-1]["gone"], events[-1]["tenant"]) == (None, str(10**12), "t1")
    assert events[-1]["url"] == "https://shop.example.com/z"
