"""Suspensions and reroutes through `mtad run` on two nodes and the command line:
mail of a suspended provider group, tenant, pool or source address waits on
whichever node takes it, and goes once resumed; a reroute sends a provider
group's mail from another pool; `suspensions ls` and `buckets ls` show them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.acceptance.spool import checkpointed, set_aside
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.mail import send
from tests.running import delivering
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]
MAIN, SPARE = "127.0.0.11", "127.0.0.10"


def test_every_kind_of_suspension_holds_mail_on_both_nodes_until_resumed(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink
) -> None:
    options = delivering(dns, sink, default_pool='"main"')
    options["extra"] += f'[pools.main]\naddresses = ["{MAIN}"]\n[pools.spare]\naddresses = ["{SPARE}"]\n'
    nodes = [mtad_factory(f'dsn = "{dsn}"', node=name, **options).start() for name in ("n1", "n2")]
    send(nodes[0], "first@sink.test", "first")
    [first] = sink.wait_for(1)
    assert first.peer == MAIN
    nodes[0].wait_for_log(lambda records: any(r["event"] == "delivered" for r in records))
    [group] = {r["group"] for r in nodes[0].events("delivered")}

    for n, (flag, key) in enumerate([("--provider", group), ("--tenant", "default"), ("--pool", "main"),
                                     ("--source", MAIN)]):  # fmt: skip
        kind = flag[2:]
        done = nodes[0].cli("suspend", flag, key, "--reason", f"checking {kind}")
        assert done.returncode == 0, done.stderr
        assert "held on 2 of 2 live nodes (n1, n2)" in done.stdout  # every node heeds it from now on
        listed = [json.loads(line) for line in nodes[1].cli("suspensions", "ls", "--json").stdout.splitlines()]
        assert [(s["kind"], s["key"], s["reason"]) for s in listed] == [(kind, key, f"checking {kind}")]
        recipient = f"held{n}@sink.test"
        send(nodes[n % 2], recipient, f"held {kind}")
        set_aside(dsn, recipient, kind)
        assert recipient not in {r for m in sink.received for r in m.recipients}
        queued = nodes[1].cli("queue", "ls", "--state", "queued").stdout
        assert "on resume" in queued
        if kind == "provider":
            checkpointed(dsn, group)  # `buckets ls` shows the buckets the nodes have written
            assert f"provider: checking {kind}" in nodes[0].cli("buckets", "ls").stdout
        resumed = nodes[1].cli("resume", flag, key)
        assert resumed.returncode == 0, resumed.stderr
        assert "1 deliveries due now" in resumed.stdout
        sink.wait_until(lambda received, r=recipient: r in {x for m in received for x in m.recipients}, within=30)
    assert nodes[0].cli("resume", "--tenant", "default").returncode == 1  # nothing suspended

    # A reroute: the group's mail leaves from the spare pool until it is taken back.
    rerouted = nodes[1].cli("queue", "reroute", "--provider", group, "--pool", "spare", "--for", "1h")
    assert rerouted.returncode == 0, rerouted.stderr
    assert "held on 2 of 2 live nodes (n1, n2)" in rerouted.stdout
    send(nodes[0], "rerouted@sink.test", "rerouted")
    received = sink.wait_until(lambda got: any("rerouted@sink.test" in m.recipients for m in got), within=30)
    assert [m.peer for m in received if "rerouted@sink.test" in m.recipients] == [SPARE]
    assert nodes[0].cli("queue", "reroute", "--provider", group, "--back").returncode == 0
    for node in nodes:
        assert node.stop() == 0
