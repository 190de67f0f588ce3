"""The queue as operators read it, through `mtad queue` and the admin API beside a
running node: 200 deliveries of two tenants to two domains, some made older,
deferred or delivered by SQL. Listing by filter with totals, qshape's summary,
actions by filter (counted first, done only with --yes), cursor paging."""

from __future__ import annotations

import json
import smtplib
from datetime import UTC, datetime, timedelta
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.mail import email
from tests.running import Mtad, admin_call, free_port

pytestmark = pytest.mark.slow
TOKEN = "a-token-of-the-queue-test"


def rows(result: Any) -> list[str]:
    """The table's rows: no header, no totals line."""
    return result.stdout.splitlines()[1:-1]


@pytest.fixture
def node(mtad_factory: Any, dsn: str, tmp_path: Path) -> tuple[Mtad, int]:
    """A node that only accepts (nothing is sent), its admin API on a port; 20 messages of
    10 recipients: the first 10 messages tenant shop's, 5 recipients of each at
    example.com and 5 at example.net. Then by SQL: the default tenant's example.net
    deliveries are 3 hours old and deferred (routed to mx:mx.example.net); 20 of
    example.com are delivered."""
    token_file = tmp_path / "admin.token"
    token_file.write_text(TOKEN)
    port = free_port()
    admin = f'[admin]\nlisten = "127.0.0.1:{port}"\ntoken_file = "{token_file}"\n'
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', admin).start()
    assert daemon.cli("tenants", "add", "shop", stdin="pw\n").returncode == 0
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for m in range(20):
            to = [f"r{m}-{i}@example.com" for i in range(5)] + [f"r{m}-{i}@example.net" for i in range(5)]
            client.sendmail("app@example.org", to, email(f"message {m}", f"<m{m}@example.org>").as_bytes(policy=SMTP))
    first = pg.rows(dsn, "SELECT id FROM messages ORDER BY received_at, id LIMIT 10")
    pg.rows(dsn, "UPDATE messages SET tenant = 'shop' WHERE id = ANY($1) RETURNING id", [r["id"] for r in first])
    old = datetime.now(UTC) - timedelta(hours=3)
    pg.rows(dsn, "UPDATE deliveries d SET created_at = $1, state = 'deferred', route_group = 'mx:mx.example.net',"
                 " next_attempt_at = $2, attempts = 1 FROM messages m"
                 " WHERE m.id = d.message AND m.tenant <> 'shop' AND d.domain = 'example.net' RETURNING d.id",
            old, datetime.now(UTC) + timedelta(minutes=30))  # fmt: skip
    pg.rows(dsn, "UPDATE deliveries SET state = 'delivered' WHERE id IN (SELECT id FROM deliveries"
                 " WHERE domain = 'example.com' ORDER BY id LIMIT 20) RETURNING id")  # fmt: skip
    return daemon, port


def test_queue_ls_lists_what_is_pending_by_filter_with_totals(node: tuple[Mtad, int]) -> None:
    daemon, _ = node
    listed = daemon.cli("queue", "ls")
    assert listed.returncode == 0, listed.stderr
    assert len(rows(listed)) == 180
    assert "delivered" not in "".join(rows(listed))
    assert listed.stdout.splitlines()[-1] == "TOTAL 180 deliveries: 130 queued, 50 deferred"
    everything = daemon.cli("queue", "ls", "--all", "--limit", "0")
    assert everything.stdout.splitlines()[-1] == "TOTAL 200 deliveries: 130 queued, 50 deferred, 20 delivered"
    limited = daemon.cli("queue", "ls", "--limit", "5")
    assert len(rows(limited)) == 5
    assert limited.stdout.splitlines()[-1].endswith("(5 shown: --limit)")
    shop = daemon.cli("queue", "ls", "--tenant", "shop", "--domain", "EXAMPLE.net")
    assert shop.stdout.splitlines()[-1] == "TOTAL 50 deliveries: 50 queued"
    assert daemon.cli("queue", "ls", "--older-than", "1h").stdout.splitlines()[-1] == "TOTAL 50 deliveries: 50 deferred"
    assert daemon.cli("queue", "ls", "--provider", "-").stdout.splitlines()[-1] == "TOTAL 130 deliveries: 130 queued"
    by_json = [json.loads(line) for line in daemon.cli("queue", "ls", "--json", "--provider", "mx:mx.example.net")
               .stdout.splitlines()]  # fmt: skip
    assert len(by_json) == 50  # deliveries only, no totals
    assert {"id", "queue_id", "message_id", "tenant", "sender", "recipient", "state", "priority", "attempts",
            "next_attempt_at", "reason", "last_reply", "last_reason", "status", "lease_owner", "provider",
            "created_at"} == by_json[0].keys()  # fmt: skip
    wrong = daemon.cli("queue", "ls", "--tenant", "shpo")
    assert (wrong.returncode, "did you mean 'shop'?" in wrong.stderr) == (1, True)
    assert daemon.cli("queue", "ls", "--older-than", "soon").returncode == 2


