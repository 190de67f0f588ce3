"""The inbound listener against real PostgreSQL and real SMTP clients: bounces by
VERP and by Message-ID, a forged bounce, a complaint, what the suppression
consumer makes of them, and what the listener refuses (relaying, size, rate)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import REGISTRY

from mtad import db
from mtad.deliver import delivery, egress
from mtad.feedback import consumers, suppression
from mtad.feedback.inbound import Rate
from mtad.feedback.suppression import Reason
from mtad.feedback.verp import Verp
from mtad.mailboxes import relay
from mtad.outbound import outcomes, routing, sessions
from tests.integration.delivering import PROVIDERS, RULES, ZONE, accept, deliveries, new_message
from tests.integration.inbound import COMPLAINTS, VERP, delivered, listening, send
from tests.integration.mailboxes import SEALER as RELAY_SEALER
from tests.integration.mailboxes import add, relayed, trusting
from tests.pg import query
from tests.reports import OUT_OF_OFFICE, arf, dsn
from tests.sink import Sink
from tests.smtpclient import RawClient
from tests.zones import ZoneResolver


async def bounced_events(database: db.Database) -> list[dict[str, Any]]:
    rows = await query(database, "SELECT kind, delivery, tenant, data FROM events WHERE kind IN ('bounced', "
                                 "'complained') ORDER BY id")  # fmt: skip
    return [{**dict(r), "data": json.loads(r["data"])} for r in rows]


def counted(kind: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("mtad_inbound_reports_total", {"kind": kind, "outcome": outcome}) or 0.0


async def test_a_hard_bounce_to_a_verp_address_bounces_the_delivery_and_suppresses(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()  # a new consumer starts after the events already written
    _, ids = await delivered(database, "gone@example.com", "stays@example.com")
    before = counted("bounce", "recorded")
    async with listening(database) as listener:
        reply = await send(listener, VERP.sender(ids["gone@example.com"]), dsn("gone@example.com", "<unknown@x>"))
    assert reply.startswith("250 ")
    rows = await deliveries(database)
    gone = rows["gone@example.com"]
    assert (gone["state"], gone["reason"], gone["last_enhanced"]) == ("bounced", "async_bounce", "5.1.1")
    assert rows["stays@example.com"]["state"] == "delivered"
    [event] = await bounced_events(database)
    assert (event["kind"], event["delivery"], event["tenant"]) == ("bounced", ids["gone@example.com"], "t1")
    assert {k: event["data"][k] for k in ("recipient", "async", "hard", "status", "moved", "reason", "action")} == {
        "recipient": "gone@example.com", "async": True, "hard": True, "status": "5.1.1", "moved": True,
        "reason": "userunknown", "action": "failed",
    }  # fmt: skip
    assert event["data"]["reply"].startswith("550 5.1.1 <gone@example.com>: Recipient address rejected")
    assert counted("bounce", "recorded") == before + 1
    assert await consuming.catch_up() == 1
    [entry] = await suppression.entries(database, "t1")
    assert (entry.address, entry.reason, entry.delivery) == ("gone@example.com", Reason.HARD_BOUNCE,
                                                            ids["gone@example.com"])  # fmt: skip


async def test_a_delay_notice_is_recorded_and_moves_and_suppresses_nothing(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor(suppression.Settings(soft_after=1))])
    await consuming.catch_up()
    _, ids = await delivered(database, "full@example.com")
    report = dsn("full@example.com", "<x@y>", action="delayed", status="4.2.2", diagnostic="smtp; 452 4.2.2 full")
    async with listening(database) as listener:
        assert (await send(listener, VERP.sender(ids["full@example.com"]), report)).startswith("250 ")
    assert (await deliveries(database))["full@example.com"]["state"] == "delivered"
    [event] = await bounced_events(database)
    said = {k: event["data"][k] for k in ("hard", "status", "moved", "action", "reason")}
    assert said == {"hard": False, "status": "4.2.2", "moved": False, "action": "delayed", "reason": "mailboxfull"}
    await consuming.catch_up()
    assert await suppression.entries(database, "t1") == []  # not even as the one soft bounce soft_after asks for
    assert await query(database, "SELECT 1 FROM soft_bounces") == []


async def test_a_soft_bounce_after_the_250_moves_its_delivery_and_counts(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor(suppression.Settings(soft_after=2))])
    await consuming.catch_up()
    labels = {"reason": "mailboxfull", "group": "other", "kind": "async"}
    before = REGISTRY.get_sample_value("mtad_bounce_reasons_total", labels) or 0.0
    for n in range(2):  # two messages to one address, each delivered, then bounced by a report
        await delivered(database, "full@example.com")
        [row] = await query(database, "SELECT max(id) AS id FROM deliveries")
        report = dsn("full@example.com", "<x@y>", status="5.2.2", diagnostic="smtp; 552 5.2.2 Mailbox full")
        async with listening(database) as listener:
            assert (await send(listener, VERP.sender(row["id"]), report)).startswith("250 ")
        [row] = await query(database, "SELECT state::text, reason::text, last_enhanced FROM deliveries WHERE id = $1",
                            row["id"])  # fmt: skip
        assert (row["state"], row["reason"], row["last_enhanced"]) == ("bounced", "async_bounce", "5.2.2")
        await consuming.catch_up()
        entries = [(e.address, e.reason) for e in await suppression.entries(database, "t1")]
        assert entries == ([] if n == 0 else [("full@example.com", Reason.SOFT_BOUNCE)])
    events = await bounced_events(database)
    assert [(e["data"]["hard"], e["data"]["reason"], e["data"]["action"], e["data"]["moved"]) for e in events] == [
        (False, "mailboxfull", "failed", True)
    ] * 2  # fmt: skip
    assert REGISTRY.get_sample_value("mtad_bounce_reasons_total", labels) == before + 2


async def test_a_bounce_without_verp_is_matched_by_the_original_message_id(database: db.Database) -> None:
    message_id, ids = await delivered(database, "Gone@example.com", "other@example.com")
    async with listening(database) as listener:
        report = dsn("gone@example.com", message_id, to="postmaster@bounces.example.org")
        assert (await send(listener, "postmaster@BOUNCES.example.org", report)).startswith("250 ")
        unknown = dsn("gone@example.com", "<never-sent@example.org>", to="postmaster@bounces.example.org")
        with structlog.testing.capture_logs() as logs:
            assert (await send(listener, "postmaster@bounces.example.org", unknown)).startswith("250 ")
    assert any(line["event"] == "bounce_unmatched" for line in logs)
    rows = await deliveries(database)
    assert (rows["Gone@example.com"]["state"], rows["Gone@example.com"]["reason"]) == ("bounced", "async_bounce")
    assert rows["other@example.com"]["state"] == "delivered"
    [event] = await bounced_events(database)
    assert (event["delivery"], event["data"]["recipient"]) == (ids["Gone@example.com"], "gone@example.com")


def engine(database: db.Database, sink: Sink, verp: Verp | None, **more: Any) -> delivery.Delivery:
    """Delivery to MX (the sink), with VERP envelope senders when `verp` is given."""
    router = routing.Router(ZoneResolver(ZONE), PROVIDERS, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"), relay_tls=more.pop("tls", None))
    settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0))
    return delivery.Delivery(settings, database, router, pool, RULES, pools=egress.Egress({}), verp=verp, **more)


async def test_mail_sent_with_verp_is_bounced_by_its_verp_address_only(database: db.Database, sink: Sink) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    signed, plain = new_message("gone@sink.test"), new_message("also-gone@sink.test")
    await accept(database, signed)
    await engine(database, sink, VERP).run_until_idle()
    await accept(database, plain)
    await engine(database, sink, None).run_until_idle()  # no [bounces]: the message's own sender
    ids = {r: int(str(d["id"])) for r, d in (await deliveries(database)).items()}
    postmaster = "postmaster@bounces.example.org"
    async with listening(database) as listener:
        with structlog.testing.capture_logs() as logs:
            # Whoever learns a Message-ID and a recipient gets nowhere without the token: no bounce, no complaint.
            forged = dsn("gone@sink.test", signed.message_id, to=postmaster)
            assert (await send(listener, postmaster, forged)).startswith("250 ")
            complaint = arf("gone@sink.test", signed.message_id)
            assert (await send(listener, COMPLAINTS, complaint, sender="fbl@fbl.example.net")).startswith("250 ")
        assert [line["event"] for line in logs if line["event"].endswith("_unmatched")] == [
            "bounce_unmatched", "complaint_unmatched"]  # fmt: skip
        assert await bounced_events(database) == []
        # Mail sent without VERP is matched by its Message-ID as before; VERP mail by its token.
        matched = dsn("also-gone@sink.test", plain.message_id, to=postmaster)
        assert (await send(listener, postmaster, matched)).startswith("250 ")
        real = dsn("gone@sink.test", signed.message_id, to=VERP.sender(ids["gone@sink.test"]))
        assert (await send(listener, VERP.sender(ids["gone@sink.test"]), real)).startswith("250 ")
    assert [(e["kind"], e["delivery"]) for e in await bounced_events(database)] == [
        ("bounced", ids["also-gone@sink.test"]), ("bounced", ids["gone@sink.test"])]  # fmt: skip
    assert await consuming.catch_up() == 2


async def test_relayed_mail_is_bounced_by_its_message_id_with_verp_on(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    """What comes back to a sending mailbox names no VERP address: the Message-ID
    decides, [bounces] set or not (the inbox reader and the listener alike)."""
    await add(database, smarthost, "a")
    sent = relayed("gone@example.net")
    await accept(database, sent)
    mailboxes = relay.Mailboxes(database, relay.Settings(poll=0.2), RELAY_SEALER)
    await engine(database, smarthost, VERP, mailboxes=mailboxes, tls=trusting(tls_files[0])).run_until_idle()
    [row] = (await deliveries(database)).values()
    assert row["state"] == "delivered"
    async with listening(database) as listener:
        postmaster = "postmaster@bounces.example.org"
        report = dsn("gone@example.net", sent.message_id, to=postmaster)
        assert (await send(listener, postmaster, report)).startswith("250 ")
    assert [(e["kind"], e["delivery"]) for e in await bounced_events(database)] == [("bounced", row["id"])]


async def test_a_forged_verp_bounce_is_answered_250_and_changes_nothing(database: db.Database) -> None:
    message_id, ids = await delivered(database, "target@example.com")
    good = VERP.sender(ids["target@example.com"])
    local, _, domain = good.partition("@")
    forged = f"{local[:-1]}{'a' if local[-1] != 'a' else 'b'}@{domain}"  # one letter of the mac changed
    before = counted("bounce", "forged")
    async with listening(database) as listener:
        with structlog.testing.capture_logs() as logs:
            # It quotes the right Message-ID, and still counts for nothing: a VERP address decides.
            reply = await send(listener, forged, dsn("target@example.com", message_id, to=forged))
    assert reply.startswith("250 ")
    assert [line["address"] for line in logs if line["event"] == "forged_bounce"] == [forged]
    assert (await deliveries(database))["target@example.com"]["state"] == "delivered"
    assert await bounced_events(database) == []
    assert counted("bounce", "forged") == before + 1


async def test_a_complaint_to_the_complaints_address_is_recorded_and_suppresses(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    message_id, ids = await delivered(database, "angry@example.net", "calm@example.net")
    async with listening(database) as listener:
        assert (await send(listener, "FBL@example.org", arf("angry@example.net", message_id))).startswith("250 ")
        # Another report whose original's envelope sender is the delivery's VERP address.
        by_verp = arf(None, "<not-ours@example.org>", sender=f"<{VERP.sender(ids['calm@example.net'])}>")
        assert (await send(listener, COMPLAINTS, by_verp, sender="feedback@fbl.example.net")).startswith("250 ")
    events = await bounced_events(database)
    assert [(e["kind"], e["delivery"], e["data"]) for e in events] == [
        ("complained", ids["angry@example.net"], {"recipient": "angry@example.net", "feedback_type": "abuse"}),
        ("complained", ids["calm@example.net"], {"recipient": "calm@example.net", "feedback_type": "abuse"}),
    ]
    assert (await deliveries(database))["angry@example.net"]["state"] == "delivered"  # a complaint moves nothing
    assert await consuming.catch_up() == 2
    found = {e.address: e.reason for e in await suppression.entries(database, "t1")}
    assert found == {"angry@example.net": Reason.COMPLAINT, "calm@example.net": Reason.COMPLAINT}


async def test_automatic_replies_and_junk_are_answered_250_and_recorded_nowhere(database: db.Database) -> None:
    _, ids = await delivered(database, "bob@example.net")
    async with listening(database) as listener:
        assert (await send(listener, VERP.sender(ids["bob@example.net"]), OUT_OF_OFFICE)).startswith("250 ")
        assert (await send(listener, COMPLAINTS, b"Subject: hi\r\n\r\njust mail\r\n")).startswith("250 ")
    assert await bounced_events(database) == []


async def test_it_is_never_an_open_relay(database: db.Database) -> None:
    async with listening(database) as listener:
        client = await RawClient.connect("127.0.0.1", listener.addresses[0].port)
        await client.ehlo()
        assert (await client.command("MAIL FROM:<>")).startswith("250")
        for outside in ("someone@example.com", "x@sub.bounces.example.org", "bounces.example.org@example.com",
                        "fbl@example.org.evil.test", "x@bounces.example.org@example.com"):  # fmt: skip
            refused = await client.command(f"RCPT TO:<{outside}>")
            assert refused.startswith("550 5.7.1 ") or refused.startswith("553 "), refused
        assert (await client.command("RCPT TO:<someone@example.com>")) == (
            "550 5.7.1 <someone@example.com>: relaying denied"
        )
        assert (await client.command("DATA")).startswith("503 ")
        await client.close()
        # Nor with a sender, nor with the recipient's domain written as an address literal.
        client = await RawClient.connect("127.0.0.1", listener.addresses[0].port)
        await client.ehlo()
        assert (await client.command("MAIL FROM:<spammer@example.net>")).startswith("250")
        assert (await client.command("RCPT TO:<victim@[192.0.2.1]>")).startswith("550 5.7.1 ")
        assert (await client.command("DATA")).startswith("503 ")
        await client.close()


async def test_a_path_that_does_not_parse_is_a_syntax_error(database: db.Database) -> None:
    async with listening(database) as listener:
        client = await RawClient.connect("127.0.0.1", listener.addresses[0].port)
        await client.ehlo()
        for path in ("<@x.test:>", "<@a.test,@b.test:>", "<app@example.org"):  # no mailbox; unbalanced
            reply = await client.command(f"MAIL FROM:{path}")
            assert reply.startswith("501 5.5.4 "), (path, reply)
        assert (await client.command("MAIL FROM:<>")).startswith("250 ")  # the null sender stays one
        reply = await client.command("RCPT TO:<@x.test:>")
        assert reply.startswith("501 5.5.4 "), reply
        await client.close()


async def test_an_oversize_message_is_refused_with_552(database: db.Database) -> None:
    async with listening(database, max_message_size=2000) as listener:
        client = await RawClient.connect("127.0.0.1", listener.addresses[0].port)
        await client.ehlo()
        assert (await client.command("MAIL FROM:<> SIZE=5000")).startswith("552 5.3.4 ")
        await client.envelope("", "postmaster@bounces.example.org")
        reply = await client.data(b"Subject: big\r\n\r\n" + (b"x" * 70 + b"\r\n") * 40 + b".\r\n")
        assert reply.startswith("552 5.3.4 "), reply
        await client.close()


async def test_a_client_beyond_its_rate_gets_421(database: db.Database) -> None:
    async with listening(database, max_per_minute=2) as listener:
        for _ in range(2):
            assert (await send(listener, COMPLAINTS, b"Subject: hi\r\n\r\nhi\r\n")).startswith("250 ")
        client = await RawClient.connect("127.0.0.1", listener.addresses[0].port)
        await client.ehlo()
        assert (await client.command("MAIL FROM:<>")).startswith("421 4.7.0 ")
        assert await asyncio.wait_for(client.reader.read(), 10) == b""  # and the connection is closed
        await client.close()


def test_the_rate_slides_over_the_minute_and_forgets_the_oldest_clients() -> None:
    clock = [120.0]
    rate = Rate(3, lambda: clock[0], clients=2)
    assert [rate.take("a") for _ in range(4)] == [True, True, True, False]
    clock[0] = 180.0 + 30.0  # half of the last minute is still in the window: 3 * 0.5, rounded up, counts
    assert [rate.take("a") for _ in range(2)] == [True, False]
    clock[0] = 240.0 + 1.0  # the minute with 3 is two ago; the last had 1
    assert [rate.take("a") for _ in range(3)] == [True, True, False]
    rate.take("b")
    rate.take("c")
    assert len(rate) == 2  # "a" was the least recently seen
    assert rate.take("a")


async def test_mail_to_an_unsubscribe_address_unsubscribes_its_recipient(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    message_id, ids = await delivered(database, "reader@example.com")
    address = VERP.unsubscribe(ids["reader@example.com"])
    assert len(address.split("@")[0]) <= 64  # a local part's limit
    forged = Verp("bounces.example.org", b"x" * 32).unsubscribe(ids["reader@example.com"])  # another key's mac
    note = b"Subject: unsubscribe\r\n\r\nplease\r\n"
    async with listening(database) as listener:
        assert (await send(listener, forged, note, sender="reader@example.com")).startswith("250 ")
        for _ in range(3):  # sent again (a client's retry, a replay): answered alike, recorded once
            assert (await send(listener, address, note, sender="reader@example.com")).startswith("250 ")
        opt_out = arf("reader@example.com", message_id, feedback_type="opt-out")  # the same delivery, another way
        assert (await send(listener, COMPLAINTS, opt_out, sender="feedback@fbl.example.net")).startswith("250 ")
    rows = await query(database, "SELECT delivery, data FROM events WHERE kind = 'unsubscribed'")
    assert [r["delivery"] for r in rows] == [ids["reader@example.com"]]  # the forged one recorded nothing
    assert await consuming.catch_up() == 1
    [entry] = await suppression.entries(database, "t1")
    assert (entry.address, entry.reason) == ("reader@example.com", Reason.UNSUBSCRIBE)
