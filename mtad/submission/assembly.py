"""What an accepted message looks like in the spool: the bytes as received with
a Received header on top, a Message-ID and a Date at the end of the header block
when the client gave none (made once here, reused on every delivery attempt),
and the key that recognises a resubmission. Sync, no I/O.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mtad import headers, spool
from mtad.envelope import Address


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
) -> spool.NewMessage:
    """The message as it will be stored (content: as received, dot-unstuffed)."""
    queue_id = spool.new_queue_id(now)
    end = headers.header_end(content)
    found = headers.find(content[:end], (b"message-id", b"idempotency-key", b"date"))
    added = b""
    given_id = found.get(b"message-id", b"").decode(errors="replace")
    message_id = given_id or f"<{queue_id.hex}@{hostname}>"
    if not given_id:
        added += headers.field("Message-ID", message_id)
    if b"date" not in found:
        added += headers.field("Date", rfc5322_date(now))
    trace = received(origin, recipients, smtputf8=smtputf8, hostname=hostname, queue_id=queue_id.hex, now=now)
    return spool.NewMessage(
        id=queue_id,
        tenant=origin.tenant,
        sender=sender,
        recipients=tuple(recipients),
        message_id=message_id,
        idempotency_key=idempotency_key(found.get(b"idempotency-key"), given_id, sender, recipients),
        body=b"".join((trace, content[:end], added, content[end:])),
        client_address=origin.client,
        received_at=datetime.fromtimestamp(now, UTC),
        smtputf8=smtputf8,
    )


def received(
    origin: Origin, recipients: Sequence[Address], *, smtputf8: bool, hostname: str, queue_id: str, now: float
) -> bytes:
    """The Received trace header (RFC 5321 4.4, with the RFC 3848 protocol names)."""
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
    return headers.fold("Received", parts)


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