def test_queue_summary_shapes_the_queue_by_key_and_age(node: tuple[Mtad, int]) -> None:
    daemon, _ = node
    shaped = daemon.cli("queue", "summary")
    assert shaped.returncode == 0, shaped.stderr
    header, total, *lines = shaped.stdout.splitlines()
    assert header.split()[:12] == ["PROVIDER", "TOTAL", "5M", "10M", "20M", "40M", "80M", "160M", "320M", "640M",
                                   "1280M", "1280M+"]  # fmt: skip
    assert total.split()[:12] == ["TOTAL", "180", "130", "0", "0", "0", "0", "0", "50", "0", "0", "0"]
    assert [line.split()[:2] for line in lines] == [["-", "130"], ["mx:mx.example.net", "50"]]
    assert "in 2" in lines[1]  # next due in about 30 minutes ("in 29m59s")
    by_tenant = [json.loads(line) for line in daemon.cli("queue", "summary", "--by", "tenant", "--json").stdout
                 .splitlines()]  # fmt: skip
    assert [(t["tenant"], t["total"]) for t in by_tenant] == [("TOTAL", 180), ("default", 100), ("shop", 80)]
    assert by_tenant[0]["ages"]["320m"] == 50  # 3 hours: between 160 and 320 minutes
    by_domain = daemon.cli("queue", "summary", "--by", "domain", "--older-than", "1h").stdout.splitlines()
    assert [line.split()[:2] for line in by_domain[1:]] == [["TOTAL", "50"], ["example.net", "50"]]


def test_bulk_actions_count_first_and_act_with_yes(node: tuple[Mtad, int], dsn: str) -> None:
    daemon, _ = node
    asked = daemon.cli("queue", "hold", "--domain", "example.net")
    assert asked.returncode == 2
    assert asked.stdout.splitlines()[0] == "would hold 100 deliveries (50 queued, 50 deferred)"
    assert "add --yes" in asked.stderr
    assert pg.rows(dsn, "SELECT count(*) AS n FROM deliveries WHERE state = 'held'") == [{"n": 0}]
    dry = daemon.cli("queue", "hold", "--domain", "example.net", "--dry-run")
    assert (dry.returncode, dry.stdout.splitlines()[0]) == (0, "would hold 100 deliveries (50 queued, 50 deferred)")
    held = daemon.cli("queue", "hold", "--domain", "example.net", "--yes")
    assert (held.returncode, held.stdout.strip()) == (0, "held 100 deliveries (50 queued, 50 deferred)")
    assert daemon.cli("queue", "ls", "--state", "held").stdout.splitlines()[-1] == "TOTAL 100 deliveries: 100 held"
    released = daemon.cli("queue", "release", "--tenant", "shop", "--yes")
    assert released.stdout.strip() == "released 50 deliveries (50 held)"
    cancelled = daemon.cli("queue", "cancel", "--older-than", "2h", "--state", "held", "--yes")
    assert cancelled.stdout.strip() == "cancelled 50 deliveries (50 held)"
    events = pg.rows(dsn, "SELECT kind, count(*) AS n FROM events WHERE data->>'reason' = 'admin' GROUP BY kind")
    assert {e["kind"]: e["n"] for e in events} == {"held": 100, "requeued": 50, "cancelled": 50}
    retried = daemon.cli("queue", "retry", "--all", "--yes")
    assert retried.stdout.strip() == "queued for now 130 deliveries (130 queued)"
    # One delivery by id still acts at once.
    [one] = pg.rows(dsn, "SELECT id FROM deliveries WHERE state = 'queued' ORDER BY id LIMIT 1")
    assert daemon.cli("queue", "hold", str(one["id"])).stdout.strip() == f"delivery {one['id']}: held"
    assert daemon.cli("queue", "release", str(one["id"])).stdout.strip() == f"delivery {one['id']}: released, due now"
    for refused, says in [
        (("queue", "cancel"), "give a delivery or queue id"),
        (("queue", "cancel", "7", "--tenant", "shop"), "not both"),
        (("queue", "release", "--state", "queued"), "invalid choice"),
        (("queue", "hold", "--all", "--yes", "--dry-run"), "not allowed with"),
    ]:
        answer = daemon.cli(*refused)
        assert (answer.returncode, says in answer.stderr) == (2, True), (refused, answer.stderr)


