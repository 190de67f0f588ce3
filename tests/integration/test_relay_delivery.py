"""Relayed mail end to end in one process: messages that name an account pool go
through the pool's sending accounts to a smarthost sink (AUTH over verified TLS,
on loopback), and each reply class does what it should to the reservation, the
account and the mail."""

from __future__ import annotations

import asyncio
import collections
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY

from mtad import db
from mtad.base.vault import Secret
from mtad.deliver import egress
from mtad.mailboxes import accounts, relay
from mtad.mailboxes.accounts import State
from tests import waiting
from tests.integration.delivering import accept, deliveries, new_message
from tests.integration.mailboxes import SEALER, add, frozen, relayed, relaying, reservations
from tests.integration.tokens import TokenServer
from tests.pg import query
from tests.sink import Sink

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def account_events(database: db.Database, kind: str) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT data FROM events WHERE kind = $1 ORDER BY id", kind)
    return [json.loads(r["data"]) for r in rows]


async def test_relayed_mail_spreads_over_the_pool_and_each_send_is_confirmed(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await add(database, smarthost, "b")
    await accept(database, *(relayed(f"r{i}@example.net") for i in range(4)))
    await relaying(database, tls_files).run_until_idle()
    assert collections.Counter(m.login for m in smarthost.received) == {"a@example.com": 2, "b@example.com": 2}
    assert all(m.tls and m.sender == "app@example.org" for m in smarthost.received)
    rows = await deliveries(database)
    assert {r["state"] for r in rows.values()} == {"delivered"}
    confirmed = await query(database, "SELECT state::text AS state, delivery FROM account_reservations")
    assert [r["state"] for r in confirmed] == ["confirmed"] * 4
    assert {r["delivery"] for r in confirmed} == {r["id"] for r in rows.values()}
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'delivered' AND delivery = $1",
                          rows["r0@example.net"]["id"])  # fmt: skip
    data = json.loads(event["data"])
    assert (data["account_pool"], data["smarthost"], data["group"]) == (
        "p",
        f"localhost:{smarthost.port}",
        "accounts:p",
    )
    assert data["account"] in ("a", "b")


