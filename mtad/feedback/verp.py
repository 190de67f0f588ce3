"""VERP: the envelope sender of an MX delivery names the delivery, so that its
bounce comes back to mtad and says which delivery failed.

The address is `b-<delivery in hex>-<mac>@<bounce domain>`: the mac is the first
80 bits of an HMAC-SHA256 of the delivery id under the bounce key, in lower-case
base32 (receivers may change the case of a local part), so a forged bounce names
no delivery. The From header is untouched. The mailto of a List-Unsubscribe field
is `u-<delivery in hex>-<mac>@<bounce domain>` in the same way (a local part well
under 64 octets), so that an unsubscribe by mail names its delivery too. Sync, no I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass

from mtad.base import errors, vault
from mtad.feedback import settings

MAC_BYTES = 10  # 80 bits: a forger must guess them for each delivery
_TOKEN = re.compile(r"([bu])-([0-9a-f]{1,16})-([a-z2-7]{16})", re.I)


@dataclass(frozen=True, slots=True)
class Verp:
    """Envelope senders for a bounce domain, signed with `key` (32 bytes or more)."""

    domain: str
    key: bytes

    def __post_init__(self) -> None:
        if len(self.key) < 16:
            raise ValueError("the bounce key must be at least 16 bytes")

    def sender(self, delivery: int) -> str:
        """The envelope sender of `delivery`."""
        return self._address("b", delivery)

    def unsubscribe(self, delivery: int) -> str:
        """The address that unsubscribes the recipient of `delivery` (List-Unsubscribe's mailto)."""
        return self._address("u", delivery)

    def delivery(self, address: str) -> int | None:
        """The delivery a bounce address names, or None when it is not one of ours or
        its mac is wrong (a forged or mangled bounce)."""
        return self._named(address, "b")

    def unsubscribing(self, address: str) -> int | None:
        """The delivery an unsubscribe address names, or None (as `delivery`)."""
        return self._named(address, "u")

    def _address(self, kind: str, delivery: int) -> str:
        return f"{kind}-{delivery:x}-{self._mac(kind, delivery)}@{self.domain}"

    def _named(self, address: str, kind: str) -> int | None:
        local, at, domain = address.strip().strip("<>").rpartition("@")
        if not at or domain.lower().rstrip(".") != self.domain.lower():
            return None
        found = _TOKEN.fullmatch(local)
        if found is None or found.group(1).lower() != kind:
            return None
        delivery = int(found.group(2), 16)
        if not hmac.compare_digest(self._mac(kind, delivery), found.group(3).lower()):
            return None
        return delivery

    def _mac(self, kind: str, delivery: int) -> str:
        digest = hmac.new(self.key, f"{kind}-{delivery:x}".encode(), hashlib.sha256).digest()[:MAC_BYTES]
        return base64.b32encode(digest).decode().lower()


def configured(bounces: settings.Bounces) -> Verp | None:
    """The VERP senders of MX mail that [bounces] asks for (None: off)."""
    if bounces.domain is None or bounces.key_file is None:
        return None
    key = vault.hmac_key("bounces", bounces.key_file, bounces.make)
    try:
        return Verp(bounces.domain, key)
    except ValueError as exc:
        raise errors.ConfigError([f"[bounces] key_file: {exc}"]) from None