def test_the_admin_api_lists_a_page_at_a_time_summarises_and_acts(node: tuple[Mtad, int]) -> None:
    _, port = node

    def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return admin_call(port, method, path, body, TOKEN)

    status, page = call("GET", "/v1/queue?limit=70")
    assert status == 200, page
    assert page["totals"] == {"total": 180, "queued": 130, "deferred": 50}
    seen = [d["id"] for d in page["deliveries"]]
    while page["next_cursor"] is not None:
        status, page = call("GET", f"/v1/queue?limit=70&cursor={page['next_cursor']}")
        assert "totals" not in page
        seen += [d["id"] for d in page["deliveries"]]
    assert len(seen) == len(set(seen)) == 180
    assert seen == sorted(seen)
    assert len(call("GET", "/v1/queue")[1]["deliveries"]) == 100  # the default limit
    assert call("GET", "/v1/queue?all=true&limit=1")[1]["totals"]["total"] == 200
    status, filtered = call("GET", "/v1/queue?tenant=default&domain=example.net&older_than=1h&limit=1000")
    assert (status, {d["state"] for d in filtered["deliveries"]}, filtered["totals"]) == (
        200, {"deferred"}, {"total": 50, "deferred": 50})  # fmt: skip
    bad = [("older_than=soon", "older_than"), ("state=lost", "state"), ("limit=5000", "limit"),
           ("cursor=nonsense", "cursor"), ("domain=localhost", "domain"), ("colour=red", "colour")]  # fmt: skip
    for query, field in bad:
        status, refused = call("GET", f"/v1/queue?{query}")
        assert (status, refused["field"]) == (400, field), refused
    status, refused = call("GET", "/v1/queue?tenant=shpo")
    assert (status, refused["field"], refused["did_you_mean"]) == (422, "tenant", "shop")

    status, shape = call("GET", "/v1/queue/summary?by=domain")
    assert status == 200, shape
    assert shape["total"]["total"] == 180
    assert [(line["key"], line["total"]) for line in shape["lines"]] == [("example.net", 100), ("example.com", 80)]
    assert shape["buckets"][0] == "5m"
    assert call("GET", "/v1/queue/summary?by=colour")[0] == 400

    status, would = call("POST", "/v1/queue/hold", {"domain": "example.com", "dry_run": True})
    assert (status, would["count"], would["would"]) == (200, 80, {"queued": 80})
    status, done = call("POST", "/v1/queue/hold", {"domain": "example.com"})
    assert (status, done["count"], done["was"]) == (200, 80, {"queued": 80})
    status, done = call("POST", "/v1/queue/release", {"all": True})
    assert (status, done["count"]) == (200, 80)
    assert call("POST", "/v1/queue/hold", {})[1]["field"] == "all"
    assert call("POST", "/v1/queue/release", {"state": "queued"})[1]["field"] == "state"
    assert call("POST", "/v1/queue/explode", {"all": True})[0] == 404
