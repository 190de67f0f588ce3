"""Webhook endpoints: where a tenant is told what became of its mail, and how each
request is signed.

An endpoint is a tenant's URL (http or https), the event kinds it wants (all when
none are named), and a secret in the Standard Webhooks form (`whsec_` and the
base64 of 32 random bytes) that is shown once, when it is made, and kept sealed by
mtad.base.vault (the key of [accounts]). A request carries `webhook-id`,
`webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`, made by the standardwebhooks package, so that a tenant
verifies it with that package in any language. `rotate` gives an endpoint a new
secret; the old one signs too (a second `v1,` signature) until the overlap ends.
An endpoint made with a batch above 1 gets up to that many events a request, as a
JSON array of the objects it would otherwise get one by one, signed once.
"""

from __future__ import annotations

import base64
import re
import secrets
import urllib.parse
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from standardwebhooks.webhooks import Webhook

from mtad import db
from mtad.base import errors, events, vault

TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # as tenants.name
PREFIX = "whsec_"
KINDS = frozenset(kind.value for kind in events.Kind)
MAX_BATCH = 1000  # events a request at most (the schema's CHECK says so too)
KEPT = 10_000  # opened secrets a Keyring keeps at most


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: int
    tenant: str
    url: str
    events: frozenset[str] | None  # None: every kind
    previous_until: datetime | None  # the previous secret signs too until then
    created_at: datetime
    batch: int = 1  # events a request at most; above 1 the body is a JSON array
    pending: int = 0  # its events not answered 2xx yet (`listing` counts them)
    delivered: int = 0
    dead: int = 0  # given up

    def wants(self, kind: str) -> bool:
        return self.events is None or kind in self.events


def new_secret() -> str:
    """A new endpoint secret, whsec_ and the base64 of 32 random bytes."""
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def check_url(url: str) -> str:
    """The URL if an endpoint may have it (http or https, a host, no credentials), else
    ValueError saying why. Where it points is checked when a request is made, after
    its name is resolved ([webhooks] allow_networks)."""
    parsed = urllib.parse.urlsplit(url.strip())
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"{url!r}: a webhook URL is http:// or https://")
    if not parsed.hostname:
        raise ValueError(f"{url!r}: a webhook URL names a host")
    if parsed.username is not None or parsed.password is not None:
        raise ValueError(f"{url!r}: a webhook URL carries no user or password (the signature authenticates)")
    return url.strip()


def check_kinds(kinds: Collection[str]) -> frozenset[str]:
    """The event kinds if every one is known, else ValueError naming those that are not."""
    unknown = sorted(set(kinds) - KINDS)
    if unknown:
        raise ValueError(f"unknown event kinds: {', '.join(unknown)} (known: {', '.join(sorted(KINDS))})")
    return frozenset(kinds)


async def add(
    database: db.Database,
    sealer: vault.Vault,
    tenant: str,
    url: str,
    kinds: Collection[str] | None = None,
    batch: int = 1,
) -> tuple[Endpoint, str]:
    """A new endpoint and its secret (shown once: only its sealed form is kept).
    ConfigError when the tenant's name, the URL, a kind or the batch is not one."""
    problems = []
    wanted = None
    if not TENANT.match(tenant):
        problems.append(f"{tenant!r} is not a tenant name")
    if not 1 <= batch <= MAX_BATCH:
        problems.append(f"a batch is 1 to {MAX_BATCH} events, not {batch}")
    try:
        url = check_url(url)
    except ValueError as exc:
        problems.append(str(exc))
    try:
        wanted = check_kinds(kinds) if kinds else None
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise errors.ConfigError(problems)
    secret = new_secret()
    row = await database.fetchrow("webhooks/insert", tenant, url, sorted(wanted) if wanted else None,
                                  sealer.seal(vault.Secret(secret)), batch)  # fmt: skip
    assert row is not None
    return endpoint_of(row), secret


async def listing(database: db.Database, tenant: str | None = None) -> list[Endpoint]:
    return [endpoint_of(row) for row in await database.fetch("webhooks/list", tenant)]


async def remove(database: db.Database, endpoint: int) -> bool:
    return bool(await database.fetchval("webhooks/remove", endpoint))


async def rotate(database: db.Database, sealer: vault.Vault, endpoint: int, until: datetime) -> str:
    """A new secret for the endpoint (returned, shown once); the one it had signs too
    until `until`. NotFound when there is no such endpoint."""
    secret = new_secret()
    if not await database.fetchval("webhooks/rotate", endpoint, sealer.seal(vault.Secret(secret)), until):
        raise errors.NotFound(f"no webhook endpoint {endpoint}")
    return secret


async def signers(database: db.Database, sealer: vault.Vault, endpoint: int, at: datetime) -> list[Webhook]:
    """What signs the endpoint's requests at `at`: its secret, and its previous one while
    that is valid. NotFound when there is no such endpoint."""
    row = await database.fetchrow("webhooks/secrets", endpoint, at)
    if row is None:
        raise errors.NotFound(f"no webhook endpoint {endpoint}")
    return Keyring(sealer).signers(row["secret"], row["previous_secret"])


class Keyring:
    """The endpoints' secrets opened, kept by their sealed form (a rotation seals a new
    one), so that each is opened once. Sync, no I/O."""

    def __init__(self, sealer: vault.Vault) -> None:
        self._sealer = sealer
        self._opened: dict[bytes, Webhook] = {}

    def signers(self, secret: bytes, previous: bytes | None = None) -> list[Webhook]:
        """What signs with the sealed `secret`, and with `previous` too when given."""
        return [self._open(secret), *([self._open(previous)] if previous is not None else [])]

    def _open(self, sealed: bytes) -> Webhook:
        sealed = bytes(sealed)
        found = self._opened.get(sealed)
        if found is None:
            if len(self._opened) >= KEPT:
                self._opened.clear()
            found = self._opened[sealed] = Webhook(self._sealer.open(sealed).reveal())
        return found


def headers(signing: Sequence[Webhook], message_id: str, at: datetime, body: str) -> dict[str, str]:
    """The Standard Webhooks headers of one request: a signature by each signer."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": " ".join(signer.sign(message_id, at, body) for signer in signing),
    }


def endpoint_of(row: db.Row) -> Endpoint:
    """An endpoint as webhooks/list.sql reads it."""
    kinds = frozenset(row["events"]) if row["events"] is not None else None
    return Endpoint(row["id"], row["tenant"], row["url"], kinds, row["previous_until"], row["created_at"], row["batch"],
                    row["pending"], row["delivered"], row["dead"])  # fmt: skip
