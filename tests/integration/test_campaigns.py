"""Campaigns against real PostgreSQL, a real SMTP sink, the submission port and the
admin API: one is made on first use; its progress is counted as its deliveries
move, equal to what the spool holds and unchanged by folding; a pause holds its
mail (a send begun after it too) until resumed; a cancel cancels what has not gone
out; X-Mtad-Campaign and "campaign" name it, a bad name is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import random
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from mtad import db, submission
from mtad.base import errors, vault
from mtad.feedback import consumers, signals, webhooks
from mtad.feedback.webhook_outbox import Outbox
from mtad.feedback.webhook_sender import Sender
from mtad.feedback.webhook_sender import Settings as SenderSettings
from mtad.mailboxes import accounts, choosing, relay
from mtad.spool import campaigns, commit, leases, retention, unknowns
from tests import waiting
from tests.hooks import Receiver
from tests.integration.admin_api import serving
from tests.integration.delivering import accept, engine
from tests.integration.mailboxes import add, make, relayed, relaying
from tests.integration.spooling import message
from tests.integration.submitting import Factory
from tests.pg import query
from tests.sink import Sink
from tests.smtpclient import RawClient

MESSAGE = b"From: app@example.org\r\nTo: rcpt@example.com\r\nSubject: hi\r\n\r\nHello.\r\n"


def in_campaign(name: str, *recipients: str, tenant: str = "t1") -> commit.NewMessage:
    return dataclasses.replace(message(*recipients, tenant=tenant), campaign=name)


async def scanned(database: db.Database, tenant: str, name: str) -> Counter[str]:
    """What the spool holds of the campaign, counted the slow way, by bucket."""
    rows = await query(database, "SELECT mtad_campaign_bucket(d.state, d.reason) AS bucket, count(*) AS n "
                                 "FROM deliveries d JOIN campaigns c ON c.id = d.campaign "
                                 "WHERE c.tenant = $1 AND c.name = $2 GROUP BY 1", tenant, name)  # fmt: skip
    return Counter({r["bucket"]: r["n"] for r in rows})


async def counted(database: db.Database, tenant: str, name: str) -> Counter[str]:
    """The campaign's progress by delivery bucket, as mtad keeps it."""
    found = await campaigns.get(database, tenant, name, datetime.now(UTC))
    return Counter({k: n for k, n in found.counts.items() if k not in ("messages", *campaigns.CAME_BACK)})


async def test_a_campaign_is_made_on_first_use_and_counts_its_deliveries_as_they_move(
    database: db.Database, sink: Sink
) -> None:
    await query(database, "INSERT INTO suppressions (tenant, address, reason, created_at) "
                          "VALUES ('t1', 'gone@sink.test', 'manual', now())")  # fmt: skip
    await accept(database, in_campaign("spring", "a@sink.test", "550-x@sink.test", "gone@sink.test"),
                 in_campaign("spring", "b@sink.test", "tempfail-y@sink.test"), message("other@sink.test"),
                 in_campaign("spring", "c@sink.test", tenant="t2"))  # fmt: skip
    [t1, t2] = await campaigns.listing(database, datetime.now(UTC))
    assert (t1.tenant, t1.name, t1.state, t2.tenant) == ("t1", "spring", campaigns.State.ACTIVE, "t2")
    assert await counted(database, "t1", "spring") == {"queued": 4, "suppressed": 1}
    assert t1.counts["messages"] == 2

    await engine(database, sink).run_until_idle()
    expected = {"delivered": 2, "bounced:recipient_rejected": 1, "deferred": 1, "suppressed": 1}
    assert await scanned(database, "t1", "spring") == expected
    assert await counted(database, "t1", "spring") == expected
    shown = (await campaigns.get(database, "t1", "spring", datetime.now(UTC))).view(datetime.now(UTC))
    assert (shown["messages"], shown["deliveries"], shown["delivered"], shown["bounced"]) == (2, 5, 2, 1)
    assert (shown["deferred"], shown["suppressed"], shown["done"]) == (1, 1, False)
    assert shown["bounced_by_reason"] == {"recipient_rejected": 1}
    assert shown["per_minute"] == 0.3  # three settled within the last ten minutes
    said = await query(database, "SELECT d.recipient, e.data FROM events e JOIN deliveries d ON d.id = e.delivery "
                                 "WHERE e.kind IN ('delivered', 'bounced', 'deferred')")  # fmt: skip
    assert {r["recipient"]: json.loads(r["data"]).get("campaign") for r in said} == {
        "a@sink.test": "spring", "550-x@sink.test": "spring", "b@sink.test": "spring",
        "tempfail-y@sink.test": "spring", "other@sink.test": None, "c@sink.test": "spring",
    }  # fmt: skip

    old = datetime(2000, 1, 1, tzinfo=UTC)
    folded = await retention.prune(database, retention.Cutoffs(old, old, old, old), batch=2)
    assert folded is not None
    assert folded.folded > 0
    assert await query(database, "SELECT * FROM campaign_moves") == []
    assert await counted(database, "t1", "spring") == expected
    assert (await campaigns.get(database, "t1", "spring", datetime.now(UTC))).settled_recently == 3


