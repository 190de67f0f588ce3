"""Event records for the append-only `events` table.

An event is written in the same transaction as the state change it reports, by
the module that owns that transaction; consumers (suppression, webhooks,
reputation) read the table in id order. Sync, no I/O.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Kind(enum.StrEnum):
    RECEIVED = "received"  # a message and its deliveries were accepted
    DELIVERED = "delivered"
    DEFERRED = "deferred"
    BOUNCED = "bounced"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"  # a lease expired or was released


@dataclass(frozen=True, slots=True)
class Event:
    kind: Kind
    tenant: str
    message: uuid.UUID | None = None
    delivery: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def data_json(self) -> str:
        return encode(self.data)


# An event's data as stored: compact JSON, anything JSON cannot say as its str().
# One encoder for every writer of events (json.dumps with options makes one per call).
encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
