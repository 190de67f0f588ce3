"""Open and click tracking, for the tenants that turn it on: the tokens of the links,
and a recipient's copy of a message with its HTML links and pixel rewritten.

A token names an open or a click of one delivery (and the tenant, so that an event
keeps it after the delivery's rows are gone); a click's carries the URL it goes to,
so that the redirect is only ever to a URL mtad signed (never an open redirect). It
ends with the first 12 bytes of an HMAC-SHA256 under a key derived from the
unsubscribe key; base64url without padding, canonical (a token reads only as it was
written). Signed, not encrypted: whoever holds the link can read the URL in it.

Only http and https links of <a> and <area> are rewritten: never mailto:, tel: or
an anchor, nor the message's List-Unsubscribe links, nor the text part. A message
whose HTML cannot be rewritten safely (html_parts.Untouched, html_links.Unsafe)
goes out as it came, and the attempt's event says why. Sync, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
from dataclasses import dataclass

from mtad.base import headers
from mtad.feedback import html_links, html_parts

MAC_BYTES = 12  # 96 bits a forger must guess for each link
MAX_TOKEN = 4096  # characters: longer is never one of ours (a URL is at most 2000)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_SCHEMES = ("http://", "https://")
_LIST_LINK = re.compile(rb"<([^<>]*)>")


class Kind(enum.Enum):
    OPEN = b"o"
    CLICK = b"c"


@dataclass(frozen=True, slots=True)
class Tracked:
    """What a token names: an open or a click of a delivery (the click's URL)."""

    kind: Kind
    delivery: int
    tenant: str
    url: str | None = None  # a click's


class Tokens:
    """Makes and reads tokens under one key (16 bytes or more). Sync, no I/O; a read never raises."""

    __slots__ = ("_hmac",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the tracking key must be at least 16 bytes")
        derived = hmac.new(key, b"mtad tracking token", hashlib.sha256).digest()  # its own, whatever else key signs
        self._hmac = hmac.new(derived, digestmod=hashlib.sha256)

    def make(self, kind: Kind, delivery: int, tenant: str, url: str | None = None) -> str:
        """kind octet, delivery (8 octets), tenant length octet, tenant, [the URL], MAC.
        ValueError for an empty or too long tenant, or a click without a URL."""
        name = tenant.encode()
        if not name or len(name) > 255:
            raise ValueError(f"a tenant of 1 to 255 octets, not {tenant!r}")
        if (kind is Kind.CLICK) != (url is not None):
            raise ValueError("a click's token carries its URL, an open's none")
        payload = kind.value + delivery.to_bytes(8, "big") + bytes([len(name)]) + name + (url or "").encode()
        return base64.urlsafe_b64encode(payload + self._mac(payload)).decode().rstrip("=")

    def read(self, token: str, kind: Kind) -> Tracked | None:
        """What a token of `kind` names, or None for anything `make` did not make under this key."""
        if not (isinstance(token, str) and len(token) <= MAX_TOKEN and token.isascii() and _BASE64URL.fullmatch(token)):
            return None
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            return None
        if base64.urlsafe_b64encode(raw).decode().rstrip("=") != token or len(raw) <= MAC_BYTES + 10:
            return None
        payload, mac = raw[:-MAC_BYTES], raw[-MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(payload)) or payload[:1] != kind.value:
            return None
        size = payload[9]
        name, rest = payload[10 : 10 + size], payload[10 + size :]
        try:
            tenant, url = name.decode(), rest.decode()
        except UnicodeDecodeError:
            return None
        if len(name) != size or not size or (kind is Kind.CLICK) != bool(url):
            return None
        return Tracked(kind, int.from_bytes(payload[1:9], "big"), tenant, url or None)

    def _mac(self, payload: bytes) -> bytes:
        mac = self._hmac.copy()
        mac.update(payload)
        return mac.digest()[:MAC_BYTES]


@dataclass(frozen=True, slots=True)
class Tracking:
    """What delivery does to a tracked tenant's mail: its HTML's links and pixel under
    `url` (the public https base of the endpoint) for each recipient. `unsubscribe`:
    the public base of the one-click links, never rewritten."""

    tokens: Tokens
    url: str
    unsubscribe: str | None = None

    def rewrite(self, message: bytes, delivery: int, tenant: str, *, opens: bool, clicks: bool) -> bytes:
        """The recipient's copy: each inline HTML part's http(s) links to /c/TOKEN
        (clicks), a 1x1 image of /o/TOKEN before its </body> (opens). Raises
        html_parts.Untouched (with why) when the message must go out as it came."""
        kept = self._kept(message[: headers.header_end(message)])

        def edit(text: str) -> str:
            try:
                found = html_links.find(text)
            except html_links.Unsafe as exc:
                raise html_parts.Untouched(str(exc)) from None
            edits = []
            if clicks:
                for link in found.links:
                    if self._tracked(link.url, kept):
                        token = self.tokens.make(Kind.CLICK, delivery, tenant, link.url)
                        edits.append((link.start, link.end, f'"{self.url}/c/{token}"'))
            if opens:
                image = f"{self.url}/o/{self.tokens.make(Kind.OPEN, delivery, tenant)}"
                edits.append((found.pixel_at, found.pixel_at, _PIXEL.format(src=image)))
            return html_links.replace(text, sorted(edits, key=lambda e: (e[0], e[1])))

        return html_parts.change(message, edit)

    def _kept(self, block: bytes) -> frozenset[str]:
        """The message's own List-Unsubscribe URLs: never rewritten."""
        field = headers.find(block, [b"list-unsubscribe"]).get(b"list-unsubscribe", b"")
        return frozenset(m.decode("latin-1").strip() for m in _LIST_LINK.findall(field))

    def _tracked(self, url: str, kept: frozenset[str]) -> bool:
        lower = url.lower()
        return (
            lower.startswith(_SCHEMES)
            and len(url) <= html_links.MAX_URL
            and url.isascii()
            and url.isprintable()
            and " " not in url
            and url not in kept
            and not url.startswith(f"{self.url}/")
            and not (self.unsubscribe is not None and url.startswith(f"{self.unsubscribe}/unsubscribe/"))
        )


_PIXEL = ('<img src="{src}" width="1" height="1" alt="" border="0" '
          'style="height:1px;width:1px;border:0;margin:0;padding:0">')  # fmt: skip