async def test_outcomes_are_counted_by_campaign_only_when_asked(database: db.Database, sink: Sink) -> None:
    await accept(database, in_campaign("metered", "a@sink.test"))
    await engine(database, sink, campaign_metrics=True).run_until_idle()
    await accept(database, in_campaign("unmetered", "b@sink.test"))
    await engine(database, sink).run_until_idle()
    labels = {"outcome": "delivered", "tenant": "t1"}
    get = REGISTRY.get_sample_value
    assert get("mtad_delivery_campaign_outcomes_total", {**labels, "campaign": "metered"}) == 1
    assert get("mtad_delivery_campaign_outcomes_total", {**labels, "campaign": "unmetered"}) is None


async def test_what_comes_back_counts_for_the_campaign(database: db.Database, sink: Sink) -> None:
    await accept(database, in_campaign("news", "a@sink.test", "b@sink.test"))
    await engine(database, sink).run_until_idle()
    rows = await query(database, "SELECT id, message, recipient FROM deliveries ORDER BY id")
    heard = [(signals.Kind.COMPLAINED, False), (signals.Kind.REPLIED, False), (signals.Kind.OPENED, True),
             (signals.Kind.OPENED, False), (signals.Kind.CLICKED, True)]  # fmt: skip
    for n, (kind, machine) in enumerate(heard):
        row = rows[n % 2]
        await signals.record(database, signals.Signal(kind, row["recipient"], datetime.now(UTC), row["message"],
                                                      row["id"], data={"machine": machine}))  # fmt: skip
    shown = (await campaigns.get(database, "t1", "news", datetime.now(UTC))).view(datetime.now(UTC))
    assert [shown[k] for k in ("complained", "replied", "opened", "clicked")] == [1, 1, 1, 0]
    assert (shown["opened_by_machines"], shown["clicked_by_machines"]) == (1, 1)


