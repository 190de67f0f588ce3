"""What a node holds: the deliveries leased to it, which of them an attempt is working
on, and the messages of their jobs, with their bodies as far as the body cache allows.

Delivery changes these only through Holdings, so that what is held, what is being
worked on and what a message's jobs keep in memory cannot drift apart. A delivery
is held from its lease until it is let go (recorded, handed back, or its lease
lost); while an attempt works on it, it is not given up when a renewal misses it
(the attempt's record decides) and not released at a stop. A message stays in
memory while any of its jobs is pending. Sync, no I/O.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from mtad.spool.leases import Leased


@dataclass(slots=True)
class Message:
    """What sending needs of a message, held while any of its jobs is pending."""

    id: uuid.UUID
    tenant: str
    sender: str
    message_id: str  # its Message-ID field, for the records
    size: int  # octets as spooled, for the records
    smtputf8: bool
    pool: str | None  # chosen at submission (X-Mtad-Pool, the tenant's), None: not chosen
    account_pool: str | None  # chosen at submission (X-Mtad-Account-Pool, the tenant's): relayed
    body: bytes | None  # None: not held (the body cache was full): read when it is sent
    campaign: str | None = None  # its campaign's name (None: none), for the records and events
    jobs: int = 0
    # (header digest, keys) -> the signature fields, or their making by another transaction
    signatures: dict[tuple[bytes, tuple[int, ...]], bytes | asyncio.Future[bytes]] = field(default_factory=dict)
    kept: tuple[bytes, tuple[int, ...]] | None = None  # the one stored on the message, for a retry


class Holdings:
    """The deliveries held, those being worked on, and the messages of their jobs."""

    def __init__(self, body_cache: int) -> None:
        self._held: dict[int, Leased] = {}
        self._working: set[int] = set()
        self._messages: dict[uuid.UUID, Message] = {}
        self._body_cache = body_cache
        self.body_bytes = 0  # of the bodies held (bounded by body_cache, but for those being sent)

    # --- deliveries ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, delivery: int) -> bool:
        return delivery in self._held

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._held))

    def hold(self, deliveries: Iterable[Leased]) -> None:
        for d in deliveries:
            self._held[d.id] = d

    def working(self, deliveries: Iterable[Leased]) -> None:
        """An attempt (or its record) works on these: kept through a missed renewal, not
        released at a stop."""
        self._working.update(d.id for d in deliveries)

    def waiting(self, deliveries: Iterable[Leased]) -> None:
        """No attempt works on these any more (they wait in a queue again, or are done)."""
        self._working.difference_update(d.id for d in deliveries)

    @property
    def worked_on(self) -> int:
        return len(self._working)

    def unstarted(self) -> list[int]:
        """The deliveries held that no attempt works on, by id: what a stop hands back."""
        return sorted(i for i in self._held if i not in self._working)

    def let_go(self, deliveries: Iterable[int]) -> None:
        """No longer held: recorded, handed back, or their lease lost."""
        for delivery in deliveries:
            self._held.pop(delivery, None)
            self._working.discard(delivery)

    def lost(self, asked: Iterable[int], kept: set[int]) -> list[int]:
        """Of the deliveries a renewal asked for, those whose lease it did not keep and
        that no attempt works on (an attempt's record decides for its own): let go, and
        returned."""
        gone = [i for i in asked if i not in kept and i in self._held and i not in self._working]
        self.let_go(gone)
        return gone

    # --- messages ------------------------------------------------------------------------

    def message(self, message_id: uuid.UUID) -> Message | None:
        return self._messages.get(message_id)

    def missing(self, message_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
        return [i for i in message_ids if i not in self._messages]

    def add(self, message: Message) -> Message:
        """Hold `message` unless one of that id is held; returns the one held."""
        return self._messages.setdefault(message.id, message)

    def keep_body(self, body: bytes | None) -> bytes | None:
        """The body, counted, if the body cache has room for it (else None: read when sent)."""
        if body is None or self.body_bytes + len(body) > self._body_cache:
            return None
        self.body_bytes += len(body)
        return body

    def set_body(self, message: Message, body: bytes) -> None:
        """A body read for sending: held from now on, for the message's other jobs,
        whatever the cache's room (it is needed now)."""
        message.body = body
        self.body_bytes += len(body)

    @property
    def body_room(self) -> int:
        return max(0, self._body_cache - self.body_bytes)

    def job_added(self, message_id: uuid.UUID) -> None:
        """One more job of the message is pending."""
        message = self._messages.get(message_id)
        if message is not None:
            message.jobs += 1

    def job_done(self, message_id: uuid.UUID) -> None:
        """A job of the message is done: the message (and its body) go with its last."""
        message = self._messages.get(message_id)
        if message is not None:
            message.jobs -= 1
            if message.jobs <= 0:
                del self._messages[message_id]
                if message.body is not None:
                    self.body_bytes -= len(message.body)
