"""An operator's command holds on every live node when it returns, through `mtad
run` on two nodes (one serving its port from a submission process) and the command
line: right after `suspend` no node sends the suspended mail, right after `tenants
pause` no node accepts the tenant's mail, right after `resume` what was held goes
without anything else waking delivery; each command says which nodes applied it,
and names one that did not."""

from __future__ import annotations

from typing import Any

import pytest

from tests import pg
from tests.acceptance.spool import set_aside
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.mail import send, send_as
from tests.running import Mtad, delivering
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]


def got(receiver: ThreadedSink, *recipients: str, within: float = 30) -> set[str]:
    """Until each of `recipients` has reached the sink; every recipient it received."""
    receiver.wait_until(lambda received: set(recipients) <= {r for m in received for r in m.recipients}, within=within)
    return {r for m in receiver.received for r in m.recipients}


def test_commands_hold_on_every_live_node_when_they_return(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink
) -> None:
    # Leasing is woken by NOTIFY only: the poll that would find due mail is a minute away.
    options = delivering(dns, sink, poll_interval='"60s"')
    nodes: list[Mtad] = []
    for name, processes in (("n1", 0), ("n2", 1)):
        mine = {**options, "submission": f"{options['submission']}\nprocesses = {processes}"}
        nodes.append(mtad_factory(f'dsn = "{dsn}"', node=name, **mine).start())
    n1, n2 = nodes
    assert n2.ready is not None
    assert n2.ready["processes"] == 1
    assert n1.cli("tenants", "add", "shop", stdin="pw\n").returncode == 0

    # Suspended: the default tenant's mail submitted right after waits on both nodes,
    # while the shop's, submitted after it, is delivered.
    done = n1.cli("suspend", "--tenant", "default", "--for", "1h", "--reason", "an incident")
    assert done.returncode == 0, done.stderr
    assert "held on 2 of 2 live nodes (n1, n2)" in done.stdout
    assert done.stderr == ""
    for n, node in enumerate(nodes, start=1):
        send(node, f"held-n{n}@sink.test", "held")
        assert send_as(node.smtp_port, "shop", f"marker-n{n}@sink.test", f"marker{n}")[0] == 250
    received = got(sink, "marker-n1@sink.test", "marker-n2@sink.test")
    assert not {"held-n1@sink.test", "held-n2@sink.test"} & received
    for recipient in ("held-n1@sink.test", "held-n2@sink.test"):
        set_aside(dsn, recipient, "tenant")

    # Paused: the next submission of the tenant is refused on both nodes.
    paused = n2.cli("tenants", "pause", "shop", "--reason", "checking a list")
    assert paused.returncode == 0, paused.stderr
    assert "held on 2 of 2 live nodes (n1, n2)" in paused.stdout
    for node in nodes:
        code, text = send_as(node.smtp_port, "shop", "refused@sink.test", "refused")
        assert (code, text) == (451, b"4.7.1 Tenant shop is paused (operator): checking a list; try again later")

    # Resumed: what was held goes at once, with nothing else to wake delivery.
    resumed = n2.cli("resume", "--tenant", "default")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed tenant default; 2 deliveries due now" in resumed.stdout
    assert "held on 2 of 2 live nodes (n1, n2)" in resumed.stdout
    got(sink, "held-n1@sink.test", "held-n2@sink.test", within=10)
    resumed = n1.cli("tenants", "resume", "shop")
    assert resumed.returncode == 0, resumed.stderr
    assert "held on 2 of 2 live nodes (n1, n2)" in resumed.stdout
    for n, node in enumerate(nodes):
        assert send_as(node.smtp_port, "shop", f"again{n}@sink.test", f"again{n}")[0] == 250
    got(sink, "again0@sink.test", "again1@sink.test")

    # A node counted live that does not apply a change is named; the command still succeeds.
    pg.rows(dsn, "INSERT INTO nodes (id, hostname, pid, started_at, heartbeat_at) "
              "VALUES ('ghost', 'elsewhere', 1, now(), now())")  # fmt: skip
    done = n1.cli("suspend", "--tenant", "shop")
    assert done.returncode == 0, done.stderr
    assert "held on 2 of 3 live nodes (n1, n2)" in done.stdout
    assert done.stderr.startswith("mtad: warning: node ghost did not apply it within 5 s"), done.stderr
    pg.rows(dsn, "DELETE FROM nodes WHERE id = 'ghost'")
    assert n1.cli("resume", "--tenant", "shop").returncode == 0
    for node in nodes:
        assert node.stop() == 0
