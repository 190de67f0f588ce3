"""An operator's actions on deliveries (`mtad queue retry|cancel|bounce|hold|release`):
on one delivery, a message's, or every one a filter matches, in batches.

Each batch is one statement and its own transaction (sql/queue/act.sql): it locks
its rows for that statement only, so nodes lease and record meanwhile. A delivery
in flight is never cancelled or bounced under its sender; a hold takes a leased
one whose attempt has not begun from its node's lease (the node's begin then finds
it gone and sends nothing), and leaves one whose attempt began (maybe on the wire).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mtad import db
from mtad.base import errors
from mtad.base.lifecycle import State
from mtad.spool import queue

BATCH = 1000  # deliveries per statement


@dataclass(frozen=True, slots=True)
class Action:
    target: State
    sources: frozenset[State]  # the states it moves deliveries from
    done: str  # what the command says of each: "delivery 7: cancelled"


ACTIONS: Mapping[str, Action] = {
    "retry": Action(State.QUEUED, frozenset({State.QUEUED, State.DEFERRED, State.UNKNOWN}), "queued for now"),
    "cancel": Action(
        State.CANCELLED, frozenset({State.QUEUED, State.DEFERRED, State.UNKNOWN, State.HELD}), "cancelled"
    ),
    "bounce": Action(State.BOUNCED, frozenset({State.QUEUED, State.DEFERRED, State.HELD}), "bounced"),
    "hold": Action(State.HELD, frozenset({State.QUEUED, State.DEFERRED, State.LEASED}), "held"),
    "release": Action(State.QUEUED, frozenset({State.HELD}), "released, due now"),
}


def action(name: str) -> Action:
    try:
        return ACTIONS[name]
    except KeyError:
        raise errors.NotFound(f"no action {name!r} (known: {', '.join(ACTIONS)})") from None


def sources(name: str, filters: queue.Filters) -> list[str]:
    """The states `name` moves deliveries from, as the filters narrow them; UsageError
    when they leave none."""
    moved = [s.value for s in State if s in action(name).sources]
    if filters.states is None:
        return moved
    kept = [s for s in moved if s in filters.states]
    if not kept:
        raise errors.UsageError(f"{name} acts on deliveries {', '.join(moved)}; not on {', '.join(filters.states)}")
    return kept


@dataclass(frozen=True, slots=True)
class Preview:
    """What an action would do: how many of each state it would move, and what the
    filters match that it leaves (by state; `sending`: leased, their attempt begun)."""

    would: dict[str, int]
    left: dict[str, int]
    sending: int

    @property
    def count(self) -> int:
        return sum(self.would.values())


async def preview(database: db.Database, name: str, filters: queue.Filters) -> Preview:
    """Count what `name` would touch (one statement); it may differ by the time it acts."""
    moved = sources(name, filters)
    found = await queue.totals(database, filters)
    would = {s: n for s, n in found.states.items() if s in moved}
    if "leased" in would:
        would["leased"] -= found.sending
        if not would["leased"]:
            del would["leased"]
    left = {s: n for s, n in found.states.items() if s not in moved}
    sending = found.sending if "leased" in moved else 0
    return Preview(would, left, sending)


@dataclass(frozen=True, slots=True)
class Acted:
    """What an action did: how many it moved from each state, and (when asked) which."""

    was: dict[str, int]
    ids: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return sum(self.was.values())


async def act(
    database: db.Database, name: str, filters: queue.Filters, now: datetime, *, batch: int = BATCH,
    keep_ids: bool = False,
) -> Acted:  # fmt: skip
    """Do `name` to every delivery that matches, `batch` per statement, each its own
    transaction; wakes delivery when some are due now."""
    todo = action(name)
    moved = sources(name, filters)
    was: Counter[str] = Counter()
    ids: list[int] = []
    after = 0
    while True:
        row = await database.fetchrow("queue/act", *filters.args(), after, batch, moved, todo.target.value, name, now)
        assert row is not None
        was.update(row["was"])
        if keep_ids:
            ids.extend(row["ids"])
        if row["last"] is None:
            break
        after = row["last"]
    if todo.target is State.QUEUED and was:
        await database.execute("leases/notify_due")
    return Acted(dict(was), tuple(ids))


async def act_on(database: db.Database, name: str, ident: str, now: datetime) -> tuple[list[int], list[dict[str, Any]]]:
    """`name` done to one delivery (by id) or every delivery of a message (by queue id).
    Returns (the ids changed, the deliveries left as they were)."""
    message, delivery = queue.ident(ident)
    action(name)
    rows = await database.fetch("queue/ids_of", message, delivery)
    if not rows:
        raise errors.NotFound(f"no delivery or message {ident}")
    filters = queue.Filters(states=None, message=message, delivery=delivery)
    changed = list((await act(database, name, filters, now, keep_ids=True)).ids)
    return changed, [dict(r) for r in rows if r["id"] not in changed]
