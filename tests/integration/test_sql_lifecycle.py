"""The SQL moves deliveries only as lifecycle.TRANSITIONS allows and writes only the
event kinds of events.Kind: one source of truth for both.

The moves and kinds are watched, not read from the text: a delivery's new state and
an event's kind are often parameters ($11 of queue/act, the states of
leases/record), so only running the statements says what they do. Triggers record
every row each statement writes to deliveries and events, while the code that calls
it runs with every value it can pass (actions.ACTIONS, leases.OUTCOMES). The text is
read only to find which statements must have run: every file under mtad/sql/ that
sets deliveries.state, inserts deliveries or events, or calls a function that does.
"""

from __future__ import annotations

import dataclasses
import random
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import mtad
from mtad import db
from mtad.base import events, vault
from mtad.base.lifecycle import TRANSITIONS, Reason, State
from mtad.base.replies import Reply
from mtad.feedback import signals
from mtad.mailboxes import accounts, choosing
from mtad.signing import dkim
from mtad.signing.dkim import Algorithm, KeyState
from mtad.spool import actions, campaigns, commit, leases, suspensions, tenants, unknowns
from tests.integration.mailboxes import make
from tests.integration.spooling import Collector, message, outcome, running, spool_messages
from tests.pg import query

SQL = Path(mtad.__file__).parent / "sql"

OBSERVE = """
CREATE SCHEMA observed;
CREATE TABLE observed.moves (query text, old text, new text);
CREATE TABLE observed.kinds (query text, kind text);
CREATE FUNCTION observed.move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO observed.moves VALUES (current_query(), CASE WHEN TG_OP = 'UPDATE' THEN OLD.state::text END,
                                       NEW.state::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER observed_moves AFTER INSERT OR UPDATE ON deliveries FOR EACH ROW EXECUTE FUNCTION observed.move();
CREATE FUNCTION observed.kind() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO observed.kinds VALUES (current_query(), NEW.kind);
    RETURN NULL;
END
$$;
CREATE TRIGGER observed_kinds AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION observed.kind();
"""


# --- which statements must run -------------------------------------------------------------


def texts(under: Path) -> dict[str, str]:
    """name -> text without comments, with what it includes, of every .sql file under
    `under` (names as db.sql takes them) but the pieces others include."""
    names = [str(path.relative_to(SQL).with_suffix("")) for path in sorted(under.rglob("*.sql"))]
    pieces = {m for path in SQL.rglob("*.sql") for m in re.findall(r"^\\include (\S+)$", path.read_text(), re.M)}
    return {name: re.sub(r"--[^\n]*", "", db.sql(name)) for name in names if name not in pieces}


def set_columns(text: str, start: int) -> set[str]:
    """The columns a SET clause starting at `start` assigns: up to FROM, WHERE or
    RETURNING, or the parenthesis that closes its WITH query, split at top-level commas."""
    depth, cut, end, pieces = 0, start, len(text), []
    for token in re.finditer(r"'[^']*'|[(),]|\b(?:FROM|WHERE|RETURNING)\b", text[start:], re.IGNORECASE):
        at, word = start + token.start(), token.group()
        if word == "(":
            depth += 1
        elif word == "," and depth == 0:
            pieces.append(text[cut:at])
            cut = at + 1
        elif word == ")" and depth:
            depth -= 1
        elif word != "," and not word.startswith("'") and depth == 0:
            end = at  # the clause's end: a keyword, or the parenthesis closing its WITH query
            break
    pieces.append(text[cut:end])
    return {m.group(1).lower() for piece in pieces if (m := re.match(r"\s*(\w+)\s*=", piece))}


def moves_deliveries(text: str) -> bool:
    if re.search(r"\bINSERT\s+INTO\s+deliveries\b", text, re.IGNORECASE):
        return True
    updates = re.finditer(r"\bUPDATE\s+deliveries\b(?:\s+(?!SET\b)\w+)?\s+SET\b", text, re.IGNORECASE)
    return any("state" in set_columns(text, u.end()) for u in updates)


def writes_events(text: str) -> bool:
    return re.search(r"\bINSERT\s+INTO\s+events\b", text, re.IGNORECASE) is not None