async def test_rewrite_from_sends_as_the_chosen_mailbox_and_keeps_the_display_name(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    body = b"From: Shop Team <news@shop.example>\r\nSubject: t\r\n\r\nhello\r\n"
    await accept(database, relayed("r@example.net", body=body))
    settings = relay.Settings(pools={"p": relay.PoolSettings(rewrite_from=True)}, poll=0.2)
    await relaying(database, tls_files, settings=settings).run_until_idle()
    [message] = smarthost.received
    assert message.sender == "a@example.com"
    assert message.data.startswith(b"From: Shop Team <a@example.com>\r\nSubject: t\r\n")
    assert b"news@shop.example" not in message.data


async def test_relayed_mail_leaves_from_a_leased_address_of_its_source_pool(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    source = egress.PoolSettings("out", ("127.0.0.10", "127.0.0.11"), egress.Policy.ROUND_ROBIN)
    await accept(database, *(relayed(f"r{i}@example.net") for i in range(4)))
    engine = relaying(database, tls_files, pools=egress.Egress({"out": source}), default_pool="out")
    await engine.run_until_idle()
    assert collections.Counter(m.peer for m in smarthost.received) == {"127.0.0.10": 2, "127.0.0.11": 2}
    sources = {(e["source"], e["pool"]) for e in await account_events(database, "delivered")}
    assert sources == {("127.0.0.10", "out"), ("127.0.0.11", "out")}
    held = await query(database, "SELECT address, node, sends FROM source_leases ORDER BY address")
    assert [tuple(r) for r in held] == [("127.0.0.10", "n1", None), ("127.0.0.11", "n1", None)]


def midnight_after(at: datetime) -> datetime:
    return datetime.combine(at.date() + timedelta(days=1), datetime.min.time(), UTC)


@pytest.mark.parametrize(
    ("reply", "state", "rest"),
    [
        ("451 4.7.1 Message rate limit exceeded", State.COOLING, timedelta(hours=1)),
        ("421 4.7.28 Our system has detected an unusual rate of mail. gsmtp", State.COOLING, timedelta(hours=4)),
        ("550 5.4.5 Daily user sending limit exceeded.", State.PARKED, None),  # until the day resets
    ],
)
async def test_a_quota_or_rate_reply_rests_the_account_keeps_its_slot_and_the_mail_goes_through_another(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path], reply: str, state: State,
    rest: timedelta | None,
) -> None:  # fmt: skip
    await add(database, smarthost, "a")  # tried first: both unused, a has the lower id
    await add(database, smarthost, "b")
    smarthost.mail_replies["a@example.com"] = reply
    await accept(database, relayed("r@example.net"))
    now = frozen()
    until = now + rest if rest is not None else midnight_after(now)
    await relaying(database, tls_files, now=lambda: now).run_until_idle()
    [message] = smarthost.received
    assert message.login == "b@example.com"
    row = (await deliveries(database))["r@example.net"]
    assert (row["state"], row["attempts"]) == ("delivered", 1)  # the reroute spent no attempt
    a = await accounts.get(database, "a")
    assert (a.state, a.state_until) == (state, until)
    assert await reservations(database, "a") == ["reserved"]  # the provider says it counted
    assert await reservations(database, "b") == ["confirmed"]
    [moved] = await account_events(database, "account_state")
    assert (moved["name"], moved["from"], moved["to"]) == ("a", "active", state.value)


async def test_a_refused_login_disconnects_the_account_frees_its_slot_and_reroutes(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a", secret="wrong")
    await add(database, smarthost, "b")
    await accept(database, relayed("r1@example.net"))
    engine = relaying(database, tls_files)
    await engine.run_until_idle()
    a = await accounts.get(database, "a")
    assert (a.state, a.state_until) == (State.DISCONNECTED, None)  # until an operator enables it
    assert "535" in (a.state_reason or "")
    assert await reservations(database, "a") == ["released"]  # nothing was sent: the slot is free
    row = (await deliveries(database))["r1@example.net"]
    assert (row["state"], row["attempts"]) == ("delivered", 1)
    await accept(database, relayed("r2@example.net"))
    await engine.run_until_idle()
    assert [m.login for m in smarthost.received] == ["b@example.com", "b@example.com"]


async def test_a_recipient_refusal_bounces_suppresses_and_frees_the_slot(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("reject-1@example.net"))
    engine = relaying(database, tls_files)
    await engine.run_until_idle()
    row = (await deliveries(database))["reject-1@example.net"]
    assert (row["state"], row["reason"]) == ("bounced", "recipient_rejected")
    assert (await accounts.get(database, "a")).state is State.ACTIVE
    assert await reservations(database, "a") == ["released"]
    [suppressed] = await query(database, "SELECT tenant, address, reason, detail FROM suppressions")
    assert (suppressed["tenant"], suppressed["address"]) == ("t1", "reject-1@example.net")
    assert (suppressed["reason"], suppressed["detail"][:9]) == ("hard_bounce", "550 5.1.1")  # why, and the reply
    [bounce] = await account_events(database, "account_bounce")
    assert (bounce["name"], bounce["classes"]) == ("a", ["recipient"])
    # The tenant's next message to the address is cancelled at accept, never sent.
    await accept(database, relayed("reject-1@example.net"))
    await engine.run_until_idle()
    rows = await query(database, "SELECT state::text AS state, reason::text AS reason FROM deliveries ORDER BY id")
    assert [(r["state"], r["reason"]) for r in rows] == [("bounced", "recipient_rejected"), ("cancelled", "suppressed")]
    assert smarthost.connections == 1


async def test_a_content_refusal_fails_the_message_not_the_account(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("content-1@example.net"))
    await relaying(database, tls_files).run_until_idle()
    row = (await deliveries(database))["content-1@example.net"]
    assert (row["state"], row["reason"]) == ("bounced", "content_rejected")
    assert (await accounts.get(database, "a")).state is State.ACTIVE
    assert await reservations(database, "a") == ["released"]
    assert await query(database, "SELECT 1 FROM suppressions") == []


async def test_a_transient_refusal_defers_with_back_off_and_counts_against_the_account(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("tempfail-1@example.net"))
    now = frozen()
    await relaying(database, tls_files, now=lambda: now).run_until_idle()
    row = (await deliveries(database))["tempfail-1@example.net"]
    assert (row["state"], row["reason"]) == ("deferred", "mx_tempfail")
    assert row["next_attempt_at"] == now + timedelta(seconds=60)
    assert await reservations(database, "a") == ["released"]  # refused at RCPT: it did not go out
    [failure] = await account_events(database, "account_failure")
    assert (failure["name"], failure["classes"], failure["reply"]) == (
        "a",
        ["transient"],
        "451 4.3.0 Temporary failure, try again",
    )


async def test_an_unknown_outcome_keeps_the_slot(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accept(database, relayed("disconnect-in-data-1@example.net"))
    await relaying(database, tls_files).run_until_idle()
    row = (await deliveries(database))["disconnect-in-data-1@example.net"]
    assert row["state"] == "unknown"  # held, never sent again unseen (tests/integration/test_unknown_sends.py)
    assert await reservations(database, "a") == ["reserved"]  # it may have gone out: it counts


async def test_the_pool_pauses_when_no_account_can_send_and_resumes_by_itself(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")
    await accounts.disable(database, "a", "maintenance", datetime.now(UTC))
    await accept(database, relayed("r@example.net"))
    # Only an operator can free an account: the mail goes back to the spool and is
    # looked at again after hand_back_after (its lease loop polls every 0.2 s here).
    engine = relaying(database, tls_files, settings=relay.Settings(poll=0.2, hand_back_after=0.5), poll_interval=0.2)
    running = asyncio.create_task(engine.run())

    async def handed_back() -> bool:
        return bool(await query(database, "SELECT 1 FROM events WHERE kind = 'requeued'"))

    await waiting.eventually_async(handed_back)
    [event] = await account_events(database, "account_pool")
    assert (event["pool"], event["paused"], event["accounts"]) == ("p", True, 1)
    assert REGISTRY.get_sample_value("mtad_account_pool_paused", {"pool": "p"}) == 1
    [requeued] = await account_events(database, "requeued")
    assert (requeued["reason"], requeued["account_pool"]) == ("account_pool_busy", "p")
    await accounts.enable(database, "a", "done", datetime.now(UTC))
    await smarthost.wait_for(1)
    await engine.wait_idle()
    engine.stop()
    await running
    assert [e["paused"] for e in await account_events(database, "account_pool")] == [True, False]
    assert REGISTRY.get_sample_value("mtad_account_pool_paused", {"pool": "p"}) == 0
    row = (await deliveries(database))["r@example.net"]
    assert (row["state"], row["attempts"]) == ("delivered", 1)  # waiting spent no attempt


async def test_mail_that_would_wait_long_for_a_mailbox_goes_back_to_the_spool_and_holds_no_room(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a", daily_cap=1)  # its day is UTC's
    await accept(database, *(relayed(f"r{i}@example.net") for i in range(4)))
    engine = relaying(database, tls_files, max_held=3)  # the node cannot hold all four at once
    running = asyncio.create_task(engine.run())
    await smarthost.wait_for(1)

    async def three_handed_back() -> bool:
        rows = await query(database, "SELECT 1 FROM events WHERE kind = 'requeued'")
        return len(rows) == 3 and engine.statistics().held == 0

    await waiting.eventually_async(three_handed_back)  # the fourth was leased once room was made
    engine.stop()
    await running
    tomorrow = midnight_after(datetime.now(UTC))
    undelivered = [r for r in (await deliveries(database)).values() if r["state"] != "delivered"]
    assert len(undelivered) == 3
    # Queued, due when the account's day resets, no attempt spent, no node's lease.
    assert {(r["state"], r["attempts"], r["lease_owner"], r["next_attempt_at"]) for r in undelivered} == {
        ("queued", 0, None, tomorrow)
    }
    assert {e["until"] for e in await account_events(database, "requeued")} == {tomorrow.isoformat()}
    assert len(smarthost.received) == 1


async def test_a_parked_account_sends_again_when_its_day_resets(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")  # its day is UTC's
    smarthost.mail_replies["a@example.com"] = "550 5.4.5 Daily user sending limit exceeded."
    await accept(database, relayed("r@example.net"))
    midnight = midnight_after(datetime.now(UTC))
    clock = [midnight - timedelta(minutes=30)]
    engine = relaying(database, tls_files, now=lambda: clock[0])
    running = asyncio.create_task(engine.run())

    async def parked() -> bool:
        return (await accounts.get(database, "a")).state is State.PARKED

    await waiting.eventually_async(parked)
    assert (await accounts.get(database, "a")).state_until == midnight
    del smarthost.mail_replies["a@example.com"]
    clock[0] = midnight + timedelta(seconds=1)  # a new day
    await smarthost.wait_for(1)
    await engine.wait_idle()
    engine.stop()
    await running
    assert await reservations(database, "a") == ["reserved", "confirmed"]  # yesterday's slot stayed taken
    moves = [(e["from"], e["to"]) for e in await account_events(database, "account_state")]
    assert moves == [("active", "parked"), ("parked", "active")]  # its return is recorded too
    assert (await accounts.get(database, "a")).state is State.ACTIVE


async def test_an_xoauth2_account_relays_with_a_token_from_its_refresh_token(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    endpoint = await TokenServer().start()
    try:
        # b first (the lower id, so tried first): its refresh token was revoked.
        await add(database, smarthost, "b", secret="revoked", mechanism=accounts.Mechanism.XOAUTH2)
        await add(database, smarthost, "a", secret="good", mechanism=accounts.Mechanism.XOAUTH2)
        for name in ("a", "b"):
            await accounts.set_oauth(database, name, endpoint.url, "mtad-client", SEALER.seal(Secret("cs")), None)
        assert smarthost.logins is not None
        smarthost.logins["a@example.com"] = "access-2"  # the endpoint's second answer (b's request was first)
        await accept(database, relayed("r1@example.net"))
        await relaying(database, tls_files).run_until_idle()
    finally:
        await endpoint.stop()
    assert [r["refresh_token"] for r in endpoint.requests] == ["revoked", "good"]
    b = await accounts.get(database, "b")
    assert (b.state, b.state_until) == (State.DISCONNECTED, None)
    assert "invalid_grant" in (b.state_reason or "")
    [message] = smarthost.received
    assert message.login == "a@example.com"
    assert (await deliveries(database))["r1@example.net"]["attempts"] == 1


async def test_no_secret_reaches_a_log_line_or_an_event(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a", secret="pw-wrong-one")
    await add(database, smarthost, "b")
    await accept(database, relayed("r@example.net"), relayed("tempfail-1@example.net"))
    with structlog.testing.capture_logs() as logs:
        await relaying(database, tls_files).run_until_idle()
    assert any(line["event"] == "account_state_changed" for line in logs)
    events = await query(database, "SELECT data::text AS data FROM events")
    everything = repr(logs) + "".join(e["data"] for e in events)
    assert "pw-" not in everything


async def test_the_breaker_trips_on_repeated_failures_but_not_in_a_general_outage(database: db.Database) -> None:
    def make(name: str) -> accounts.Account:
        return accounts.Account(name=name, address=f"{name}@example.com", pool="p", host="smtp.example.com",
                                port=587, login=name)  # fmt: skip

    a = await accounts.add(database, make("a"))
    b = await accounts.add(database, make("b"))
    breaker = accounts.Breaker()  # 5 failures in 30 minutes, 10 system successes, 2 trips a day disconnect
    data = {"reply": "451 4.3.0 Temporary failure"}

    async def successes(at: datetime) -> None:
        for i in range(10):
            decision = await accounts.reserve(database, b.id, at + timedelta(milliseconds=i), random.Random(0))
            assert decision.reservation is not None
            await accounts.confirm(database, decision.reservation, at)

    for i in range(6):  # nothing succeeds anywhere: an outage, not the account
        assert await accounts.failure(database, a, NOW + timedelta(seconds=i), data, breaker) is None
    assert (await accounts.get(database, "a")).state is State.ACTIVE
    await successes(NOW + timedelta(seconds=10))
    assert await accounts.failure(database, a, NOW + timedelta(seconds=20), data, breaker) is State.TRIPPED
    tripped = await accounts.get(database, "a")
    assert tripped.state_until == NOW + timedelta(seconds=20, minutes=30)
    later = NOW + timedelta(minutes=31)  # the trip is over; the failures before it do not count again
    await successes(later)
    for i in range(4):
        assert await accounts.failure(database, a, later + timedelta(seconds=i + 1), data, breaker) is None
    second = await accounts.failure(database, a, later + timedelta(seconds=5), data, breaker)
    assert second is State.DISCONNECTED  # the second trip of the day
    assert (await accounts.get(database, "a")).state_until is None
    moves = [(e["to"], e.get("trips_today")) for e in await account_events(database, "account_state")]
    assert moves == [("tripped", 1), ("disconnected", 2)]


async def test_a_route_relays_mail_that_names_no_account_pool(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a", pool="gmail-senders")
    await accept(database, new_message("someone@gmail.example"))  # no X-Mtad-Account-Pool, no tenant pool
    await relaying(database, tls_files, routes={"gmail.example": "gmail-senders"}).run_until_idle()
    [message] = smarthost.received
    assert (message.login, message.recipients) == ("a@example.com", ["someone@gmail.example"])


async def test_mail_rerouted_into_a_paused_pool_keeps_its_lease_and_is_handed_back_at_a_stop(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    await add(database, smarthost, "a")  # the only account: parked by its first reply
    smarthost.mail_replies["a@example.com"] = "550 5.4.5 Daily user sending limit exceeded."
    await accept(database, relayed("r@example.net"))
    # A wait this node sits out in memory (hand_back_after longer than the day).
    engine = relaying(database, tls_files, lease_duration=1.5,  # renewed every 0.5 s
                      settings=relay.Settings(poll=0.2, hand_back_after=86_400.0))  # fmt: skip
    running = asyncio.create_task(engine.run())

    async def lease() -> Any:
        [row] = await query(database, "SELECT state::text AS state, lease_expires_at FROM deliveries")
        return row

    async def parked() -> bool:
        return (await accounts.get(database, "a")).state is State.PARKED

    await waiting.eventually_async(parked)
    first = (await lease())["lease_expires_at"]

    async def renewed() -> bool:
        return bool((await lease())["lease_expires_at"] > first + timedelta(seconds=0.4))

    await waiting.eventually_async(renewed)  # waiting for its pool, the delivery is still ours
    engine.stop()
    async with asyncio.timeout(10):  # nothing is in flight: no waiting for shutdown_timeout
        await running
    row = (await deliveries(database))["r@example.net"]
    assert (row["state"], row["attempts"], row["lease_owner"]) == ("queued", 0, None)  # handed back
