"""What guards the shared reputation, against real PostgreSQL and real SMTP: quotas
at accept counted across two submission servers (two nodes), a paused tenant's
mail held (queued, leased and in the engine) and released by its resume, the
reputation windows, the auto-pause by complaints and bounces, and probation."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mtad import db
from mtad.base import errors
from mtad.base.replies import Reply
from mtad.feedback import consumers, reputation, webhook_outbox, webhooks
from mtad.spool import leases, quotas, tenants
from mtad.submission import TenantDefaults
from tests.integration.delivering import accept, engine, new_message
from tests.integration.mailboxes import SEALER
from tests.integration.submitting import Factory
from tests.pg import query
from tests.sink import Sink
from tests.smtpclient import RawClient


def message(n: int, size: int = 0) -> bytes:
    lines = "".join("x" * 99 + "\r\n" for _ in range(size // 101))
    return f"From: app@example.org\r\nSubject: {n}\r\n\r\n{lines}\r\n".encode()


async def send(port: int, n: int, *, size: int = 0, key: str | None = None) -> str:
    """The reply to DATA (or to the first command refused)."""
    client = await RawClient.connect("127.0.0.1", port)
    try:
        await client.ehlo()
        reply = await client.command("MAIL FROM:<app@example.org>")
        if not reply.startswith("250"):
            return reply
        assert (await client.command("RCPT TO:<rcpt@example.com>")).startswith("250")
        head = f"Idempotency-Key: {key}\r\n".encode() if key else b""
        return await client.data(head + message(n, size) + b".\r\n")
    finally:
        await client.close()


async def test_a_rate_quota_holds_across_two_submission_servers(make_submission: Factory) -> None:
    limited = {"default": TenantDefaults(quota=quotas.Quota(max_per_hour=3))}
    async with make_submission(tenant_defaults=limited) as one, make_submission(tenant_defaults=limited) as two:
        assert (await send(one.port, 1, key="k1")).startswith("250")
        assert (await send(two.port, 2)).startswith("250")
        assert (await send(one.port, 1, key="k1")).startswith("250")  # a resubmission counts once
        assert (await send(two.port, 3)).startswith("250")
        refused = await send(one.port, 4)
        assert refused.startswith("451 4.7.1")
        assert "max_per_hour" in refused
        assert "3 messages" in refused
        # The refusal is remembered: the next MAIL is refused at once.
        assert (await send(one.port, 5)).startswith("451 4.7.1")
        assert (await send(two.port, 6)).startswith("451 4.7.1")
        [row] = await query(one.database, "SELECT messages FROM tenant_usage WHERE period = 'hour'")
        assert row["messages"] == 3
        assert len(await query(one.database, "SELECT id FROM messages")) == 3


async def test_a_day_quota_names_itself(make_submission: Factory) -> None:
    limited = {"default": TenantDefaults(quota=quotas.Quota(max_per_hour=10, max_per_day=1))}
    async with make_submission(tenant_defaults=limited) as srv:
        assert (await send(srv.port, 1)).startswith("250")
        refused = await send(srv.port, 2)
        assert refused.startswith("451 4.7.1")
        assert "max_per_day" in refused


async def test_the_spool_quota_counts_what_the_tenant_holds(make_submission: Factory) -> None:
    async with make_submission(default_quota=quotas.Quota(max_queued_bytes=3000)) as one:
        assert (await send(one.port, 1, size=1500)).startswith("250")
        refused = await send(one.port, 2, size=1500)  # this process counts what it accepted
        assert refused.startswith("452 4.3.1")
        assert "max_queued_bytes" in refused
        assert (await send(one.port, 3, size=100)).startswith("250")
        async with make_submission(default_quota=quotas.Quota(max_queued_bytes=3000)) as two:
            assert (await send(two.port, 4, size=1500)).startswith("452 4.3.1")  # another node reads the spool
        # Delivered mail no longer counts.
        await query(one.database, "UPDATE deliveries SET state = 'delivered'")
        await one.gate.refresh()
        assert (await send(one.port, 5, size=1500)).startswith("250")


async def test_a_paused_tenant_is_refused_with_its_reason_and_resumed(make_submission: Factory) -> None:
    async with make_submission() as srv:
        now = datetime.now(UTC)
        assert await tenants.pause(srv.database, "default", "too many complaints", by="operator", now=now) == 0
        assert await tenants.pause(srv.database, "default", "again", by="operator", now=now) is None
        await srv.gate.refresh()
        refused = await send(srv.port, 1)
        assert refused.startswith("451 4.7.1")
        assert "paused (operator): too many complaints" in refused
        assert await tenants.resume(srv.database, "default", by="operator", now=now) == 0
        await srv.gate.refresh()
        assert (await send(srv.port, 2)).startswith("250")
        kinds = [r["kind"] for r in await query(srv.database, "SELECT kind FROM events WHERE tenant = 'default' "
                                                              "AND message IS NULL ORDER BY id")]  # fmt: skip
        assert kinds == ["tenant_paused", "tenant_resumed"]


async def test_a_pause_holds_once_what_passed_the_gate_before_it_is_committed(database: db.Database) -> None:
    """The gate's settle() (which a node's acknowledgement of a pause waits for)
    returns only once every message checked before it is done: none of them is
    answered after the pause is said to hold."""
    gate = quotas.Gate(database, tenants.States(database), {})
    await gate.refresh()
    taken = await gate.take("shop", 100)  # past the check, being committed
    assert isinstance(taken, quotas.Taken)
    assert await tenants.pause(database, "shop", "checks", by="operator", now=datetime.now(UTC)) == 0
    await gate.refresh()
    with pytest.raises(errors.SpoolError, match="1 messages checked before the change are still being committed"):
        await gate.settle(0.05)
    gate.done(taken)  # committed: its 250 goes before the pause holds
    await gate.settle(5.0)
    refused = await gate.take("shop", 100)
    assert isinstance(refused, Reply)
    assert refused.code == 451
    other = await gate.take("other", 100)  # checked after the settle: the next one waits for it
    assert isinstance(other, quotas.Taken)
    gate.done(other)
    await gate.settle(5.0)


async def test_a_paused_tenants_mail_waits_queued_and_leased(database: db.Database, sink: Sink) -> None:
    queued, leased = new_message("a@sink.test"), new_message("b@sink.test")
    await accept(database, queued, leased)
    now = datetime.now(UTC)
    [held] = [d for d in await leases.lease(database, "n1", 10, now, now + timedelta(minutes=5))
              if d.message == leased.id]  # fmt: skip
    await query(database, "UPDATE deliveries SET state = 'queued', lease_owner = NULL, lease_expires_at = NULL "
                          "WHERE message = $1", queued.id)  # fmt: skip
    assert await tenants.pause(database, "t1", "checking", by="operator", now=now) == 1

    # Leased before the pause: held back when its attempt would begin.
    begun = await leases.begin(database, "n1", [leases.Attempt(uuid.uuid4(), (held.id,), "g", "t1")], now)
    assert (begun.owned, begun.held) == (frozenset(), frozenset({held.id}))
    rows = await query(database, "SELECT state::text, next_attempt_at = 'infinity' AS waits FROM deliveries")
    assert [(r["state"], r["waits"]) for r in rows] == [("queued", True), ("queued", True)]
    await engine(database, sink).run_until_idle()
    assert sink.received == []

    assert await tenants.resume(database, "t1", by="operator", now=datetime.now(UTC)) == 2
    await engine(database, sink).run_until_idle()
    assert sorted(sink.recipients()) == ["a@sink.test", "b@sink.test"]
    [requeued] = await query(database, "SELECT data FROM events WHERE kind = 'requeued'")
    assert '"tenant_paused"' in requeued["data"]


async def event(database: db.Database, kind: str, tenant: str, data: dict[str, Any], delivery: int | None = None,
                message: uuid.UUID | None = None) -> None:  # fmt: skip
    await query(database, "INSERT INTO events (at, kind, tenant, message, delivery, data) "
                          "VALUES (now(), $1, $2, $3, $4, $5::jsonb)",
                kind, tenant, message, delivery, json.dumps(data))  # fmt: skip


async def delivered(database: db.Database, tenant: str, count: int, *, group: str = "gmail",
                    source: str = "192.0.2.10") -> list[tuple[uuid.UUID, int]]:  # fmt: skip
    """`count` delivered events, each of a delivery of its own; returns (message, delivery)."""
    made = []
    for n in range(count):
        m, d = uuid.uuid4(), 10_000 + n
        await event(database, "delivered", tenant, {"group": group, "source": source, "class": "delivered"}, d, m)
        made.append((m, d))
    return made


GUARD = reputation.Guard(max_complaint_rate=0.1, max_bounce_rate=0.2, min_volume=10, graduate_after=15)


async def test_windows_count_by_tenant_provider_and_source(database: db.Database) -> None:
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings(default=GUARD))])
    await counting.catch_up()
    sent = await delivered(database, "shop", 4)
    await event(database, "deferred", "shop", {"group": "gmail", "source": "192.0.2.10"})
    await event(database, "bounced", "shop", {"group": "gmail", "source": "192.0.2.10", "class": "recipient",
                                              "reason": "userunknown"})  # fmt: skip
    await event(database, "bounced", "shop", {"group": "gmail", "source": "192.0.2.10", "class": "content"})
    # Refused for the sender (the address, its authentication, the rate): a deferral
    # counts as one, a bounce is not a hard bounce (the recipient is not at fault).
    await event(database, "deferred", "shop", {"group": "gmail", "source": "192.0.2.10", "reason": "ratelimited"})
    await event(database, "bounced", "shop", {"group": "gmail", "source": "192.0.2.10", "class": "content",
                                              "reason": "blocked"})  # fmt: skip
    message, delivery = sent[0]
    # Later signals carry no group or source: they count where their delivery left from.
    await event(database, "complained", "shop", {"recipient": "a@x"}, delivery, message)
    await event(database, "unsubscribed", "shop", {"recipient": "a@x"}, delivery, message)
    await event(database, "bounced", "shop", {"async": True, "hard": True}, sent[1][1], sent[1][0])
    await event(database, "bounced", "shop", {"async": True, "hard": False}, sent[2][1], sent[2][0])
    await event(database, "bounced", "shop", {"async": True, "hard": False, "reason": "authfailure"},
                sent[3][1], sent[3][0])  # fmt: skip
    await counting.catch_up()
    found = {(w["scope"], w["key"]): w for w in await reputation.windows(database)}
    expected = {"delivered": 4, "deferred": 2, "bounced": 2, "complained": 1, "unsubscribed": 1, "refused": 3}
    for key in (("tenant", "shop"), ("provider", "gmail"), ("source", "192.0.2.10")):
        assert found[key]["1h"] == expected
        assert found[key]["24h"] == expected
    # Another tenant's mail through the same provider: the provider's window holds both,
    # each tenant's holds its own.
    await delivered(database, "other", 2)
    await counting.catch_up()
    [gmail] = await reputation.windows(database, "provider", ["gmail"])
    assert gmail["24h"]["delivered"] == 6
    [shops] = await reputation.windows(database, "provider", ["gmail"], tenant="shop")
    assert shops["24h"]["delivered"] == 4


async def test_windows_count_the_same_in_spans_of_two_transactions(database: db.Database) -> None:
    # Each step's own transaction takes an xid: spans of two still catch up.
    short = consumers.Settings(span=2)
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings(default=GUARD))], short)
    await counting.catch_up()
    await delivered(database, "shop", 5)
    await event(database, "bounced", "shop", {"group": "gmail", "source": "192.0.2.10", "class": "recipient"})
    assert await counting.catch_up() == 1  # the bounce read; the deliveries counted in SQL
    [window] = await reputation.windows(database, "source", ["192.0.2.10"])
    assert (window["1h"]["delivered"], window["1h"]["bounced"]) == (5, 1)


async def test_complaints_pause_a_tenant_once_the_volume_is_there(database: db.Database) -> None:
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings(default=GUARD))])
    await counting.catch_up()
    sent = await delivered(database, "shop", 9)
    for m, d in sent[:3]:  # 3 of 9: a third, but under the minimum volume
        await event(database, "complained", "shop", {}, d, m)
    await counting.catch_up()
    assert (await tenants.state(database, "shop"))["paused_at"] is None
    await delivered(database, "shop", 1)
    await counting.catch_up()
    state = await tenants.state(database, "shop")
    assert state["paused_by"] == "auto"
    assert state["paused_reason"].startswith("complaint rate 0.3000 over 1h (3 of 10 delivered)")
    [paused] = await query(database, "SELECT data FROM events WHERE kind = 'tenant_paused'")
    assert '"rate":"complaint"' in paused["data"].replace(" ", "")

    # Resumed: only what is counted from now on can pause it again.
    await tenants.resume(database, "shop", by="operator", now=datetime.now(UTC) + timedelta(minutes=1))
    await delivered(database, "shop", 1)
    await counting.catch_up()
    assert (await tenants.state(database, "shop"))["paused_at"] is None


async def test_hard_bounces_pause_a_tenant(database: db.Database) -> None:
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings(default=GUARD))])
    await counting.catch_up()
    await delivered(database, "shop", 8)
    for _ in range(3):
        await event(database, "bounced", "shop", {"group": "gmail", "class": "recipient"})
    await counting.catch_up()
    assert (await tenants.state(database, "shop"))["paused_reason"].startswith("hard-bounce rate 0.2727 over 1h")


async def test_a_tenant_on_probation_graduates_within_the_rates(database: db.Database) -> None:
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings(default=GUARD))])
    await counting.catch_up()
    await delivered(database, "older", 20)  # sent before its probation: not counted
    await counting.catch_up()
    await tenants.set_probation(database, "older", True, datetime.now(UTC))
    await delivered(database, "older", 14)
    await counting.catch_up()
    state = await tenants.state(database, "older")
    assert (state["probation"], state["probation_sent"]) == (True, 14)
    await delivered(database, "older", 1)
    await counting.catch_up()
    state = await tenants.state(database, "older")
    assert state["probation"] is False
    assert state["graduated_at"] is not None
    [graduated] = await query(database, "SELECT data FROM events WHERE kind = 'tenant_graduated'")
    assert '"sent": 15' in graduated["data"]


async def test_an_auto_pause_is_a_webhook_of_its_tenant(database: db.Database) -> None:
    await webhooks.add(database, SEALER, "shop", "https://hooks.example.net/mtad", ["tenant_paused"])
    counting = consumers.Consumers(database, [reputation.Reputation(reputation.Settings(default=GUARD))])
    outbox = consumers.Consumers(database, [webhook_outbox.Outbox()])
    await counting.catch_up()
    await outbox.catch_up()
    sent = await delivered(database, "shop", 10)
    for m, d in sent[:2]:
        await event(database, "complained", "shop", {}, d, m)
    await counting.catch_up()
    await outbox.catch_up()
    [request] = await query(database, "SELECT payload FROM webhook_messages")
    body = json.loads(request["payload"])
    assert (body["type"], body["data"]["tenant"], body["data"]["by"]) == ("tenant_paused", "shop", "auto")
    assert body["data"]["reason"].startswith("complaint rate 0.2000 over 1h")
