"""Sends whose outcome is unknown: held, found sent, or sent again.

A delivery relayed through a sending mailbox whose attempt may have gone out (its
node died after writing the attempt id, or the connection was lost after the
data) is not sent again unseen: a person's mailbox must not send the same
message twice. It is held in state `unknown` with the account it may have gone
out through (`unknown_sends`, migration 0032), due again at a time after which
it is sent again unless found in that account's Sent folder ('infinity': no
inbox is read, it waits for `mtad queue retry`). The inbox reader of the account
looks for it (mtad.feedback.inbox): `found` makes it delivered, `again` queues it.
Every function is one statement and raises what mtad.db raises.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mtad import db
from mtad.base import errors, events, lifecycle
from mtad.base.lifecycle import State
from mtad.spool import leases, wakeups


@dataclass(frozen=True, slots=True)
class Through:
    """The account an unrecorded attempt went through."""

    account: int
    name: str


@dataclass(frozen=True, slots=True)
class Held:
    """A send held unknown that is due a look in its account's Sent folder."""

    delivery: int
    account: int
    message_id: str  # the Message-ID fixed at accept, the one every attempt carried
    until: datetime  # sent again after this unless found ('infinity': never by itself)


async def hold(
    database: db.Database, node: str, outcomes: Sequence[leases.Outcome], accounts: Sequence[int | None], now: datetime
) -> set[int]:
    """Hold deliveries of `node` unknown (each outcome's state UNKNOWN, its
    next_attempt_at when it is sent again unless found sent), each with its event and
    the account it may have gone out through (`accounts`, in the same order).
    Returns the ids held (not one no longer leased to the node)."""
    for o in outcomes:
        lifecycle.transition(State.LEASED, o.state, o.reason)
        if o.state is not State.UNKNOWN or o.next_attempt_at is None:
            raise errors.IllegalTransition("a held send is unknown and says when it is sent again")
    row = await database.call(
        "unknowns/hold",
        node,
        now,
        [o.delivery for o in outcomes],
        [o.next_attempt_at for o in outcomes],
        [o.tenant for o in outcomes],
        [o.data_json or events.encode(o.data) for o in outcomes],
        [o.route_group for o in outcomes],
        list(accounts),
    )
    held = set(row["ids"]) if row is not None else set()
    if held:  # their events are committed
        await wakeups.consumers(database)
    return held


async def sent_through(database: db.Database, ids: Sequence[int]) -> dict[int, Through]:
    """The account each delivery's unrecorded attempt went through, as its reservation
    says; a delivery without one is left out."""
    rows = await database.fetch("unknowns/sent_through", list(ids))
    return {row["id"]: Through(row["account"], row["name"]) for row in rows}


async def due(database: db.Database, accounts: Sequence[int], now: datetime, every: float) -> list[Held]:
    """The sends held through `accounts` that are due a look at `now`: never looked
    for, last looked for `every` seconds ago or more, or whose wait is over."""
    rows = await database.fetch("unknowns/due", list(accounts), now, every)
    return [Held(row["delivery"], row["account"], row["message_id"], row["until"]) for row in rows]


async def looked(database: db.Database, ids: Sequence[int], folder: str, now: datetime) -> None:
    """These sends were looked for in `folder` at `now`, and not found."""
    await database.execute("unknowns/looked", list(ids), now, folder)


async def found(database: db.Database, ids: Sequence[int], how: Mapping[str, Any], now: datetime) -> set[int]:
    """These sends were found sent: delivered, each with its event saying `how`."""
    ids_found = set(await database.fetchval("unknowns/found", list(ids), now, events.encode(dict(how))))
    if ids_found:
        await wakeups.consumers(database)
    return ids_found


async def again(database: db.Database, ids: Sequence[int], why: Mapping[str, Any], now: datetime) -> set[int]:
    """These sends were not found sent by the end of their wait: queued, due now, to
    be sent again, each with a `requeued` event saying `why` (those of a cancelled
    campaign are cancelled instead); the delivering nodes are woken."""
    queued = set(await database.fetchval("unknowns/again", list(ids), now, events.encode(dict(why))))
    if queued:
        await wakeups.consumers_and_nodes(database, due=True)
    return queued
