"""Source address leases in PostgreSQL, shared by nodes: a rotate pool's turns are
drawn and counted across the cluster, an address rests only once no send of its
turn is in flight on any node, a dead node's lease expires. Two Egress objects on
one database are two nodes; an injected clock; nothing sleeps."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from mtad import db
from mtad.deliver import source_leases
from mtad.deliver.egress import Choice, Egress, Policy, PoolSettings, SendOutcome, Wanted
from tests.pg import query

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()
A, B, C = "192.0.2.1", "192.0.2.2", "192.0.2.3"
LEASE = 300.0


class Clock:
    def __init__(self, t: float = START) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Node:
    """One node's pools, choosing as the delivery path does: a lease first when the
    choice asks for one (a share of one send of a turn), then the send."""

    def __init__(self, database: db.Database, name: str, pool: PoolSettings, clock: Clock, seed: int = 1) -> None:
        self.db, self.name, self.clock = database, name, clock
        self.pools = Egress({pool.name: pool}, now=clock, rng=random.Random(seed))

    async def send(self, provider: str = "gmail", *, end: bool = True) -> Choice:
        for _ in range(3):
            choice = self.pools.choose("p", provider)
            if isinstance(choice, Wanted):
                await source_leases.take(self.db, self.pools, self.name, choice, 1, self.clock() + LEASE)
                continue
            self.pools.taken("p", provider, choice)
            self.pools.sent("p", provider, choice.address)
            if end:
                await self.end(choice.address)
            return choice
        raise AssertionError("no lease after three takes")

    async def end(self, address: str) -> bool:
        """The send's answer came; True when that gave its lease back."""
        if self.pools.ended("p", address):
            await source_leases.release(self.db, self.pools, self.name, "p", [address])
            return True
        return False


def runs(addresses: list[str]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for address in addresses:
        if out and out[-1][0] == address:
            out[-1] = (address, out[-1][1] + 1)
        else:
            out.append((address, 1))
    return out


async def leases(database: db.Database) -> set[tuple[str, str]]:
    return {(r["address"], r["node"]) for r in await query(database, "SELECT address, node FROM source_leases")}


def rotate(**overrides: object) -> PoolSettings:
    fields: dict[str, object] = {"name": "p", "addresses": (A, B, C), "policy": Policy.ROTATE}
    fields.update(overrides)
    return PoolSettings(**fields)  # type: ignore[arg-type]


async def test_turns_are_counted_across_nodes_and_each_address_rests_after_its_turn(database: db.Database) -> None:
    clock = Clock()
    pool = rotate(rotate_after=(3, 5), park=600)
    one, two = Node(database, "n1", pool, clock, seed=1), Node(database, "n2", pool, clock, seed=2)
    sent: list[Choice] = []
    while not (choice := await (one, two)[len(sent) % 2].send()).fallback:  # the nodes take turns sending
        sent.append(choice)
    found = runs([c.address for c in sent])
    assert sorted(a for a, _ in found) == [A, B, C]  # each address one turn: then it rests
    assert all(3 <= n <= 5 for _, n in found), found  # the turn counted across both nodes
    assert (choice.why or "").endswith(f"fell back to the primary {A}")
    assert "parked for 600s more" in choice.why
    rests = await query(database, "SELECT address, parked_until FROM source_addresses ORDER BY address")
    assert [(r["address"], r["parked_until"].timestamp()) for r in rests] == [
        (A, START + 600),
        (B, START + 600),
        (C, START + 600),
    ]
    clock.t += 600  # the rest is over: turns again (after the ask-again pause of a node that found none)
    assert not (await one.send()).fallback


async def test_an_address_rests_only_once_no_send_of_its_turn_is_in_flight(database: db.Database) -> None:
    clock = Clock()
    pool = rotate(addresses=(A, B), rotate_after=(2, 2), park=600)
    one, two = Node(database, "n1", pool, clock), Node(database, "n2", pool, clock)
    first = await one.send(end=False)  # on the wire on n1
    second = await two.send()  # the turn's last send, on n2, answered at once
    assert second.address == first.address
    assert await leases(database) == {(first.address, "n1")}  # n2's share given back; n1's still held
    third = await two.send()  # the turn is given out: another address's
    assert third.address != first.address
    resting = await query(database, "SELECT parked_until FROM source_addresses WHERE address = $1", first.address)
    assert resting[0]["parked_until"] is None  # not resting while n1's send is in flight
    assert await one.end(first.address) is True
    resting = await query(database, "SELECT parked_until FROM source_addresses WHERE address = $1", first.address)
    assert resting[0]["parked_until"].timestamp() == START + 600


async def test_a_dead_nodes_lease_expires_and_its_turn_then_rests(database: db.Database) -> None:
    clock = Clock()
    pool = rotate(addresses=(A, B), rotate_after=(1, 1), park=600)
    dead, live = Node(database, "dead", pool, clock), Node(database, "live", pool, clock)
    held = await dead.send(end=False)  # its node dies with the send in flight
    other = await live.send()
    assert other.address != held.address
    clock.t += LEASE  # the dead node's lease has expired: the next take parks its turn
    assert (await live.send()).fallback  # both rest now
    rests = await query(database, "SELECT address, parked_until FROM source_addresses ORDER BY address")
    assert {r["address"]: r["parked_until"].timestamp() for r in rests} == {
        held.address: START + LEASE + 600,
        other.address: START + 600,
    }


async def test_the_turn_length_is_drawn_from_the_whole_range(database: db.Database) -> None:
    lengths = set()
    for seed in range(30):
        node = Node(database, f"n{seed}", rotate(addresses=(A, B), rotate_after=(2, 4), park=60), Clock(), seed)
        granted = await source_leases.take(database, node.pools, node.name, Wanted("p", None), 100, START + LEASE)
        assert granted.sends is not None
        lengths.add(granted.sends)  # the whole turn, given to one node that asked for more
        await source_leases.release(database, node.pools, node.name, "p", [granted.address or ""])
        await query(database, "UPDATE source_addresses SET parked_until = NULL")
    assert lengths == {2, 3, 4}


async def test_a_turn_is_not_given_on_an_address_unhealthy_at_the_provider(database: db.Database) -> None:
    clock = Clock()
    node = Node(database, "n1", rotate(addresses=(A, B), rotate_after=(10, 10), unhealthy_after=1), clock)
    current = (await node.send("gmail")).address
    node.pools.report("p", "gmail", current, SendOutcome.THROTTLED)
    around = await node.send("gmail")
    assert (around.address != current, around.fallback) == (True, False)  # a turn of the other address
    assert (await node.send("yahoo")).address in {current, around.address}  # both turns open at yahoo


async def test_every_policy_holds_a_lease_on_the_addresses_it_sends_through(database: db.Database) -> None:
    clock = Clock()
    for policy in Policy:
        node = Node(database, f"n-{policy.value}", PoolSettings("p", (A, B), policy=policy), clock)
        choice = await node.send(end=False)  # on the wire: its lease is held
        assert (choice.address, node.name) in await leases(database)
    renewed = Node(database, "n-renew", PoolSettings("p", (A, B)), clock)
    await renewed.send()
    assert await source_leases.renew(database, renewed.pools, renewed.name, clock() + 2 * LEASE) == []
    await query(database, "DELETE FROM source_leases WHERE node = 'n-renew'")  # as after an expiry
    lost = await source_leases.renew(database, renewed.pools, renewed.name, clock() + 2 * LEASE)
    assert len(lost) == 1
    assert renewed.pools.leases() == {}
    await source_leases.release_all(database, node.pools, node.name)
    assert not any(n == node.name for _, n in await leases(database))
