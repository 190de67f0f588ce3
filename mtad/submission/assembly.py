"""What an accepted message looks like in the spool: the bytes as received with
a Received header on top, a Message-ID and a Date at the end of the header block
when the client gave none (made once here, reused on every delivery attempt),
the key that recognises a resubmission, and the message's priority, source IP
pool, account pool and campaign. Sync, no I/O.

A message instructs mtad with four header fields, which are removed before it is
stored (they never reach a recipient):

    X-Mtad-Priority: 20             a whole number from -100 to 100; higher goes first
    X-Mtad-Pool: bulk               a configured source IP pool ([pools.bulk])
    X-Mtad-Account-Pool: outreach   a configured account pool ([account_pools.outreach]):
                                    relayed through its sending mailboxes, not sent to MX
    X-Mtad-Campaign: spring-sale    the tenant's campaign (mtad.spool.campaigns.NAME),
                                    made on first use

Without X-Mtad-Priority the standard Priority field (RFC 2156: urgent, normal,
non-urgent) sets the priority, kept as it is in the message; without either, the
tenant's default ([tenants."NAME"] priority, else 0). Without X-Mtad-Pool the
tenant's default pool, else none (delivery then picks the route's or the default).
Without X-Mtad-Account-Pool the tenant's account pool, else none (delivery then
relays through the route's account pool, if it has one, else sends to MX).
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mtad.base import headers, replies
from mtad.base.envelope import Address
from mtad.base.replies import Reply
from mtad.spool import campaigns, commit
from mtad.submission import settings

MIN_PRIORITY, MAX_PRIORITY = settings.MIN_PRIORITY, settings.MAX_PRIORITY
# RFC 2156 section 5.3.6 Priority values, as MUAs write them; any other is ignored.
STANDARD_PRIORITIES = {b"urgent": 50, b"normal": 0, b"non-urgent": -50}

_PRIORITY = b"x-mtad-priority"
_POOL = b"x-mtad-pool"
_ACCOUNT_POOL = b"x-mtad-account-pool"
_CAMPAIGN = b"x-mtad-campaign"
_INSTRUCTIONS = {_PRIORITY: "X-Mtad-Priority", _POOL: "X-Mtad-Pool", _ACCOUNT_POOL: "X-Mtad-Account-Pool",
                 _CAMPAIGN: "X-Mtad-Campaign"}  # fmt: skip
_WHOLE_NUMBER = re.compile(rb"[+-]?[0-9]{1,9}")  # ASCII digits only; the range is checked after
_SHOWN = 64  # characters of a refused value quoted back in the reply


TenantDefaults = settings.TenantDefaults


NO_DEFAULTS = TenantDefaults()


@dataclass(frozen=True, slots=True)
class Origin:
    """Who submitted the message, as the session knows it."""

    tenant: str
    client: str  # IP address
    helo: str
    tls: bool
    authenticated: bool


def spoolable(
    content: bytes,
    *,
    sender: str,
    recipients: Sequence[Address],
    smtputf8: bool,
    origin: Origin,
    hostname: str,
    now: float,
    pools: frozenset[str] = frozenset(),
    account_pools: frozenset[str] = frozenset(),
    defaults: TenantDefaults = NO_DEFAULTS,
) -> commit.NewMessage | Reply:
    """The message as it will be stored (content: as received, dot-unstuffed), or
    the refusal of a bad X-Mtad-* instruction. pools, account_pools: the configured
    names; defaults: the submitting tenant's."""
    end = headers.header_end(content)
    block, instructions = headers.remove(content[:end], _INSTRUCTIONS)
    found = headers.find(block, (b"message-id", b"idempotency-key", b"date", b"priority"))
    chosen = _ordering(instructions, found.get(b"priority"), pools, account_pools, defaults)
    if isinstance(chosen, Reply):
        return chosen
    priority, pool, account_pool, campaign = chosen
    queue_id = commit.new_queue_id(now)
    added = b""
    given_id = found.get(b"message-id", b"").decode(errors="replace")
    message_id = given_id or f"<{queue_id.hex}@{hostname}>"
    if not given_id:
        added += headers.field("Message-ID", message_id)
    if b"date" not in found:
        added += headers.field("Date", rfc5322_date(now))
    trace = received(origin, recipients, smtputf8=smtputf8, hostname=hostname, queue_id=queue_id.hex, now=now)
    return commit.NewMessage(
        id=queue_id,
        tenant=origin.tenant,
        sender=sender,
        recipients=tuple(recipients),
        message_id=message_id,
        idempotency_key=idempotency_key(found.get(b"idempotency-key"), given_id, sender, recipients),
        body=b"".join((trace, block, added, memoryview(content)[end:])),  # the body copied once
        client_address=origin.client,
        received_at=datetime.fromtimestamp(now, UTC),
        smtputf8=smtputf8,
        priority=priority,
        pool=pool,
        account_pool=account_pool,
        campaign=campaign,
        campaign_limits=(defaults.campaign_max_per_hour, defaults.campaign_max_per_day) if campaign else (None, None),
    )


