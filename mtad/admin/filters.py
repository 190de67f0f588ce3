"""The queue's filters as the command line and the admin API are given them (text),
checked and made into `queue.Filters`: a value that is not one is a `BadParameter`
naming it (the API's 400), a name that names nothing is `names.Unknown` (did you mean).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime, timedelta

from mtad import db
from mtad.admin import names
from mtad.base import envelope, errors, values
from mtad.base.lifecycle import State
from mtad.spool import queue


class BadParameter(errors.UsageError):
    """A filter or paging value that is not one: `field` names it."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field = field


async def build(
    database: db.Database,
    *,
    now: datetime,
    configured: Callable[[], names.Configured],
    default_tenant: str,
    state: str | None = None,
    every: bool = False,
    tenant: str | None = None,
    provider: str | None = None,
    domain: str | None = None,
    older_than: str | None = None,
    fielded: bool = False,
) -> queue.Filters:
    """The filters given; `every`: every state (else what is pending, or `state`).
    `fielded`: an unknown name says which field gave it (the API)."""
    field = (lambda name: name) if fielded else (lambda name: None)
    states: tuple[str, ...] | None = None if every else queue.PENDING
    if state is not None:
        if state not in {s.value for s in State}:
            raise BadParameter("state", f"one of {', '.join(s.value for s in State)}")
        states = (state,)
    if tenant is not None:
        await names.tenant(database, tenant, default_tenant, field=field("tenant"))
    if provider is not None and provider != queue.NEVER:
        await names.group(database, provider, configured(), field=field("provider"))
    if domain is not None:
        try:
            domain = envelope.normalise_domain(domain)
        except errors.AddressError as exc:
            raise BadParameter("domain", exc.text) from None
    age = None
    if older_than is not None:
        try:
            age = timedelta(seconds=values.positive_duration(older_than))
        except ValueError as exc:
            raise BadParameter("older_than", f'a duration, e.g. "30m", "2h", "3d" ({exc})') from None
    return queue.Filters(states, tenant, provider, domain, age, now=now)


def cursor(after: int) -> str:
    """The opaque cursor of the page after delivery `after`. Sync, no I/O."""
    return base64.urlsafe_b64encode(f"d{after}".encode()).decode().rstrip("=")


def after(given: str | None) -> int:
    """The delivery id a cursor continues after (0: none given)."""
    if given is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(given + "=" * (-len(given) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = ""
    if not text.startswith("d") or not text[1:].isdigit():
        raise BadParameter("cursor", "not a cursor this API gave (next_cursor of a page)")
    return int(text[1:])