async def test_a_paused_campaign_waits_even_what_a_node_leased_before_and_goes_when_resumed(
    database: db.Database, sink: Sink
) -> None:
    await accept(database, in_campaign("spring", "a@sink.test"), message("other@sink.test"))
    now = datetime.now(UTC)
    leased = await leases.lease(database, "n0", 10, now, now.replace(year=now.year + 1))
    assert len(leased) == 2
    assert await campaigns.pause(database, "t1", "spring", "a wrong list", now) == 0  # both leased already
    attempts = [leases.Attempt(uuid.uuid4(), (d.id,), "g", "t1") for d in leased]
    begun = await leases.begin(database, "n0", attempts, datetime.now(UTC))
    [held] = begun.held
    assert begun.owned == {d.id for d in leased} - {held}
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'requeued'")
    assert json.loads(event["data"]) == {"reason": "campaign_paused"}
    await accept(database, in_campaign("spring", "b@sink.test"))  # new mail waits too
    await engine(database, sink).run_until_idle()
    assert sink.recipients() == []
    assert await counted(database, "t1", "spring") == {"queued": 2}
    found = await campaigns.get(database, "t1", "spring", datetime.now(UTC))
    assert (found.state, found.reason) == (campaigns.State.PAUSED, "a wrong list")

    assert await campaigns.resume(database, "t1", "spring", datetime.now(UTC)) == 2
    await engine(database, sink).run_until_idle()
    assert sorted(sink.recipients()) == ["a@sink.test", "b@sink.test"]
    assert await counted(database, "t1", "spring") == {"delivered": 2}


async def test_a_cancel_cancels_what_has_not_gone_out_and_what_comes_after(database: db.Database, sink: Sink) -> None:
    await accept(database, in_campaign("spring", "a@sink.test"))
    await engine(database, sink).run_until_idle()
    await accept(database, in_campaign("spring", "b@sink.test"), in_campaign("spring", "c@sink.test"))
    now = datetime.now(UTC)
    [leased] = await leases.lease(database, "n0", 1, now, now.replace(year=now.year + 1))
    assert await campaigns.cancel(database, "t1", "spring", "the wrong list", now) == (2, False)
    begun = await leases.begin(database, "n0", [leases.Attempt(uuid.uuid4(), (leased.id,), "g", "t1")], now)
    assert begun.owned == frozenset()  # its lease was taken back: never sent
    await accept(database, in_campaign("spring", "d@sink.test"))
    await engine(database, sink).run_until_idle()
    assert sink.recipients() == ["a@sink.test"]
    expected = {"delivered": 1, "cancelled:admin": 3}
    assert await scanned(database, "t1", "spring") == expected
    assert await counted(database, "t1", "spring") == expected
    assert await campaigns.cancel(database, "t1", "spring", "again", now) == (0, True)


async def test_a_campaigns_limits_hold_across_begins_and_set_aside_what_would_go_over(database: db.Database) -> None:
    now = datetime(2026, 12, 3, 10, 30, tzinfo=UTC)
    await campaigns.add(database, "t1", "hourly", now, campaigns.Limits(per_hour=2))
    await campaigns.add(database, "t1", "daily", now)
    await campaigns.limit(database, "t1", "daily", campaigns.Limits(per_day=3), now)
    hourly = [in_campaign("hourly", f"h{i}@example.com") for i in range(3)]
    await accept(database, *hourly, *(in_campaign("daily", f"d{i}@example.com") for i in range(3)),
                 message("free@example.com"))  # fmt: skip
    daily = (await campaigns.get(database, "t1", "daily", now)).id
    earlier = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    await query(database, "INSERT INTO campaign_sends VALUES ($1, $2, 2)", daily, earlier)  # two this day already
    leased = await leases.lease(database, "n0", 10, datetime.now(UTC), datetime.now(UTC).replace(year=2099))
    by_recipient = {d.recipient: d.id for d in leased}
    first = [by_recipient[r] for r in ("h0@example.com", "h1@example.com", "d0@example.com", "free@example.com")]
    begun = await leases.begin(database, "n0", [leases.Attempt(uuid.uuid4(), (d,), "g", "t1") for d in first], now)
    assert begun.owned == set(first)
    rest = [by_recipient[r] for r in ("h2@example.com", "d1@example.com", "d2@example.com")]
    begun = await leases.begin(database, "n0", [leases.Attempt(uuid.uuid4(), (d,), "g", "t1") for d in rest], now)
    assert (begun.owned, begun.set_aside, begun.limited) == (set(), set(), set(rest))
    due = await query(database, "SELECT recipient, state::text, next_attempt_at FROM deliveries "
                                "WHERE id = ANY($1)", rest)  # fmt: skip
    assert {r["recipient"]: (r["state"], r["next_attempt_at"]) for r in due} == {
        "h2@example.com": ("queued", datetime(2026, 12, 3, 11, 0, tzinfo=UTC)),
        "d1@example.com": ("queued", datetime(2026, 12, 4, 0, 0, tzinfo=UTC)),
        "d2@example.com": ("queued", datetime(2026, 12, 4, 0, 0, tzinfo=UTC)),
    }
    said = await query(database, "SELECT data FROM events WHERE kind = 'requeued' ORDER BY id")
    assert [json.loads(e["data"])["limit"] for e in said] == ["max_per_hour", "max_per_day", "max_per_day"]
    hour = datetime(2026, 12, 3, 10, tzinfo=UTC)
    sends = await query(database, "SELECT c.name, s.sends FROM campaign_sends s JOIN campaigns c "
                                  "ON c.id = s.campaign WHERE s.hour = $1 ORDER BY c.name", hour)  # fmt: skip
    assert [(r["name"], r["sends"]) for r in sends] == [("daily", 1), ("hourly", 2)]
    shown = (await campaigns.get(database, "t1", "hourly", now)).view(now)
    assert (shown["max_per_hour"], shown["max_per_day"]) == (2, None)
    with pytest.raises(errors.MtadError, match="max_per_hour"):
        campaigns.Limits(per_hour=0)


