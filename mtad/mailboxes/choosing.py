"""An account of a pool chosen for a send and reserved, least used first.

`choose_healthy` (and `choose_many`, `choose` on it) is one round trip and one
short transaction (mtad_choose): one query over the pool's accounts (an index
probe each for the latest send, and a count of today's sends for those past their
gap), then mtad_reserve on each account tried, in the same transaction. An account
whose health is below its pool's floor when its turn comes rests instead. The
rules each reservation keeps are those of `accounts`.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mtad import db
from mtad.mailboxes import accounts


@dataclass(frozen=True, slots=True)
class Busy:
    """What `choose` answers when it reserved nothing."""

    contended: bool  # an account was skipped because another caller was reserving on it


@dataclass(frozen=True, slots=True)
class Chosen:
    """What `choose_healthy` made: reservations (none: the pool is busy) and rests."""

    reservations: list[accounts.Reservation]
    rested: list[accounts.Rested]
    contended: bool  # with no reservation: an account was skipped because another caller was reserving on it
    # Wants (by index) passed over, with no account taken: their campaign is at its limits until then.
    limited: Mapping[int, datetime] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PoolStatus:
    """An account pool at some time (`pool_status`)."""

    accounts: int
    active: int  # accounts in an active state (they may still be in their gap or at their cap)
    next_free: datetime | None  # the earliest an account may send again; None: only an operator can help

    @property
    def paused(self) -> bool:
        """No account of the pool can send until some state ends or an operator acts."""
        return self.active == 0


async def pool_status(database: db.Database, pool: str, now: datetime | None = None) -> PoolStatus:
    """How many accounts the pool has, how many are active, and when one may send next
    (at `now`; None: PostgreSQL's clock)."""
    row = await database.fetchrow("accounts/pool_status", pool, now)
    assert row is not None
    return PoolStatus(row["accounts"], row["active"], row["next_free"])


async def pool_event(database: db.Database, pool: str, now: datetime, data: Mapping[str, Any]) -> None:
    """An account pool paused (no account can send) or resumed: its event."""
    await database.execute("accounts/pool_event", pool, now, json.dumps(dict(data), default=str))


async def choose(
    database: db.Database, pool: str, now: datetime | None, rng: random.Random
) -> accounts.Reservation | Busy:
    """Reserve one send of one recipient through an account of `pool`, least used
    first: fewest recipients today, then longest since the latest send. Accounts that
    are not active at `now` (None: PostgreSQL's clock), at their daily cap, inside
    their gap or still sending are not tried; the others are tried in that order until
    one is reserved. Busy when none could be (contended: one was skipped because
    another caller was reserving on it; trying again at once may succeed)."""
    chosen = await choose_many(database, pool, [Want(1)], now, rng)
    return chosen[0] if isinstance(chosen, list) else chosen


@dataclass(frozen=True, slots=True)
class Want:
    """One send `choose_many` seeks: its recipients, and the delivery that sends it."""

    recipients: int
    delivery: int | None = None  # its first recipient's delivery (its lease bounds the send)


async def choose_many(
    database: db.Database, pool: str, wants: Sequence[Want], now: datetime | None, rng: random.Random,
    node: str | None = None,
) -> list[accounts.Reservation] | Busy:  # fmt: skip
    """Reserve sends through the accounts of `pool` at `now` (None: PostgreSQL's
    clock), the i-th for `wants[i]` (sent by `node`), least used first and in turns
    (one each, then again), every limit holding within the batch as between batches:
    at least one reservation (the first ones of `wants`, in order), or Busy.
    Health is not judged (see choose_healthy).

    One round trip and one short transaction (mtad_choose), whatever the number of
    accounts tried or reservations made.
    """
    chosen = await choose_healthy(database, pool, wants, now, rng, node)
    return chosen.reservations or Busy(chosen.contended)


async def choose_healthy(
    database: db.Database, pool: str, wants: Sequence[Want], now: datetime | None, rng: random.Random,
    node: str | None = None, *, floor: int = 0,
) -> Chosen:  # fmt: skip
    """`choose_many` among the healthy accounts: one whose health is below `floor`
    (0: none) when its turn comes is rested instead (RESTING, with its
    account_state event, until its health is back at the floor) and the next one is
    tried. A want whose delivery's campaign is at its limits takes no account: it is
    passed over (`limited`), and the reservations are those of the other wants served,
    in order. Reservations (none: the pool is busy), rests and wants passed over, in
    one round trip."""
    rows = await database.fetch(
        "accounts/choose", pool, now, [w.recipients for w in wants], [rng.random() for _ in wants],
        [w.delivery for w in wants], node, floor,
    )  # fmt: skip
    made: list[accounts.Reservation] = []
    rested: list[accounts.Rested] = []
    limited: dict[int, datetime] = {}
    for row in rows:
        if row["rested_until"] is not None:
            rested.append(accounts.Rested(accounts.of_row(row), row["health"], row["rested_until"]))
        elif row["limited_until"] is not None:
            limited[row["wanted"] - 1] = row["limited_until"]
        elif row["reservation"] is not None:
            account = accounts.of_row(row)  # as it was before the reservation: a lapsed state is over
            lapsed = accounts.State(row["lapsed"]) if row["lapsed"] is not None else None
            if lapsed is not None:
                account = dataclasses.replace(account, state=accounts.State.ACTIVE, state_until=None)
            made.append(accounts.Reservation(row["reservation"], account, row["reserved_at"], lapsed, row["granted"]))
    return Chosen(made, rested, not made and bool(rows[-1]["contended"]), limited)
