"""What guards the shared reputation, through `mtad run` and the command line: a
tenant on probation sends from the probation pool and graduates; complaints that
come back as ARF reports pause it (451 4.7.1 with the reason, an event, a metric)
until an operator resumes it; a rate quota holds across two nodes."""

from __future__ import annotations

import json
import smtplib
import urllib.request
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import waiting
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.mail import email, send_as
from tests.reports import arf
from tests.running import Mtad, delivering, hearing
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]


def shown(daemon: Mtad, tenant: str) -> dict[str, Any]:
    result = daemon.cli("tenants", "show", tenant, "--json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def until(daemon: Mtad, tenant: str, holds: Any, within: float = 30) -> dict[str, Any]:
    """The tenant as `tenants show` says once `holds(it)` (the daemon's consumer writes it)."""
    return waiting.eventually(lambda: shown(daemon, tenant), holds, within=within, every=0.2)


def states_logged(daemon: Mtad, paused: list[str], probation: list[str]) -> None:
    """Wait until the daemon and each of its submission processes have read these
    tenant states (each reads them every 2 s, and logs what changed)."""
    assert daemon.ready is not None
    processes = 1 + daemon.ready["processes"]

    def now_read(records: list[dict[str, Any]]) -> bool:
        last = {r["pid"]: (r["paused"], r["probation"]) for r in records if r["event"] == "tenant_states"}
        return len(last) == processes and all(read == (paused, probation) for read in last.values())

    daemon.wait_for_log(now_read)


def paused_samples(daemon: Mtad) -> set[tuple[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.http_port}/metrics", timeout=10) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    return {(tuple(sorted(s.labels.items())), s.value) for s in families["mtad_tenant_paused"].samples}


def test_probation_graduation_then_complaints_pause_a_tenant_until_resumed(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink, tmp_path: Path
) -> None:
    inbound, heard = hearing(tmp_path)
    options = delivering(dns, sink, default_pool='"main"', probation_pool='"probation"')
    options["extra"] += heard + (
        '[pools.main]\naddresses = ["127.0.0.11"]\n[pools.probation]\naddresses = ["127.0.0.10"]\n'
        "[tenants]\nmax_complaint_rate = 0.2\nreputation_min_volume = 4\ngraduate_after = 3\n"
        "probation_default = true\n"
    )
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', **options).start()
    added = daemon.cli("tenants", "add", "shop", stdin="pw\n")
    assert "on probation" in added.stdout, added.stderr
    states_logged(daemon, [], ["shop"])

    # On probation: its mail leaves from the probation pool, until it has sent enough.
    for n in range(3):
        assert send_as(daemon.smtp_port, "shop", f"r{n}@sink.test", f"p{n}")[0] == 250
    assert {m.peer for m in sink.wait_for(3)} == {"127.0.0.10"}
    graduated = until(daemon, "shop", lambda s: not s["probation"])
    assert graduated["graduated_at"] is not None
    assert graduated["windows"]["1h"]["delivered"] == 3
    assert graduated["sources"]["127.0.0.10"]["24h"]["delivered"] == 3  # by source address, and by provider
    assert sum(p["1h"]["delivered"] for p in graduated["providers"].values()) == 3
    states_logged(daemon, [], [])
    assert send_as(daemon.smtp_port, "shop", "r3@sink.test", "p3")[0] == 250
    assert sink.wait_for(4)[-1].peer == "127.0.0.11"

    # A complaint for one of 4 delivered passes 0.2 over the minimum volume: paused. Its
    # original's envelope sender is the delivery's VERP address, as a feedback loop reports it.
    verp = next(m.sender for m in sink.wait_for(4) if m.recipients == ["r0@sink.test"])
    complaint = arf("r0@sink.test", "<p0@example.org>", sender=f"<{verp}>")
    with smtplib.SMTP("127.0.0.1", inbound, timeout=30) as client:
        client.sendmail("", ["fbl@bounces.example.org"], complaint.replace(b"\n", b"\r\n"))
    paused = until(daemon, "shop", lambda s: s["paused"])
    assert paused["paused_by"] == "auto"
    assert paused["paused_reason"].startswith("complaint rate 0.2500 over 1h (1 of 4 delivered)")
    assert paused["windows"]["24h"]["complained"] == 1
    [listed] = [json.loads(line) for line in daemon.cli("tenants", "ls", "--json").stdout.splitlines()]
    assert (listed["name"], listed["paused"], listed["probation"]) == ("shop", True, False)
    states_logged(daemon, ["shop"], [])
    code, text = send_as(daemon.smtp_port, "shop", "r4@sink.test", "p4")
    assert code == 451
    assert text.startswith(b"4.7.1 Tenant shop is paused (auto): complaint rate 0.2500")
    [event] = [json.loads(line) for line in daemon.cli("events", "tail", "--json", "--kind", "tenant_paused")
               .stdout.splitlines()]  # fmt: skip
    assert (event["tenant"], event["data"]["by"], event["data"]["rate"]) == ("shop", "auto", "complaint")
    waiting.eventually(lambda: paused_samples(daemon), lambda samples: ((("by", "auto"), ("tenant", "shop")), 1.0)
                       in samples, within=10, every=0.2)  # the daemon's own read (its children log theirs)  # fmt: skip
    windows = [json.loads(line) for line in daemon.cli("reputation", "ls", "--json").stdout.splitlines()]
    assert {(w["scope"], w["key"]) for w in windows} >= {("tenant", "shop"), ("source", "127.0.0.10")}

    # An operator resumes it: it submits again.
    resumed = daemon.cli("tenants", "resume", "shop")
    assert resumed.returncode == 0, resumed.stderr
    assert "held on 1 of 1 live node (test-node)" in resumed.stdout  # in the daemon and its submission processes
    assert daemon.cli("tenants", "resume", "shop").returncode == 1  # not paused any more
    assert send_as(daemon.smtp_port, "shop", "r5@sink.test", "p5")[0] == 250
    assert "r5@sink.test" in {r for m in sink.wait_for(5) for r in m.recipients}
    assert daemon.stop() == 0


def test_a_rate_quota_holds_across_two_nodes(mtad_factory: Any, dsn: str) -> None:
    limits = '[tenants."default"]\nmax_per_hour = 3\n'
    nodes = [mtad_factory(f'dsn = "{dsn}"', limits, node=name).start() for name in ("n1", "n2")]

    def send(node: Mtad, n: int) -> tuple[int, bytes]:
        with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
            client.ehlo()
            code, text = client.mail("app@example.org")
            if code != 250:  # a node that saw the quota full refuses at MAIL
                return code, text
            client.rcpt("rcpt@example.com")
            return client.data(email(f"q{n}").as_bytes(policy=SMTP))

    assert [send(nodes[0], 0)[0], send(nodes[1], 1)[0], send(nodes[0], 2)[0]] == [250, 250, 250]
    for node in nodes:
        code, text = send(node, 3)
        assert code == 451
        assert b"max_per_hour" in text
    shown_ = shown(nodes[1], "default")
    assert shown_["quotas"]["messages_this_hour"] == 3
    for node in nodes:
        assert node.stop() == 0