async def test_a_campaign_pauses_itself_while_its_account_pool_cannot_send_and_resumes_by_itself(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accounts.disable(database, "a", "maintenance", datetime.now(UTC))
    await accept(database, dataclasses.replace(relayed("r@example.net"), campaign="outreach"),
                 dataclasses.replace(relayed("s@example.net"), campaign="other", tenant="t2"))  # fmt: skip
    await campaigns.add(database, "t1", "idle", datetime.now(UTC))  # no mail through the pool: left alone
    engine = relaying(database, tls_files, settings=relay.Settings(poll=0.2, hand_back_after=0.5), poll_interval=0.2)
    running = asyncio.create_task(engine.run())

    async def paused() -> list[dict[str, Any]]:
        return [c.view(datetime.now(UTC)) for c in await campaigns.listing(database, datetime.now(UTC))]

    shown = await waiting.eventually_async(paused, lambda got: [c["state"] for c in got].count("paused") == 2)
    assert {(c["name"], c["paused_by"], c["account_pool"]) for c in shown} == {
        ("outreach", "auto", "p"), ("other", "auto", "p"), ("idle", None, None)}  # fmt: skip
    assert REGISTRY.get_sample_value("mtad_campaigns_pool_paused", {"pool": "p"}) == 2
    await accounts.enable(database, "a", "done", datetime.now(UTC))
    await smarthost.wait_for(2)
    await engine.wait_idle()
    engine.stop()
    await running
    shown = await paused()
    assert [(c["state"], c["paused_by"], c["delivered"]) for c in shown if c["name"] != "idle"] == [
        ("active", None, 1), ("active", None, 1)]  # fmt: skip
    said = await query(database, "SELECT kind, tenant, data FROM events WHERE kind LIKE 'campaign_%' ORDER BY id")
    assert [(e["kind"], e["tenant"], json.loads(e["data"])["by"]) for e in said] == [
        ("campaign_paused", "t1", "auto"), ("campaign_paused", "t2", "auto"),
        ("campaign_resumed", "t1", "auto"), ("campaign_resumed", "t2", "auto")]  # fmt: skip
    assert REGISTRY.get_sample_value("mtad_campaigns_pool_paused", {"pool": "p"}) == 0


async def test_a_campaign_made_beforehand_and_its_refusals(database: db.Database) -> None:
    now = datetime.now(UTC)
    await campaigns.add(database, "t1", "autumn", now)
    with pytest.raises(errors.Conflict):
        await campaigns.add(database, "t1", "autumn", now)
    with pytest.raises(errors.Conflict, match="is active, not paused"):
        await campaigns.resume(database, "t1", "autumn", now)
    with pytest.raises(errors.NotFound):
        await campaigns.pause(database, "t2", "autumn", "no such", now)
    with pytest.raises(errors.MtadError, match="invalid campaign name"):
        await campaigns.add(database, "t1", "a/b", now)
    assert [c.name for c in await campaigns.listing(database, now, "t1")] == ["autumn"]


async def test_x_mtad_campaign_names_it_and_never_reaches_a_recipient(make_submission: Factory) -> None:
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.envelope("app@example.org", "a@example.com")
        taken = await raw.data(b"X-Mtad-Campaign: spring-2026\r\n" + MESSAGE + b".\r\n")
        refusals = []
        for bad in (b"-dash", b"a b", b"x" * 65, "caf\u00e9".encode()):
            await raw.envelope("app@example.org", "a@example.com")
            refusals.append(await raw.data(b"X-Mtad-Campaign: " + bad + b"\r\n" + MESSAGE + b".\r\n"))
        await raw.close()
    assert taken.startswith("250")
    assert all(r.startswith("550 5.6.0 X-Mtad-Campaign: ") for r in refusals), refusals
    [row] = await query(srv.database, "SELECT m.body, c.name, c.tenant FROM messages m "
                                      "JOIN campaigns c ON c.id = m.campaign")  # fmt: skip
    assert (row["name"], row["tenant"]) == ("spring-2026", "default")
    assert b"x-mtad-campaign" not in bytes(row["body"]).lower()


async def test_the_admin_api_injects_into_a_campaign_and_pauses_resumes_cancels_it(database: db.Database) -> None:
    async with serving(database) as client:
        sent = {"envelope_sender": "app@example.org", "recipients": ["a@example.com"],
                "content": "X-Mtad-Campaign: other\r\nSubject: x\r\n\r\nhi\r\n", "campaign": "spring"}  # fmt: skip
        status, answer = await client.call("POST", "/v1/messages", json=sent)
        assert status == 202, answer
        status, answer = await client.call("POST", "/v1/messages", json={**sent, "campaign": "no spaces"})
        assert (status, answer["field"]) == (400, "campaign")
        status, listed = await client.call("GET", "/v1/campaigns")
        assert [(c["tenant"], c["name"], c["messages"], c["queued"]) for c in listed["campaigns"]] == [
            ("default", "spring", 1, 1)]  # fmt: skip
        status, paused = await client.call("POST", "/v1/campaigns/spring/pause", json={"reason": "why not"})
        assert (status, paused["held"], paused["state"]) == (200, 1, "paused")
        assert "acknowledged" in paused
        assert (await client.call("POST", "/v1/campaigns/spring/pause"))[0] == 409
        status, resumed = await client.call("POST", "/v1/campaigns/spring/resume")
        assert (status, resumed["released"], resumed["state"]) == (200, 1, "active")
        status, cancelled = await client.call("POST", "/v1/campaigns/spring/cancel")
        assert (status, cancelled["cancelled"], cancelled["state"]) == (200, 1, "cancelled")
        status, shown = await client.call("GET", "/v1/campaigns/spring")
        assert (status, shown["cancelled"], shown["done"]) == (200, 1, True)
        assert (await client.call("GET", "/v1/campaigns/autumn"))[0] == 404
        assert (await client.call("GET", "/v1/campaigns/bad%20name"))[0] == 400
        status, made = await client.call("POST", "/v1/campaigns", json={"name": "autumn", "max_per_hour": 5})
        assert (status, made["state"], made["deliveries"], made["max_per_hour"]) == (201, "active", 0, 5)
        status, limited = await client.call("POST", "/v1/campaigns/autumn/limit", json={"max_per_day": 100})
        assert (status, limited["max_per_hour"], limited["max_per_day"]) == (200, None, 100)
        status, refused = await client.call("POST", "/v1/campaigns/autumn/limit", json={"max_per_day": 0})
        assert (status, refused["field"]) == (400, "max_per_day")
    rows = await query(database, "SELECT body FROM messages")
    assert [bytes(r["body"]).lower().count(b"x-mtad-campaign") for r in rows] == [0]
    said = await query(database, "SELECT kind, tenant, data FROM events WHERE kind LIKE 'campaign_%' ORDER BY id")
    assert [(e["kind"], e["tenant"], json.loads(e["data"])) for e in said] == [
        ("campaign_paused", "default", {"campaign": "spring", "reason": "why not", "held": 1}),
        ("campaign_resumed", "default", {"campaign": "spring"}),
        ("campaign_cancelled", "default", {"campaign": "spring", "reason": "cancelled by an operator"}),
    ]
    [received] = await query(database, "SELECT data FROM events WHERE kind = 'received'")
    assert json.loads(received["data"])["campaign"] == "spring"


async def test_batches_naming_a_new_campaign_at_once_make_it_once(database: db.Database) -> None:
    async def one(n: int) -> None:
        await accept(database, *(in_campaign("burst", f"r{n}-{i}@example.com") for i in range(5)))

    await asyncio.gather(*(one(n) for n in range(4)))
    [found] = await campaigns.listing(database, datetime.now(UTC))
    assert (found.name, found.counts["messages"], found.counts["queued"]) == ("burst", 20, 20)


async def test_a_campaign_made_on_first_use_takes_its_tenants_limits(make_submission: Factory) -> None:
    limited = submission.TenantDefaults(campaign_max_per_hour=5, campaign_max_per_day=50)
    async with make_submission(tenant_defaults={"default": limited}) as srv:
        await campaigns.add(srv.database, "default", "own", datetime.now(UTC))  # made beforehand: its own
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        for name in (b"first", b"own"):
            await raw.envelope("app@example.org", "a@example.com")
            assert (await raw.data(b"X-Mtad-Campaign: " + name + b"\r\n" + MESSAGE + b".\r\n")).startswith("250")
        await raw.close()
    shown = {c.name: (c.max_per_hour, c.max_per_day) for c in await campaigns.listing(srv.database, datetime.now(UTC))}
    assert shown == {"own": (None, None), "first": (5, 50)}


async def lock_waits(database: db.Database) -> int:
    [row] = await query(database, "SELECT count(*) AS n FROM pg_stat_activity "
                                  "WHERE wait_event_type = 'Lock' AND datname = current_database()")  # fmt: skip
    return int(row["n"])


async def test_mail_accepted_as_its_campaign_is_cancelled_is_cancelled_and_never_sent(
    dsn: str, database: db.Database, sink: Sink
) -> None:
    """The accept reads the campaign as active, then waits (for an idempotency key
    another transaction holds) while the cancel runs; it must still end cancelled."""
    await campaigns.add(database, "t1", "spring", datetime.now(UTC))
    locker = await db.connect_once(dsn)
    try:
        await locker.execute_text("BEGIN")
        await locker.execute_text("INSERT INTO idempotency_keys VALUES ('t1', 'k', gen_random_uuid(), 'infinity')")
        late = dataclasses.replace(in_campaign("spring", "a@sink.test"), idempotency_key="k")
        accepting = asyncio.create_task(accept(database, late))
        await waiting.eventually_async(lambda: lock_waits(database), lambda n: n == 1)
        cancelling = asyncio.create_task(campaigns.cancel(database, "t1", "spring", "race", datetime.now(UTC)))
        # Done, or waiting for the accept's lock on the campaign.
        await waiting.eventually_async(lambda: lock_waits(database), lambda n: cancelling.done() or n == 2)
        await locker.execute_text("ROLLBACK")
        await accepting
        await cancelling
    finally:
        await db.close(locker)
    await engine(database, sink).run_until_idle()
    assert sink.recipients() == []
    assert await scanned(database, "t1", "spring") == {"cancelled:admin": 1}
    assert await counted(database, "t1", "spring") == {"cancelled:admin": 1}
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'cancelled'")
    assert json.loads(event["data"])["reason"] == "campaign_cancelled"


async def test_webhooks_carry_the_campaign_of_its_mails_events(database: db.Database, sink: Sink) -> None:
    sealer = vault.Vault(vault.Vault.new_key())
    await consumers.Consumers(database, [Outbox()]).catch_up()  # it starts after what is written already
    receiver = Receiver()
    serving = threading.Thread(target=receiver.serve_forever, daemon=True)
    serving.start()
    try:
        await webhooks.add(database, sealer, "t1", f"http://127.0.0.1:{receiver.server_port}/hook")
        await accept(database, in_campaign("news", "a@sink.test", "550-b@sink.test"), message("c@sink.test"))
        await engine(database, sink).run_until_idle()
        [row] = await query(database, "SELECT id, message, recipient FROM deliveries WHERE recipient = 'a@sink.test'")
        for kind, machine in ((signals.Kind.COMPLAINED, False), (signals.Kind.UNSUBSCRIBED, False),
                              (signals.Kind.OPENED, True), (signals.Kind.CLICKED, False)):  # fmt: skip
            await signals.record(database, signals.Signal(kind, row["recipient"], datetime.now(UTC), row["message"],
                                                          row["id"], data={"machine": machine}))  # fmt: skip
        await consumers.Consumers(database, [Outbox()]).catch_up()
        sender = Sender(database, sealer, SenderSettings(allow_networks=(ipaddress.ip_network("127.0.0.0/8"),)), "n1")
        async with sender.sending():
            for _ in range(20):  # a message's requests go one after the other
                await sender.send_due()
                await sender.drain()
                if len(receiver.got) >= 9:
                    break
        got = [json.loads(body) for _, body in receiver.got]
    finally:
        receiver.shutdown()
        receiver.server_close()
    said = Counter((r["type"], r["data"].get("campaign")) for r in got if r["data"]["tenant"] == "t1")
    theirs = ("received", "delivered", "bounced", "complained", "unsubscribed", "opened", "clicked")
    assert said == {**{(kind, "news"): 1 for kind in theirs}, ("received", None): 1, ("delivered", None): 1}


async def test_a_relayed_sends_campaign_slot_is_reserved_with_its_mailboxs_or_neither(database: db.Database) -> None:
    at = datetime(2026, 12, 3, 10, 30, tzinfo=UTC)
    await make(database, "a", min_gap=3600)  # a slot taken would keep it from sending for an hour
    await make(database, "b", pool="q")
    await campaigns.add(database, "t1", "full", at, campaigns.Limits(per_hour=1))
    await campaigns.add(database, "t1", "room", at, campaigns.Limits(per_hour=5, per_day=5))
    await accept(database, in_campaign("full", "f@example.net"), message("free@example.net"),
                 in_campaign("room", "r1@example.net"), in_campaign("room", "r2@example.net"))  # fmt: skip
    ids = {r["recipient"]: r["id"] for r in await query(database, "SELECT id, recipient FROM deliveries")}
    full = (await campaigns.get(database, "t1", "full", at)).id
    await query(database, "INSERT INTO campaign_sends VALUES ($1, $2, 1)", full, at.replace(minute=0))

    async def sends(name: str) -> int:
        found = await query(database, "SELECT coalesce(sum(s.sends), 0) AS n FROM campaign_sends s "
                                      "JOIN campaigns c ON c.id = s.campaign WHERE c.name = $1", name)  # fmt: skip
        return int(found[0]["n"])

    async def choose(pool: str, *recipients: str) -> choosing.Chosen:
        wants = [choosing.Want(1, ids[r]) for r in recipients]
        return await choosing.choose_healthy(database, pool, wants, at, random.Random(1), "n0")

    # The campaign at its limit takes no account: the mail of no campaign behind it gets account a.
    chosen = await choose("p", "f@example.net", "free@example.net")
    assert chosen.limited == {0: datetime(2026, 12, 3, 11, 0, tzinfo=UTC)}
    [taken] = chosen.reservations
    [reserved] = await query(database, "SELECT delivery, campaign FROM account_reservations")
    assert (taken.account.name, reserved["delivery"], reserved["campaign"]) == ("a", ids["free@example.net"], None)
    assert await sends("full") == 1

    # Account a is in its gap now: the campaign with room takes no slot either.
    chosen = await choose("p", "r1@example.net")
    assert (chosen.reservations, chosen.limited, await sends("room")) == ([], {}, 0)

    # Through account b both are taken, the campaign's within its limits, and given back together.
    [first] = (await choose("q", "r1@example.net")).reservations
    assert await sends("room") == 1
    assert await accounts.release(database, first.id)
    assert await sends("room") == 0


async def test_a_relayed_campaign_at_its_limit_waits_for_the_next_hour_holding_no_account(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await campaigns.add(database, "t1", "outreach", datetime.now(UTC), campaigns.Limits(per_hour=1))
    await accept(database, *(dataclasses.replace(relayed(f"r{i}@example.net"), campaign="outreach") for i in range(3)),
                 relayed("other@example.net"))  # fmt: skip
    await relaying(database, tls_files).run_until_idle()
    assert len(smarthost.transactions) == 2  # one of the campaign's, and the mail of no campaign
    reserved = await query(database, "SELECT campaign FROM account_reservations ORDER BY id")
    assert sorted(r["campaign"] is not None for r in reserved) == [False, True]  # no slot for the two set aside
    waiting = await query(database, "SELECT state::text, next_attempt_at FROM deliveries WHERE state <> 'delivered'")
    [(state, due)] = {(r["state"], r["next_attempt_at"]) for r in waiting}  # both until the next hour
    assert (len(waiting), state) == (2, "queued")
    assert due.minute == due.second == due.microsecond == 0
    assert datetime.now(UTC) < due <= datetime.now(UTC) + timedelta(hours=1)
    said = await query(database, "SELECT data FROM events WHERE kind = 'requeued'")
    assert [json.loads(e["data"])["reason"] for e in said] == ["campaign_limit"] * 2


async def test_a_send_held_unknown_when_its_campaign_was_cancelled_is_cancelled_not_sent_again(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, dataclasses.replace(relayed("lost-once-1@example.net"), campaign="spring"))
    await relaying(database, tls_files).run_until_idle()
    assert await scanned(database, "t1", "spring") == {"unknown": 1}  # it may have gone out: not cancelled
    assert await campaigns.cancel(database, "t1", "spring", "the wrong list", datetime.now(UTC)) == (0, False)
    [row] = await query(database, "SELECT id FROM deliveries")
    changed = await unknowns.again(database, [row["id"]], {"reason": "not_in_sent_folder"}, datetime.now(UTC))
    assert changed == {row["id"]}
    await relaying(database, tls_files).run_until_idle()
    assert len(smarthost.transactions) == 1  # not sent again
    assert await scanned(database, "t1", "spring") == {"cancelled:admin": 1}
    assert (await campaigns.get(database, "t1", "spring", datetime.now(UTC))).view(datetime.now(UTC))["done"]
    said = await query(database, "SELECT tenant, data FROM events WHERE kind IN ('cancelled', 'requeued')")
    assert [(e["tenant"], json.loads(e["data"])["reason"]) for e in said] == [("t1", "campaign_cancelled")]
