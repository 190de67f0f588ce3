"""The status page's side of the admin listener against real PostgreSQL over a real
socket: its files, its login cookie (reads the API, never changes anything), and
what it reads beside the rest of /v1 (the rate per minute, the nodes, the warm-up)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from mtad import db
from mtad.admin import page, status
from mtad.spool import nodes, tenants
from tests.integration.admin_api import TOKEN, Client, serving
from tests.pg import query


async def _login(client: Client, token: str, **headers: str) -> tuple[int, Any]:
    async with client.session.post(client.base + "/page/login", data={"token": token}, headers=headers) as answer:
        return answer.status, answer.cookies.get(page.COOKIE)


async def _with_cookie(client: Client, method: str, path: str, value: str) -> int:
    async with client.session.request(method, client.base + path, headers={"Cookie": f"{page.COOKIE}={value}"},
                                      json={} if method == "POST" else None) as answer:  # fmt: skip
        return answer.status


async def test_the_page_and_its_files_are_served_under_a_strict_policy(database: db.Database) -> None:
    async with serving(database) as client:
        for path, kind in (("/", "text/html"), ("/page/page.js", "text/javascript"), ("/page/page.css", "text/css")):
            async with client.session.get(client.base + path) as answer:
                assert (answer.status, answer.content_type) == (200, kind)
                assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
                assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert b'<form id="login"' in await (await client.session.get(client.base + "/")).read()
        for path in ("/page/page.html", "/page/nothing.js", "/nothing"):
            assert (await client.session.get(client.base + path)).status == 404


async def test_a_login_sets_a_cookie_that_reads_the_api_and_changes_nothing(database: db.Database) -> None:
    async with serving(database) as client:
        assert await _login(client, "not-the-token") == (401, None)
        assert await _login(client, TOKEN, Origin="http://elsewhere.example") == (403, None)
        assert await _login(client, TOKEN, **{"Sec-Fetch-Site": "cross-site"}) == (403, None)
        status, behind = await _login(client, TOKEN, **{"Sec-Fetch-Site": "same-origin", "X-Forwarded-Proto": "https"})
        assert (status, behind["secure"]) == (204, True)  # a TLS proxy in front
        status, cookie = await _login(client, TOKEN, Origin=client.base)
        assert status == 204
        assert cookie["httponly"]
        assert cookie["samesite"] == "Strict"
        assert (cookie["path"], cookie["max-age"], cookie["secure"]) == ("/", str(page.LIFETIME), "")  # no TLS here
        assert TOKEN not in cookie.value
        assert await _with_cookie(client, "GET", "/v1/nodes", cookie.value) == 200
        assert await _with_cookie(client, "GET", "/v1/queue/summary", cookie.value) == 200
        assert await _with_cookie(client, "POST", "/v1/tenants/default/pause", cookie.value) == 401
        assert await _with_cookie(client, "POST", "/v1/suppressions", cookie.value) == 401
        expires, _, mac = cookie.value.partition(".")
        assert await _with_cookie(client, "GET", "/v1/nodes", f"{int(expires) + 3600}.{mac}") == 401  # made longer
        assert await _with_cookie(client, "GET", "/v1/nodes", page.cookie("another-token", int(expires))) == 401
        assert await _with_cookie(client, "GET", "/v1/nodes", page.cookie(TOKEN, 1)) == 401  # expired
        async with client.session.post(client.base + "/page/logout") as answer:
            assert answer.status == 204
            assert answer.cookies[page.COOKIE].value == ""


async def test_the_rate_per_minute_the_nodes_and_the_warmup(database: db.Database) -> None:
    now = datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0)
    counts = [("tenant", "shop", "shop", minute, 5, 1, 1), ("tenant", "news", "news", minute, 3, 0, 0),
              ("provider", "shop", "google", minute, 5, 1, 1),  # the same mail again, by provider: not counted twice
              ("tenant", "shop", "shop", minute - timedelta(minutes=2), 7, 0, 0),
              ("tenant", "shop", "shop", minute - timedelta(hours=2), 100, 0, 0)]  # fmt: skip
    for row in counts:
        await query(database, "INSERT INTO reputation_counts (scope, tenant, key, minute, delivered, deferred, bounced)"
                              " VALUES ($1, $2, $3, $4, $5, $6, $7)", *row)  # fmt: skip
    await nodes.register(database, "alive", now)
    await nodes.register(database, "gone", now - timedelta(minutes=5), delivers=False)
    await query(database, "INSERT INTO warmup (address, provider, day, day_started, sent, deferred, complaints,"
                          " updated_at) VALUES ('127.0.0.10', 'google', 3, $1, 40, 2, 0, $1)", now)  # fmt: skip
    await tenants.pause(database, "default", "checking", by="operator", now=now)
    async with serving(database) as client:
        status, rate = await client.call("GET", "/v1/rate?minutes=60")
        assert status == 200
        assert [(m["delivered"], m["deferred"], m["bounced"]) for m in rate["minutes"]] == [(7, 0, 0), (8, 1, 1)]
        assert datetime.fromisoformat(rate["minutes"][-1]["minute"]) == minute
        _, recent = await client.call("GET", "/v1/rate?minutes=1")
        assert [m["delivered"] for m in recent["minutes"]] == [8]
        for bad in ("minutes=0", "minutes=1441", "minutes=soon", "hours=1"):
            status, refused = await client.call("GET", f"/v1/rate?{bad}")
            assert (status, refused["field"]) == (400, bad.partition("=")[0])
        _, found = await client.call("GET", "/v1/nodes")
        assert {(n["id"], n["live"], n["delivers"]) for n in found["nodes"]} == {("alive", True, True),
                                                                                ("gone", False, False)}  # fmt: skip
        _, warming = await client.call("GET", "/v1/warmup")
        assert [(w["address"], w["provider"], w["day"], w["sent"]) for w in warming["warmup"]] == [
            ("127.0.0.10", "google", 3, 40)
        ]
        _, held = await client.call("GET", "/v1/suspensions")
        assert [(t["tenant"], t["paused_by"], t["paused_reason"]) for t in held["paused_tenants"]] == [
            ("default", "operator", "checking")
        ]
        _, by_state = await client.call("GET", "/v1/queue/summary?by=state")
        assert by_state["by"] == "state"


async def test_the_queue_overview_counts_as_the_summary_does(database: db.Database) -> None:
    async with serving(database) as client:
        for i in range(3):
            status, _ = await client.call("POST", "/v1/messages", json={
                "envelope_sender": "app@example.org", "recipients": [f"a{i}@one.test", f"b{i}@two.test"],
                "content": f"From: app@example.org\nSubject: {i}\n\nhello\n"})  # fmt: skip
            assert status == 202
        assert (await client.call("POST", "/v1/queue/hold", json={"domain": "two.test"}))[1]["count"] == 3
        _, overview = await client.call("GET", "/v1/queue/overview")
        _, by_state = await client.call("GET", "/v1/queue/summary?by=state")
        _, by_group = await client.call("GET", "/v1/queue/summary?by=provider")
        assert overview["total"]["states"] == {line["key"]: line["total"] for line in by_state["lines"]} == {
            "queued": 3, "held": 3}  # fmt: skip
        assert overview["total"]["total"] == by_state["total"]["total"] == 6
        assert overview["total"]["oldest"] == by_state["total"]["oldest"]
        assert [(g["key"], g["total"], g["states"]) for g in overview["groups"]] == [
            (line["key"], line["total"], {"queued": 3, "held": 3}) for line in by_group["lines"]
        ]
        assert (await client.call("GET", "/v1/queue/overview?by=state"))[0] == 400


async def test_the_queue_overview_is_counted_once_for_every_reader_a_while(database: db.Database) -> None:
    clock = [0.0]
    shared = status.Status(database, 30.0, clock=lambda: clock[0])
    async with serving(database) as client:
        first, same = await asyncio.gather(shared.queue({}), shared.queue({}))
        assert same is first  # one pass for both
        assert first["total"]["total"] == 0
        status_code, _ = await client.call("POST", "/v1/messages", json={
            "envelope_sender": "app@example.org", "recipients": ["a@one.test", "b@two.test"],
            "content": "From: app@example.org\nSubject: counted\n\nhello\n"})  # fmt: skip
        assert status_code == 202
        clock[0] = status.COUNTED_FOR - 0.1
        assert await shared.queue({}) is first  # as counted at its "now"
        clock[0] = status.COUNTED_FOR
        again = await shared.queue({})
        assert (again["total"]["total"], again["total"]["states"]) == (2, {"queued": 2})
        assert again["now"] > first["now"]
