"""The tracking endpoints, served by the public unsubscribe listener: GET /o/{token}
records an `opened` event and answers a 1x1 GIF; GET /c/{token} records a
`clicked` event and redirects (302) to the URL the token carries, and to no other.
A token that is not one of ours (tampered, or of the other kind) gets 400 and
records nothing. A fetch that a machine made is recorded with "machine": true and
why (feedback.machines). What is recorded: the time, the delivery (its message,
recipient and tenant), the URL of a click, the User-Agent (its first 200
characters) and the machine's mark; never the client's address."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import structlog
from aiohttp import web

from mtad import db
from mtad.base import errors, values
from mtad.feedback import machines, settings, signals, unsubscribe
from mtad.feedback.tracking import Kind, Tokens, Tracked, Tracking

log = structlog.get_logger("mtad.tracking")

AGENT_KEPT = 200  # characters of a User-Agent recorded
# The smallest transparent GIF: 1x1, one colour.
PIXEL = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
_NO_CACHE = {
    "Cache-Control": "no-store, no-cache, must-revalidate, max-age=0",
    "Pragma": "no-cache",
    "Expires": "0",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex",
}

Record = Callable[[Tracked, machines.Fetch], Awaitable[None]]


def configured(tracking: settings.Tracking, unsubscribing: settings.Unsubscribe) -> Tracking | None:
    """What delivery does to tracked mail, when [tracking] names a url (and the
    unsubscribe key is there to sign its tokens); None: no tracking on this node."""
    key = unsubscribe.key(unsubscribing) if tracking.url is not None else None
    if tracking.url is None or key is None:
        return None
    return Tracking(Tokens(key), tracking.url, unsubscribing.url)


def add_routes(
    application: web.Application, tokens: Tokens, record: Record,
    proxies: Sequence[values.Network] = (), now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:  # fmt: skip
    """GET (and HEAD) /o/{token} and /c/{token} on `application` (the unsubscribe
    endpoint's: its middleware answers errors as JSON). `record` is called once per
    request of a valid token; when it raises SpoolError the answer is the same (the
    image, the redirect) and nothing is recorded."""
    routes = _Routes(tokens, record, tuple(proxies), now)
    application.router.add_get("/o/{token}", routes.opened)
    application.router.add_get("/c/{token}", routes.clicked)


class _Routes:
    def __init__(self, tokens: Tokens, record: Record, proxies: tuple[values.Network, ...],
                 now: Callable[[], datetime]) -> None:  # fmt: skip
        self._tokens = tokens
        self._record = record
        self._proxies = proxies
        self._now = now

    async def opened(self, request: web.Request) -> web.Response:
        tracked = self._tokens.read(request.match_info["token"], Kind.OPEN)
        if tracked is None:
            return _invalid()
        await self._recorded(request, tracked)
        return web.Response(body=PIXEL, content_type="image/gif", headers=_NO_CACHE)

    async def clicked(self, request: web.Request) -> web.Response:
        tracked = self._tokens.read(request.match_info["token"], Kind.CLICK)
        if tracked is None or tracked.url is None:
            return _invalid()
        await self._recorded(request, tracked)
        return web.Response(status=302, headers={**_NO_CACHE, "Location": tracked.url})

    async def _recorded(self, request: web.Request, tracked: Tracked) -> None:
        fetch = machines.Fetch(tracked.kind, self._now(), _client(request, self._proxies),
                               request.headers.get("User-Agent", ""), head=request.method == "HEAD")  # fmt: skip
        try:
            await self._record(tracked, fetch)
        except errors.SpoolError as exc:
            log.warning("tracking_not_recorded", kind=tracked.kind.name.lower(), delivery=tracked.delivery,
                        error=str(exc))  # fmt: skip


def _invalid() -> web.Response:
    return web.json_response({"error": "this link is not valid"}, status=400, headers=_NO_CACHE)


def _client(request: web.Request, proxies: tuple[values.Network, ...]) -> str | None:
    """The client's address: the peer's, or behind a proxy of `proxies`, the last
    address of X-Forwarded-For that is not one of them."""
    address = request.remote
    if not proxies or address is None or not machines.within(address, proxies):
        return address
    for hop in reversed(",".join(request.headers.getall("X-Forwarded-For", [])).split(",")):
        hop = hop.strip()
        if hop and not machines.within(hop, proxies):
            return hop
    return address


async def record(database: db.Database, rules: settings.Tracking, tracked: Tracked, fetch: machines.Fetch) -> None:
    """The daemon's `record`: an opened or clicked event of the delivery, marked as a
    machine's when machines.machine says so. One event per request: a person who
    opens a message twice opens it twice."""
    row = await database.fetchrow("feedback/tracked", tracked.delivery)
    if row is not None:
        fetch = machines.Fetch(fetch.kind, fetch.at, fetch.address, fetch.user_agent, fetch.head,
                               row["delivered_at"], row["last_click"])  # fmt: skip
    why = machines.machine(fetch, rules)
    data: dict[str, Any] = {"machine": why is not None, "user_agent": fetch.user_agent[:AGENT_KEPT]}
    if why is not None:
        data["machine_why"] = why
    if tracked.url is not None:
        data["url"] = tracked.url
    if row is None:
        data["delivery"] = tracked.delivery  # its rows are gone (retention): the event keeps its id
    kind = signals.Kind.OPENED if tracked.kind is Kind.OPEN else signals.Kind.CLICKED
    await signals.record(database, signals.Signal(
        kind, row["recipient"] if row is not None else "", fetch.at, message=row["message"] if row else None,
        delivery=tracked.delivery if row is not None else None, tenant=tracked.tenant, data=data))  # fmt: skip
