"""The one-click unsubscribe endpoint over a real socket, against real PostgreSQL: a
good POST records an unsubscribe and the suppression consumer suppresses the
address; a bad token, a GET, or a POST without the one-click body records nothing."""

from __future__ import annotations

import asyncio
import functools
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
import pytest
from yarl import URL

from mtad import db
from mtad.base import errors, http
from mtad.base.endpoints import HostPort
from mtad.feedback import consumers, suppression, unsubscribe
from mtad.feedback.suppression import Reason
from tests.integration.delivering import accept, new_message
from tests.pg import query

TOKENS = unsubscribe.Tokens(b"k" * 32)
ONE_CLICK = {"List-Unsubscribe": "One-Click"}


@dataclass
class Endpoint:
    base: str  # http://127.0.0.1:<port>
    client: aiohttp.ClientSession

    def url(self, token: str) -> str:
        return f"{self.base}/unsubscribe/{token}"


@pytest.fixture
async def endpoint(database: db.Database) -> AsyncIterator[Endpoint]:
    listener = http.Listener(unsubscribe.app(TOKENS, functools.partial(unsubscribe.record, database)))
    await listener.start([HostPort("127.0.0.1", 0)])
    [where] = listener.addresses
    try:
        async with aiohttp.ClientSession() as client:
            yield Endpoint(f"http://{where.host}:{where.port}", client)
    finally:
        await listener.stop()


async def unsubscribes(database: db.Database) -> list[tuple[str | None, uuid.UUID | None, str]]:
    rows = await query(database, "SELECT tenant, message, data->>'recipient' AS r FROM events "
                                 "WHERE kind = 'unsubscribed' ORDER BY id")  # fmt: skip
    return [(r["tenant"], r["message"], r["r"]) for r in rows]


async def test_one_click_records_an_unsubscribe_and_the_address_is_suppressed(
    database: db.Database, endpoint: Endpoint
) -> None:
    sent = new_message("Reader@Example.com")
    await accept(database, sent)
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()  # a new consumer starts after the events already there
    token = TOKENS.make("t1", "Reader@Example.com", sent.id)
    async with endpoint.client.post(endpoint.url(token), data=ONE_CLICK) as response:
        assert (response.status, await response.text()) == (200, "unsubscribed\n")
        assert response.content_type == "text/plain"
        assert response.headers["Cache-Control"] == "no-store"
    assert await unsubscribes(database) == [("t1", sent.id, "reader@example.com")]
    [via] = await query(database, "SELECT data->>'via' AS via FROM events WHERE kind = 'unsubscribed'")
    assert via["via"] == "one-click"

    again = aiohttp.FormData(ONE_CLICK, default_to_multipart=True)  # the other form encoding RFC 8058 allows
    async with endpoint.client.post(endpoint.url(token), data=again) as response:
        assert (response.status, await response.text()) == (200, "unsubscribed\n")
    assert len(await unsubscribes(database)) == 1  # answered as the first was; recorded once

    assert await consuming.catch_up() == 1
    [entry] = await suppression.entries(database, "t1")
    assert (entry.address, entry.reason) == ("reader@example.com", Reason.UNSUBSCRIBE)
    assert await suppression.entries(database, suppression.GLOBAL) == []


async def test_a_replayed_click_is_recorded_once_per_delivery(database: db.Database, endpoint: Endpoint) -> None:
    first, second = new_message("reader@example.com"), new_message("reader@example.com")
    await accept(database, first, second)

    async def click(token: str) -> None:
        async with endpoint.client.post(endpoint.url(token), data=ONE_CLICK) as response:
            assert (response.status, await response.text()) == (200, "unsubscribed\n")

    replayed = TOKENS.make("t1", "Reader@Example.com", first.id)
    await asyncio.gather(*(click(replayed) for _ in range(4)))  # at once: no two record
    await click(replayed)
    await click(TOKENS.make("t1", "reader@example.com", second.id))  # another delivery's link: its own
    await click(TOKENS.make("t1", "reader@example.com", second.id))
    await click(TOKENS.make("t2", "reader@example.com", None))  # without a message: once per tenant and address
    await click(TOKENS.make("t2", "reader@example.com", None))
    assert sorted(await unsubscribes(database), key=str) == sorted(
        [("t1", first.id, "reader@example.com"), ("t1", second.id, "reader@example.com"),
         ("t2", None, "reader@example.com")], key=str)  # fmt: skip


async def test_a_token_without_a_message_names_its_tenant_and_address(
    database: db.Database, endpoint: Endpoint
) -> None:
    async with endpoint.client.post(endpoint.url(TOKENS.make("t2", "x@example.net", None)), data=ONE_CLICK) as r:
        assert r.status == 200
    assert await unsubscribes(database) == [("t2", None, "x@example.net")]


def changed(token: str, at: int) -> str:
    """The token with the character at `at` replaced by another."""
    return token[:at] + ("B" if token[at] != "B" else "C") + token[at:][1:]


