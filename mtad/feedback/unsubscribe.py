"""List-Unsubscribe (RFC 2369) with one-click (RFC 8058): the tokens that name a
subscriber, the two header fields, and the HTTP endpoint that takes the click.

A token carries the tenant, the recipient address (lower case) and the message
id (or none), followed by the first 12 bytes (96 bits) of an HMAC-SHA256 of them
under a key derived from the unsubscribe key: it is signed, not encrypted (whoever
holds the link can read the address in it). One payload, two encodings, each
canonical (a token reads only as it was written): base64url without padding for
the URL (`make`, `read`; case matters, as URLs keep it), and lower-case base32
without padding for a mailto local part (`make_mailto_token`, `read_mailto_token`;
any case reads, since mail systems may change a local part's case). A token is
1.33 (base64url) or 1.6 (base32) characters per octet of payload: a tenant of 8
octets, an address of 25 and a message id make 84 or 101 characters.

`add_fields` puts both fields at the top of a spooled message (bytes, CRLF), and
`app` serves /unsubscribe/{token}: POST is the one click (the subscriber goes to
`suppress`), GET a confirmation page whose form makes that POST. GET never
unsubscribes: mail scanners follow links.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import html
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog
from aiohttp import http_exceptions, web
from aiohttp.typedefs import Handler

from mtad import db
from mtad.base import errors, headers, vault
from mtad.feedback import settings, signals, suppression

log = structlog.get_logger("mtad.unsubscribe")

MAC_BYTES = 12  # 96 bits a forger must guess for each subscriber
MAX_TOKEN = 1024  # characters: longer is never one of ours (an address is at most 254 octets)
MAILTO_LOCAL = "unsubscribe"  # the mailto address is unsubscribe+<base32 token>@<domain>
FOLD_AT = 78  # octets a header line should not exceed (RFC 5322 2.1.1), CRLF aside
MAX_LINE = 998  # octets a header line must not exceed, CRLF aside
MAX_BODY = 64 * 1024  # octets of a request body at most
ONE_CLICK = ("List-Unsubscribe", "One-Click")  # the form field of an RFC 8058 POST

_WITH_MESSAGE, _WITHOUT_MESSAGE = 1, 2  # the first octet of a payload
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_BASE32 = re.compile(r"[A-Za-z2-7]+")
_NOT_IN_A_LINK = frozenset(' <>"')


@dataclass(frozen=True, slots=True)
class Subscriber:
    """Who a token names: a recipient of a tenant, and the message they had (None: not said)."""

    tenant: str
    address: str  # lower case
    message: uuid.UUID | None


class Tokens:
    """Makes and reads tokens under one key (16 bytes or more). Sync, no I/O; a read
    never raises."""

    __slots__ = ("_hmac",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the unsubscribe key must be at least 16 bytes")
        # A key of its own, whatever else `key` signs.
        derived = hmac.new(key, b"mtad unsubscribe token", hashlib.sha256).digest()
        self._hmac = hmac.new(derived, digestmod=hashlib.sha256)

    def make(self, tenant: str, address: str, message: uuid.UUID | None) -> str:
        """The URL token (base64url) of a subscriber; ValueError for an address that is
        not one or too long, or an empty or too long tenant."""
        return _b64(self._seal(_pack(tenant, address, message)))

    def read(self, token: str) -> Subscriber | None:
        """The subscriber of a URL token, or None for anything not made by `make` under this key."""
        if not _matches(_BASE64URL, token):
            return None
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            return None
        return self._open(raw) if _b64(raw) == token else None

    def make_mailto_token(self, tenant: str, address: str, message: uuid.UUID | None) -> str:
        """The mailto token (lower-case base32) of a subscriber; ValueError as `make`."""
        return _b32(self._seal(_pack(tenant, address, message)))

    def read_mailto_token(self, token: str) -> Subscriber | None:
        """The subscriber of a mailto token in any case, or None for anything not made by
        `make_mailto_token` under this key."""
        if not _matches(_BASE32, token):
            return None
        token = token.lower()
        try:
            raw = base64.b32decode(token.upper() + "=" * (-len(token) % 8))
        except (binascii.Error, ValueError):
            return None
        return self._open(raw) if _b32(raw) == token else None

    def mailto(self, domain: str, tenant: str, address: str, message: uuid.UUID | None) -> str:
        """The address to write to: unsubscribe+<mailto token>@domain."""
        return f"{MAILTO_LOCAL}+{self.make_mailto_token(tenant, address, message)}@{domain}"

    def read_mailto(self, recipient: str) -> Subscriber | None:
        """The subscriber an unsubscribe+<token>@... recipient names (any domain: the
        caller knows which are its own), or None."""
        local, at, _ = recipient.strip().strip("<>").rpartition("@")
        name, plus, token = local.partition("+")
        if not at or not plus or name.lower() != MAILTO_LOCAL:
            return None
        return self.read_mailto_token(token)

    def _mac(self, payload: bytes) -> bytes:
        mac = self._hmac.copy()
        mac.update(payload)
        return mac.digest()[:MAC_BYTES]

    def _seal(self, payload: bytes) -> bytes:
        return payload + self._mac(payload)

    def _open(self, raw: bytes) -> Subscriber | None:
        if len(raw) <= MAC_BYTES:
            return None
        payload, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
        return _unpack(payload) if hmac.compare_digest(mac, self._mac(payload)) else None


def _pack(tenant: str, address: str, message: uuid.UUID | None) -> bytes:
    """form octet, [message id: 16 octets], tenant length octet, tenant, address (UTF-8)."""
    name = tenant.encode()
    if not name or len(name) > 255:
        raise ValueError(f"a tenant of 1 to 255 octets, not {tenant!r}")
    mailbox = suppression.check_address(address).encode()
    if len(mailbox) > 254:
        raise ValueError(f"an address of at most 254 octets, not {address!r}")
    head = bytes([_WITHOUT_MESSAGE]) if message is None else bytes([_WITH_MESSAGE]) + message.bytes
    return head + bytes([len(name)]) + name + mailbox


def _unpack(payload: bytes) -> Subscriber | None:
    """The subscriber of a payload that `_pack` made (None for anything else)."""
    message = None
    if payload[:1] == bytes([_WITH_MESSAGE]) and len(payload) > 17:
        message, rest = uuid.UUID(bytes=payload[1:17]), payload[17:]
    elif payload[:1] == bytes([_WITHOUT_MESSAGE]):
        rest = payload[1:]
    else:
        return None
    size = rest[0] if rest else 0
    name, mailbox = rest[1 : 1 + size], rest[1 + size :]
    if not size or len(name) != size or not mailbox:
        return None
    try:
        return Subscriber(name.decode(), mailbox.decode(), message)
    except UnicodeDecodeError:
        return None


def _matches(alphabet: re.Pattern[str], token: object) -> bool:
    return isinstance(token, str) and len(token) <= MAX_TOKEN and token.isascii() and bool(alphabet.fullmatch(token))


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _b32(raw: bytes) -> str:
    return base64.b32encode(raw).decode().rstrip("=").lower()


# The header fields.


def fields(url: str, mailto: str | None = None) -> bytes:
    """The List-Unsubscribe field (`<url>`, then `<mailto:...>` when given, folded
    between the two when one line would pass 78 octets: RFC 2369 forbids white
    space inside the brackets) and List-Unsubscribe-Post, CRLF after each. The URL
    must be https (RFC 8058); the mailto an address, with or without `mailto:`.
    ValueError for anything else, or for a line that would pass 998 octets."""
    links = [f"<{_link(url, 'https://')}>"]
    if mailto:
        uri = mailto if mailto.startswith("mailto:") else f"mailto:{mailto}"
        links.append(f"<{_link(uri, 'mailto:')}>")
    field = headers.field("List-Unsubscribe", ", ".join(links))
    if len(field) - len(headers.CRLF) > FOLD_AT:
        field = headers.fold("List-Unsubscribe", [f"{links[0]},", *links[1:]] if mailto else links)
    if any(len(line) > MAX_LINE for line in field.split(headers.CRLF)):
        raise ValueError(f"a List-Unsubscribe line would pass {MAX_LINE} octets")
    return field + headers.field("List-Unsubscribe-Post", "=".join(ONE_CLICK))


def _link(uri: str, scheme: str) -> str:
    """The URI as it may stand between angle brackets; ValueError when it may not."""
    if not uri.startswith(scheme) or len(uri) == len(scheme):
        raise ValueError(f"a {scheme} URI, not {uri!r}")
    if not (uri.isascii() and uri.isprintable()) or not _NOT_IN_A_LINK.isdisjoint(uri):
        raise ValueError(f"{uri!r} has a character a URI may not have (percent-encode it)")
    return uri


def add_fields(message: bytes, url: str, mailto: str | None = None) -> bytes:
    """The message with `fields(url, mailto)` at the top of its header block, unless it
    has a List-Unsubscribe field of its own (then it comes back as it is, with any
    List-Unsubscribe-Post it has). A List-Unsubscribe-Post without List-Unsubscribe
    is replaced. A header block that is not CRLF throughout (an LF-only message) or
    that starts with a folded line also comes back as it is: mtad spools neither.
    Only the header block is scanned; ValueError as `fields`. Sync, no I/O."""
    added = fields(url, mailto)
    end = headers.header_end(message)
    block = message[:end]
    if message[:1] in (b" ", b"\t") or headers.has_bare_line_ending(block):
        return message
    if headers.find(block, [b"list-unsubscribe"]):
        return message
    block, _ = headers.remove(block, [b"list-unsubscribe-post"])
    return added + block + message[end:]


# The HTTP endpoint.

Suppress = Callable[[Subscriber, datetime], Awaitable[None]]

_PRIVATE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Robots-Tag": "noindex"}
_PAGE_HEADERS = {**_PRIVATE, "Content-Security-Policy": "default-src 'none'; form-action 'self'"}
_FORMS = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})
# What aiohttp raises on a malformed form (bad multipart headers, boundary, encoding, not UTF-8).
_MALFORMED = (ValueError, RuntimeError, TypeError, http_exceptions.HttpProcessingError)
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="robots" content="noindex">
<meta name="viewport" content="width=device-width"><title>Unsubscribe</title></head>
<body><form method="post" action="{action}">
<p>Stop sending emails like this one to {address}?</p>
<input type="hidden" name="{name}" value="{value}">
<button type="submit">Unsubscribe</button>
</form></body></html>
"""