def calling(functions: set[str], text: str) -> bool:
    return any(re.search(rf"\b{name}\s*\(", text) for name in functions)


def must_run() -> tuple[set[str], set[str]]:
    """The statements that move deliveries, and those that write events (directly or
    through a function of mtad/sql/functions/, itself maybe through another)."""
    one = re.compile(r"CREATE\s+OR\s+REPLACE\s+FUNCTION\s+(\w+).*?(?=CREATE\s+OR\s+REPLACE|$)", re.S)
    bodies = {f.group(1): f.group(0) for text in texts(SQL / "functions").values() for f in one.finditer(text)}
    found = []
    for direct in (moves_deliveries, writes_events):
        doing = {name for name, body in bodies.items() if direct(body)}
        while more := {name for name, body in bodies.items() if name not in doing and calling(doing, body)}:
            doing |= more
        statements = {n: t for n, t in texts(SQL).items() if not n.startswith("functions/")}
        found.append({name for name, text in statements.items() if direct(text) or calling(doing, text)})
    return found[0], found[1]


def test_the_statements_that_must_run_are_found() -> None:
    moving, writing = must_run()
    assert {"spool/accept", "leases/lease", "leases/record", "leases/reap", "queue/act", "leases/begin"} <= moving
    assert {"spool/accept", "queue/act", "accounts/reserve", "accounts/choose", "accounts/set_state",
            "accounts/failure", "dkim/revoke"} <= writing  # fmt: skip


# --- running them -------------------------------------------------------------------------


