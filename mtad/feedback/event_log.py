"""The event log as read: an event as stored, read from a row, and the position after
a batch (consumers, and `mtad events tail`, which needs nothing else of them)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from mtad import db

CHANNEL = "mtad_events"  # NOTIFYed after the commits that write events (spool.wakeups)


@dataclass(frozen=True, slots=True)
class Stored:
    """An event as the log keeps it."""

    id: int
    xid: int | None  # None: written before consumers existed (never read by one)
    at: datetime
    kind: str
    tenant: str | None
    message: uuid.UUID | None
    delivery: int | None
    raw: str | None = field(default=None, repr=False)  # the data as stored (JSON)
    _data: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def data(self) -> dict[str, Any]:
        """The event's data, decoded when first asked for: most consumers look at the
        kind and the tenant of most events only."""
        data = self._data
        if data is None:
            data = _decode(self.raw) if self.raw is not None else {}
            object.__setattr__(self, "_data", data)
        return data


def after(batch: Sequence[Stored], rows: Sequence[db.Row], size: int) -> tuple[int, int]:
    """The position after a batch read by consumers/read.sql with LIMIT `size`: its
    last event's when it was full (more may wait), else the horizon's (all below it
    was read)."""
    if len(batch) == size and batch[-1].xid is not None:
        return batch[-1].xid, batch[-1].id
    return int(rows[0]["horizon"]), 0


def _decode(raw: str) -> dict[str, Any]:
    """JSON as PostgreSQL gives jsonb: orjson reads it in a quarter of the standard
    library's time (an integer past 64 bits, which mtad never writes, would come back
    a float)."""
    decoded: dict[str, Any] = orjson.loads(raw)
    return decoded


def stored(row: db.Row) -> Stored:
    """An event as read by consumers/read.sql (or any query with its columns)."""
    return Stored(row["id"], row["xid"], row["at"], row["kind"], row["tenant"], row["message"], row["delivery"],
                  row["data"])  # fmt: skip