def _ordering(
    instructions: Mapping[bytes, list[bytes]],
    standard: bytes | None,
    pools: frozenset[str],
    account_pools: frozenset[str],
    defaults: TenantDefaults,
) -> tuple[int, str | None, str | None, str | None] | Reply:
    """The priority, pool, account pool and campaign of a message, from its X-Mtad-*
    fields (taken out of the header), its standard Priority field, and its tenant's defaults."""
    priority = STANDARD_PRIORITIES.get((standard or b"").lower(), defaults.priority)
    if not instructions:  # the common case
        return priority, defaults.pool, defaults.account_pool, None
    for field, shown in _INSTRUCTIONS.items():
        if len(instructions.get(field, ())) > 1:
            return replies.repeated_instruction(shown)
    if given := instructions.get(_PRIORITY):
        value = given[0]
        if not _WHOLE_NUMBER.fullmatch(value) or not MIN_PRIORITY <= int(value) <= MAX_PRIORITY:
            return replies.bad_priority(_shown(value), MIN_PRIORITY, MAX_PRIORITY)
        priority = int(value)
    chosen: list[str | None] = []
    for field, default, known, refusal in (
        (_POOL, defaults.pool, pools, replies.unknown_pool),
        (_ACCOUNT_POOL, defaults.account_pool, account_pools, replies.unknown_account_pool),
    ):
        given = instructions.get(field)
        named = given[0].decode("utf-8", errors="replace") if given else None
        if given and named not in known:
            return refusal(_shown(given[0]), known)
        chosen.append(named or default)
    campaign = None
    if given := instructions.get(_CAMPAIGN):
        campaign = given[0].decode("ascii", errors="replace").strip()
        if not campaigns.valid(campaign):
            return replies.bad_campaign(_shown(given[0]), campaigns.NAME_RULE)
    return priority, chosen[0], chosen[1], campaign


def _shown(value: bytes) -> str:
    text = value.decode("utf-8", errors="replace")
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def received(
    origin: Origin, recipients: Sequence[Address], *, smtputf8: bool, hostname: str, queue_id: str, now: float
) -> bytes:
    """The Received trace header (RFC 5321 4.4, with the RFC 3848 protocol names). What
    the client gave (its EHLO name, a recipient) is made printable (headers.fold)."""
    protocol = (
        ("UTF8SMTP" if smtputf8 else "ESMTP") + ("S" if origin.tls else "") + ("A" if origin.authenticated else "")
    )
    parts = [
        f"from {origin.helo or 'unknown'} ([{origin.client}])",
        f"by {hostname} (mtad) with {protocol} id {queue_id}",
    ]
    if len(recipients) == 1:
        parts.append(f"for <{recipients[0]}>;")
    else:
        parts[-1] += ";"
    parts.append(rfc5322_date(now))
    return headers.fold("Received", parts, utf8=smtputf8)


def idempotency_key(header: bytes | None, message_id: str, sender: str, recipients: Sequence[Address]) -> str | None:
    """What makes a resubmission recognisable: the client's Idempotency-Key, else its
    own Message-ID together with the envelope. The envelope is part of the second
    kind because applications legitimately send one Message-ID in several
    transactions to different recipients (a list in chunks); only a transaction
    repeated as a whole is a resubmission."""
    if header:
        return "key:" + header.decode(errors="replace")
    if not message_id:
        return None
    digest = hashlib.blake2b(digest_size=12)
    for part in (sender, *sorted(str(r) for r in recipients)):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    return f"msgid:{message_id}:{digest.hexdigest()}"


def rfc5322_date(now: float) -> str:
    return _date_of_second(int(now))


@functools.lru_cache(maxsize=4)
def _date_of_second(second: int) -> str:
    """Formatting a date costs ~11 us; it changes once a second."""
    return email.utils.format_datetime(datetime.fromtimestamp(second, UTC))