@dataclass(frozen=True, slots=True)
class Unsubscribing:
    """What delivery adds to a tenant's mail: the one-click link under `url` (the
    endpoint's public https base) for each recipient."""

    tokens: Tokens
    url: str

    def fields(self, tenant: str, address: str, message: uuid.UUID, body: bytes, mailto: str | None = None) -> bytes:
        """The body with the recipient's List-Unsubscribe fields (a message with its own
        keeps them); `mailto`: the address that unsubscribes by mail, when there is one."""
        return add_fields(body, f"{self.url}/unsubscribe/{self.tokens.make(tenant, address, message)}", mailto)


async def record(database: db.Database, subscriber: Subscriber, at: datetime) -> None:
    """The `suppress` of the daemon: an unsubscribed event for the subscriber (the
    suppression consumer adds the address to the tenant's list), once per delivery:
    a POST replayed is answered alike and records nothing new (signals.record)."""
    await signals.record(database, signals.Signal(signals.Kind.UNSUBSCRIBED, subscriber.address, at,
                                                  message=subscriber.message, tenant=subscriber.tenant,
                                                  data={"via": "one-click"}))  # fmt: skip


def app(tokens: Tokens, suppress: Suppress, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> web.Application:
    """The endpoint: POST /unsubscribe/{token} with List-Unsubscribe=One-Click calls
    `suppress` (again on each POST: it must be idempotent, as `record` is) and answers 200
    "unsubscribed"; GET /unsubscribe/{token} answers the page that makes that POST.
    A bad token or a POST without the one-click field: 400; another path: 404, another
    method: 405; a body over 64 KiB: 413; `suppress` raising SpoolError: 503. Every
    error is a JSON body {"error": "..."}."""
    routes = _Routes(tokens, suppress, now)
    application = web.Application(client_max_size=MAX_BODY, middlewares=[_errors_as_json])
    application.router.add_post("/unsubscribe/{token}", routes.post)
    application.router.add_get("/unsubscribe/{token}", routes.get)
    return application


class _Routes:
    def __init__(self, tokens: Tokens, suppress: Suppress, now: Callable[[], datetime]) -> None:
        self._tokens = tokens
        self._suppress = suppress
        self._now = now

    async def post(self, request: web.Request) -> web.Response:
        subscriber = self._tokens.read(request.match_info["token"])
        if subscriber is None:
            return _error(400, "this unsubscribe link is not valid")
        if not await _one_click(request):
            return _error(400, "the body must be List-Unsubscribe=One-Click (RFC 8058), as a form")
        await self._suppress(subscriber, self._now())
        log.info("unsubscribed", tenant=subscriber.tenant, message=str(subscriber.message))
        return web.Response(text="unsubscribed\n", headers=_PRIVATE)

    async def get(self, request: web.Request) -> web.Response:
        token = request.match_info["token"]
        subscriber = self._tokens.read(token)
        if subscriber is None:
            return _error(400, "this unsubscribe link is not valid")
        page = _PAGE.format(action=html.escape(token), address=html.escape(subscriber.address),
                            name=ONE_CLICK[0], value=ONE_CLICK[1])  # fmt: skip
        return web.Response(text=page, content_type="text/html", headers=_PAGE_HEADERS)


async def _one_click(request: web.Request) -> bool:
    """Whether the body is a form with List-Unsubscribe=One-Click (413 past MAX_BODY)."""
    if request.content_type not in _FORMS:
        return False
    try:
        form = await request.post()
    except _MALFORMED:
        return False
    return ONE_CLICK[1] in form.getall(ONE_CLICK[0], [])


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own errors (404, 405, 413) and a failed `suppress` as JSON bodies."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        return _error(exc.status, exc.reason.lower(), allow)
    except errors.SpoolError as exc:
        log.warning("unsubscribe_not_recorded", error=str(exc))
        return _error(503, "the unsubscribe could not be recorded now: try again later")


def _error(status: int, why: str, extra: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": why}, status=status, headers={**_PRIVATE, **(extra or {})})


def tokens(unsubscribing: settings.Unsubscribe) -> Tokens | None:
    """The tokens of the unsubscribe links that [unsubscribe] names a key for (None:
    neither links nor the endpoint)."""
    found = key(unsubscribing)
    return Tokens(found) if found is not None else None


def key(unsubscribing: settings.Unsubscribe) -> bytes | None:
    """The key [unsubscribe] names (None: none), which signs the tracking tokens too."""
    if unsubscribing.key_file is None:
        return None
    try:
        return vault.hmac_key("unsubscribe", unsubscribing.key_file, unsubscribing.make)
    except ValueError as exc:
        raise errors.ConfigError([f"[unsubscribe] key_file: {exc}"]) from None