async def exercise(database: db.Database) -> None:
    """Every statement that moves a delivery or writes an event, called as mtad calls it,
    with every state and action the code can pass."""
    now = datetime.now(UTC) + timedelta(minutes=1)  # every message accepted below is due by then
    until = now + timedelta(hours=1)

    async def lease(n: int, node: str = "n1", until: datetime = until) -> list[int]:
        return [d.id for d in await leases.lease(database, node, n, now, until)]

    async def defer(delivery: int, due: datetime) -> None:
        reply = Reply(451, "4.3.0", "later")
        await leases.record(database, "n1", [outcome(delivery, State.DEFERRED, Reason.MX_TEMPFAIL, reply,
                                                     next_attempt_at=due)], now)  # fmt: skip

    async def queued() -> int:
        rows = await query(database, "SELECT id FROM deliveries WHERE state = 'queued' ORDER BY id LIMIT 1")
        return int(rows[0]["id"])

    # Accept: queued; cancelled for a suppressed recipient; leased on the fast path.
    await query(database, "INSERT INTO suppressions (tenant, address, reason, detail, created_at) VALUES"
                          " ('t1', 'gone@example.com', 'hard_bounce', '550 5.1.1', $1)", now)  # fmt: skip
    await spool_messages(database, *(f"r{i}@example.com" for i in range(30)), "gone@example.com")
    async with running(commit.GroupCommitter(database, now=lambda: now, fast_path=Collector())) as committer:
        await committer.commit(message("fast@example.com"))

    # An attempt ends in each outcome; leases go back expired, reclaimed and released.
    taken = await lease(len(leases.OUTCOMES))
    reasons = {State.DELIVERED: None, State.DEFERRED: Reason.MX_TEMPFAIL, State.BOUNCED: Reason.PERMANENT_REPLY,
               State.FAILED: Reason.INTERNAL}  # fmt: skip
    ends = zip(taken, sorted(leases.OUTCOMES), strict=True)
    reply = Reply(550, "5.0.0", "any")
    recorded = [outcome(d, s, reasons[s], reply, next_attempt_at=until) for d, s in ends]
    through = {"mx": "mx1", "group": "g", "source": "192.0.2.1", "account": "acc"}  # relayed: complained of below
    recorded = [dataclasses.replace(o, data=through) if o.state is State.DELIVERED else o for o in recorded]
    await leases.record(database, "n1", recorded, now)
    await lease(1, until=now + timedelta(seconds=30))
    assert await leases.reap(database, now + timedelta(minutes=1)) == 1
    await lease(1, node="n2")
    assert await leases.reclaim(database, "n2", now) == 1
    released = await lease(1)
    assert await leases.release(database, "n1", released, now) == set(released)

    # Just before its attempt, a delivery whose recipient was suppressed while it waited is cancelled.
    [waiting] = await lease(1)
    suppress = "INSERT INTO suppressions (tenant, address, reason, created_at)"
    suppress += " SELECT '', lower(recipient), 'manual', $2 FROM deliveries WHERE id = $1"
    await query(database, suppress, waiting, now)
    begun = await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (waiting,), "g", "t1")], now)
    assert (begun.owned, begun.suppressed) == (set(), {waiting})

    # A tenant paused: its waiting mail is held (due at infinity), its leased mail
    # queued again before its attempt; resumed, all of it is due.
    [held] = await lease(1)
    await queued()
    assert await tenants.pause(database, "t1", "checks", by="operator", now=now) is not None
    begun = await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (held,), "g", "t1")], now)
    assert begun.held == {held}
    assert await tenants.resume(database, "t1", by="operator", now=now)

    # A campaign paused: a delivery of it a node leased is queued again before its
    # attempt; resumed; cancelled: a lease not begun is taken back and what has not
    # gone out is cancelled, and new mail of it is cancelled at accept.
    async def in_campaign(recipient: str) -> None:
        async with running(commit.GroupCommitter(database, now=lambda: now)) as committer:
            await committer.commit(dataclasses.replace(message(recipient), campaign="c", priority=100))

    for n in range(3):
        await in_campaign(f"c{n}@example.com")
    [paused] = await lease(1)
    await campaigns.pause(database, "t1", "c", "checks", now)
    begun = await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (paused,), "g", "t1")], now)
    assert begun.held == {paused}
    assert await campaigns.resume(database, "t1", "c", now) == 3
    await lease(1)
    assert await campaigns.cancel(database, "t1", "c", "checks", now) == (3, False)
    await in_campaign("c3@example.com")
    async with running(commit.GroupCommitter(database, now=lambda: now)) as committer:  # through a pool that stops
        await committer.commit(dataclasses.replace(message("p@example.com"), campaign="p", account_pool="p"))
    assert await campaigns.pool_paused(database, "p", True, now) == ["p"]
    assert await campaigns.pool_paused(database, "p", False, now) == ["p"]
    # A delivery of something suspended is set aside by the node that took it.
    [aside] = await lease(1)
    why = await suspensions.suspend(database, "provider", "g", "checks", None, now)
    assert await suspensions.hold(database, "n1", [aside], now, why, "g") == {aside}
    assert await suspensions.resume(database, "provider", "g", now)
    await tenants.set_probation(database, "t1", True, now)
    assert await database.fetchval("reputation/graduate", "t1", now, 1) == "t1"

    # An operator's every action, on a queued delivery and on a deferred one (held
    # first, for a release); a hold of a leased one not begun; a held one cancelled, bounced.
    for action in actions.ACTIONS:
        [deferred] = await lease(1)
        await defer(deferred, until)
        for delivery in (await queued(), deferred):
            if action == "release":
                await actions.act_on(database, "hold", str(delivery), now)
            changed, _ = await actions.act_on(database, action, str(delivery), now)
            assert changed == [delivery], action
    for action in ("cancel", "bounce"):
        [leased] = await lease(1)
        assert (await actions.act_on(database, "hold", str(leased), now))[0] == [leased]
        assert (await actions.act_on(database, action, str(leased), now))[0] == [leased], action

    # Relayed sends that may have gone out, held unknown: one found in its Sent folder,
    # one not (sent again), one retried and one cancelled by an operator.
    unknown = await lease(4)
    kept = [outcome(d, State.UNKNOWN, Reason.MAYBE_SENT, None, next_attempt_at=until) for d in unknown]
    assert await unknowns.hold(database, "n1", kept, [None] * len(kept), now) == set(unknown)
    assert await unknowns.found(database, unknown[:1], {"how": "sent_folder"}, now) == {unknown[0]}
    assert await unknowns.again(database, unknown[1:2], {"reason": "not_in_sent_folder"}, now) == {unknown[1]}
    for action, delivery in (("retry", unknown[2]), ("cancel", unknown[3])):
        assert (await actions.act_on(database, action, str(delivery), now))[0] == [delivery], action

    # A deferred delivery that is due again is leased with the queued ones.
    [deferred] = await lease(1)
    await defer(deferred, now)
    assert deferred in await lease(1000)

    # Sending accounts: moves, lapsed timed states (reserve and choose), failures,
    # bounces, pool events.
    account_id = await make(database, "acc", pool="p")
    account = await accounts.get(database, "acc")
    await accounts.set_state(database, "acc", accounts.State.COOLING, now + timedelta(minutes=1), "421", now)
    decision = await accounts.reserve(database, account_id, now + timedelta(minutes=1), random.Random(0))
    assert decision.lapsed is accounts.State.COOLING
    later = now + timedelta(minutes=2)
    await accounts.set_state(database, "acc", accounts.State.COOLING, later + timedelta(minutes=1), "421", later)
    chosen = await choosing.choose(database, "p", now + timedelta(minutes=4), random.Random(0))
    assert isinstance(chosen, accounts.Reservation)
    assert chosen.lapsed is accounts.State.COOLING
    await accounts.failure(database, account, now, {"class": "transient"}, accounts.Breaker())
    await accounts.bounce(database, account, now, {"class": "recipient"})
    await choosing.pool_event(database, "p", now, {"paused": True})
    await make(database, "sick", pool="q")  # rested as it bounces, and as its turn comes
    sick = await accounts.get(database, "sick")
    assert await accounts.bounce(database, sick, now, {"class": "recipient"}, floor=60) is not None
    await accounts.enable(database, "sick", "checked", now)
    chosen_healthy = await choosing.choose_healthy(database, "q", [choosing.Want(1)], now, random.Random(0), floor=60)
    assert chosen_healthy.rested == []  # enabled: its health starts afresh

    # What comes back after delivery: each kind of signal, about the delivered delivery
    # (which the hard bounce moves to bounced).
    delivered = dict(zip(sorted(leases.OUTCOMES), taken, strict=True))[State.DELIVERED]
    for kind in signals.Kind:
        await signals.record(database, signals.Signal(kind, "r1@example.com", now, delivery=delivered))
    [row] = await query(database, "SELECT message FROM deliveries WHERE id = $1", delivered)
    await database.execute("reputation/complaints", [0], [delivered], [row["message"]], [now])

    # DKIM keys: generated, activated (the one before retires), revoked, set by hand.
    sealer = vault.Vault(vault.Vault.new_key())
    first = await dkim.add(database, dkim.generate("example.com", "s1", Algorithm.ED25519), sealer)
    second = await dkim.add(database, dkim.generate("example.com", "s2", Algorithm.ED25519), sealer)
    await dkim.generated(database, first, now)
    assert first.id is not None
    assert second.id is not None
    await dkim.activate(database, first.id, now)
    await dkim.activate(database, second.id, now)
    assert await dkim.revoke(database, first.id, now)
    await dkim.set_state(database, "example.com", "s2", KeyState.RETIRING, now)