@pytest.mark.parametrize(
    "token",
    [
        TOKENS.make("t1", "reader@example.com", None)[:-1],  # truncated
        changed(TOKENS.make("t1", "reader@example.com", None), -3),  # in its mac
        changed(TOKENS.make("t1", "reader@example.com", None), 5),  # in its tenant
        unsubscribe.Tokens(b"x" * 32).make("t1", "reader@example.com", None),  # another key
        TOKENS.make_mailto_token("t1", "reader@example.com", None),  # the mailto form
        "nothing",
    ],
)
async def test_a_bad_token_is_refused_and_records_nothing(
    database: db.Database, endpoint: Endpoint, token: str
) -> None:
    for method in ("POST", "GET"):
        async with endpoint.client.request(method, endpoint.url(token), data=ONE_CLICK) as response:
            assert response.status == 400
            assert response.content_type == "application/json"
            assert (await response.json()) == {"error": "this unsubscribe link is not valid"}
    assert await unsubscribes(database) == []


async def test_the_page_posts_one_click_and_get_never_unsubscribes(database: db.Database, endpoint: Endpoint) -> None:
    token = TOKENS.make("t1", "Reader@Example.com", None)
    async with endpoint.client.get(endpoint.url(token)) as response:
        assert response.status == 200
        assert response.content_type == "text/html"
        page = await response.text()
    assert await unsubscribes(database) == []
    assert "<script" not in page.lower()
    assert "reader@example.com" in page
    form = re.search(r'<form method="post" action="([^"]+)">', page)
    assert form is not None
    assert '<input type="hidden" name="List-Unsubscribe" value="One-Click">' in page
    # What a browser does with the form: post its fields, urlencoded, to the action relative to the page.
    action = str(response.url.join(URL(form.group(1))))
    assert action == endpoint.url(token)
    async with endpoint.client.post(action, data={"List-Unsubscribe": "One-Click"}) as response:
        assert response.status == 200
    assert await unsubscribes(database) == [("t1", None, "reader@example.com")]


@pytest.mark.parametrize(
    "body",
    [
        {},  # no body
        {"data": {"List-Unsubscribe": "one-click"}},
        {"data": {"Unsubscribe": "One-Click"}},
        {"json": ONE_CLICK},
        {"data": b"List-Unsubscribe=One-Click", "headers": {"Content-Type": "text/plain"}},
        {"data": b"--x\r\nbroken", "headers": {"Content-Type": "multipart/form-data; boundary=x"}},
        {"data": b"List-Unsubscribe=One-Click\xff", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
    ],
)
async def test_a_post_without_the_one_click_body_is_refused(
    database: db.Database, endpoint: Endpoint, body: dict[str, Any]
) -> None:
    async with endpoint.client.post(endpoint.url(TOKENS.make("t1", "a@example.com", None)), **body) as response:
        assert response.status == 400
        assert "List-Unsubscribe=One-Click" in (await response.json())["error"]
    assert await unsubscribes(database) == []


async def test_other_paths_methods_and_big_bodies_answer_json(database: db.Database, endpoint: Endpoint) -> None:
    token = TOKENS.make("t1", "a@example.com", None)
    cases = [
        ("GET", f"{endpoint.base}/", None, 404),
        ("POST", f"{endpoint.base}/unsubscribe/", ONE_CLICK, 404),
        ("POST", f"{endpoint.url(token)}/more", ONE_CLICK, 404),
        ("PUT", endpoint.url(token), ONE_CLICK, 405),
        ("POST", endpoint.url(token), {"List-Unsubscribe": "One-Click", "pad": "x" * (65 * 1024)}, 413),
    ]
    for method, url, data, status in cases:
        async with endpoint.client.request(method, url, data=data) as response:
            assert (response.status, response.content_type) == (status, "application/json"), (method, url)
            assert set(await response.json()) == {"error"}
            assert len(await response.read()) < 200
    assert await unsubscribes(database) == []


async def test_a_failed_record_answers_503(endpoint: Endpoint) -> None:
    async def down(subscriber: unsubscribe.Subscriber, at: datetime) -> None:
        raise errors.DatabaseUnavailable("connection refused")

    listener = http.Listener(unsubscribe.app(TOKENS, down))
    await listener.start([HostPort("127.0.0.1", 0)])
    try:
        [where] = listener.addresses
        url = f"http://127.0.0.1:{where.port}/unsubscribe/{TOKENS.make('t1', 'a@example.com', None)}"
        async with endpoint.client.post(url, data=ONE_CLICK) as response:
            assert response.status == 503
            assert "try again later" in (await response.json())["error"]
    finally:
        await listener.stop()


async def test_a_listener_binds_every_address_or_none() -> None:
    listener = http.Listener(unsubscribe.app(TOKENS, _never))
    await listener.start([HostPort("127.0.0.1", 0), HostPort("127.0.0.1", 0)])
    assert len({a.port for a in listener.addresses}) == 2
    taken = listener.addresses[0]
    other = http.Listener(unsubscribe.app(TOKENS, _never))
    with pytest.raises(OSError):
        await other.start([HostPort("127.0.0.1", 0), taken])
    assert other.addresses == []
    await other.stop()
    await listener.stop()
    assert listener.addresses == []


async def _never(subscriber: unsubscribe.Subscriber, at: datetime) -> None:
    raise AssertionError("not called")
