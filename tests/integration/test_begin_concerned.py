"""mtad_begin's look before a batch of begins (sql/functions/mtad_begin_concerned.sql):
false for a plain batch, whose attempt ids are then written alone; true for each
thing an operator did that may concern it, looked up by any key of the batch; false
again for what concerns another batch or has ended. The behaviour behind a true
(cancelled, held, set aside) is the begin's, tested with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mtad import db
from mtad.mailboxes import accounts
from mtad.spool import leases
from tests.integration.spooling import spool_messages
from tests.pg import query

SUSPEND = "INSERT INTO suspensions (kind, key, reason, until, created_at) VALUES "
PAUSE = "INSERT INTO tenant_states (tenant, paused_at, paused_reason, paused_by) VALUES "
SUPPRESS = "INSERT INTO suppressions (tenant, address, reason, expires_at, created_at) VALUES "
IN_CAMPAIGN = "UPDATE deliveries SET campaign = (SELECT id FROM campaigns)"
REROUTE = "INSERT INTO reroutes (provider, pool, reason, created_at) VALUES "


def campaign(state: str, max_per_hour: int | None = None) -> str:
    return (f"INSERT INTO campaigns (tenant, name, state, max_per_hour, created_at, changed_at) "
            f"VALUES ('t1', 'c', '{state}', {max_per_hour or 'NULL'}, now(), now())")  # fmt: skip


# What an operator did, as SQL; whether it concerns a batch of r1@example.com and
# r2@example.com, tenant t1, group g, pool p, source 192.0.2.1, through account a.
DONE = {
    "nothing": ([], False),
    "tenant paused": ([PAUSE + "('t1', now(), 'x', 'operator')"], True),
    "another tenant paused": ([PAUSE + "('t2', now(), 'x', 'operator')"], False),
    "campaign paused": ([campaign("paused"), IN_CAMPAIGN + " WHERE recipient = 'r2@example.com'"], True),
    "campaign limited": ([campaign("active", 10), IN_CAMPAIGN], True),
    "campaign plain": ([campaign("active"), IN_CAMPAIGN], False),
    "another campaign paused": ([campaign("paused")], False),
    "group suspended": ([SUSPEND + "('provider', 'g', 'x', NULL, now())"], True),
    "tenant suspended": ([SUSPEND + "('tenant', 't1', 'x', now() + interval '1 hour', now())"], True),
    "pool suspended": ([SUSPEND + "('pool', 'p', 'x', NULL, now())"], True),
    "source suspended": ([SUSPEND + "('source', '192.0.2.1', 'x', NULL, now())"], True),
    "suspension ended": ([SUSPEND + "('provider', 'g', 'x', now() - interval '1 minute', now())"], False),
    "another group suspended": ([SUSPEND + "('provider', 'other', 'x', NULL, now())"], False),
    "group rerouted": ([REROUTE + "('g', 'q', 'x', now())"], True),
    "account disabled": (["UPDATE accounts SET state = 'disabled'"], True),
    "recipient suppressed": ([SUPPRESS + "('t1', 'r2@example.com', 'manual', NULL, now())"], True),
    "recipient suppressed for all": ([SUPPRESS + "('', 'r1@example.com', 'manual', NULL, now())"], True),
    "suppressed by another tenant": ([SUPPRESS + "('t2', 'r1@example.com', 'manual', NULL, now())"], False),
    "suppression expired": (
        [SUPPRESS + "('t1', 'r1@example.com', 'manual', now() - interval '1 minute', now())"],
        False,
    ),
}


@pytest.mark.parametrize("done", DONE)
async def test_a_batch_is_concerned_only_by_what_may_apply_to_it(database: db.Database, done: str) -> None:
    account = await accounts.add(database, accounts.Account(
        name="a", address="a@example.com", pool="accounts", host="localhost", port=25, login="a@example.com",
    ))  # fmt: skip
    await spool_messages(database, "r1@example.com", "r2@example.com")
    now = datetime.now(UTC)
    leased = await leases.lease(database, "n1", 2, now, now + timedelta(minutes=5))
    assert len(leased) == 2
    statements, expected = DONE[done]
    for statement in statements:
        await query(database, statement)
    ids = [d.id for d in leased]
    [row] = await query(
        database, "SELECT mtad_begin_concerned($1, $2, $3, $4, $5, $6, $7) AS concerned",
        ids, ["g", "g"], now, ["t1", "t1"], ["p", None], ["192.0.2.1", None], [account.id, None],
    )  # fmt: skip
    assert row["concerned"] is expected