async def test_the_sql_moves_deliveries_only_as_the_table_allows_and_writes_only_known_event_kinds(
    database: db.Database,
) -> None:
    async with database.connection() as conn:
        await conn.execute_text(OBSERVE)
    await exercise(database)
    named = {db.sql(name): name for name in texts(SQL) if not name.startswith("functions/")}
    moves = await query(database, "SELECT query, old, new FROM observed.moves")
    kinds = await query(database, "SELECT query, kind FROM observed.kinds")
    assert {r["query"] for r in [*moves, *kinds]} <= named.keys()  # nothing else writes them

    # A delivery is born queued, or takes its first step at accept (leased, cancelled).
    born = {State(r["new"]) for r in moves if r["old"] is None}
    assert born <= {State.QUEUED} | TRANSITIONS[State.QUEUED]
    made = {(State(r["old"]), State(r["new"])) for r in moves if r["old"] not in (None, r["new"])}
    allowed = {(old, new) for old, targets in TRANSITIONS.items() for new in targets}
    assert made - allowed == set()  # a move the table forbids
    assert allowed - made == set()  # a move the table allows that no statement makes
    assert {r["kind"] for r in kinds} == set(events.Kind)

    moving, writing = must_run()
    assert moving - {named[r["query"]] for r in moves if r["old"] != r["new"]} == set()
    assert writing - {named[r["query"]] for r in kinds} == set()
