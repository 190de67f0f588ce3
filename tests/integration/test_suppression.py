"""Suppression against real PostgreSQL: the lists (per tenant and global), what an
entry keeps, expiry, the checks at accept, at RCPT and just before an attempt,
the consumer that suppresses what comes back, and CSV import and export."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
import structlog
from prometheus_client import REGISTRY

from mtad import db, submission
from mtad.base import errors
from mtad.deliver import egress
from mtad.feedback import consumers, signals, suppression
from mtad.feedback.suppression import GLOBAL, Reason
from tests.integration.delivering import accept, deliveries, engine, new_message
from tests.integration.submitting import Factory
from tests.pg import query
from tests.sink import Sink
from tests.smtpclient import RawClient

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


async def test_an_entry_keeps_its_strongest_reason_and_expires(database: db.Database) -> None:
    first = await suppression.add(database, "Bob@Example.com", Reason.HARD_BOUNCE, NOW, tenant="t1",
                                  expires_at=NOW + timedelta(days=30))  # fmt: skip
    assert first is not None
    assert (first.address, first.reason) == ("bob@example.com", Reason.HARD_BOUNCE)
    assert await suppression.add(database, "bob@example.com", Reason.MANUAL, NOW, tenant="t1") is None  # kept
    stronger = await suppression.add(database, "bob@example.com", Reason.COMPLAINT, NOW, tenant="t1")
    assert stronger is not None
    assert stronger.reason is Reason.COMPLAINT
    assert stronger.expires_at is None
    assert await suppression.add(database, "bob@example.com", Reason.HARD_BOUNCE, NOW, tenant="t1") is None
    gone = await suppression.add(database, "old@example.com", Reason.HARD_BOUNCE, NOW, tenant="t1",
                                 expires_at=NOW + timedelta(days=1))  # fmt: skip
    assert gone is not None
    assert not gone.active(NOW + timedelta(days=2))
    again = await suppression.add(database, "old@example.com", Reason.MANUAL, NOW + timedelta(days=2), tenant="t1")
    assert again is not None
    assert again.reason is Reason.MANUAL
    with pytest.raises(errors.ConfigError):
        await suppression.add(database, "not an address", Reason.MANUAL, NOW)
    assert await suppression.remove(database, "BOB@example.com", "t1")
    assert not await suppression.remove(database, "bob@example.com", "t1")
    assert [e.address for e in await suppression.entries(database, "t1")] == ["old@example.com"]


async def test_accept_cancels_a_recipient_on_its_tenants_list_or_the_global_one(database: db.Database) -> None:
    await suppression.add(database, "tenant@sink.test", Reason.MANUAL, NOW, tenant="t1")
    await suppression.add(database, "GLOBAL@sink.test", Reason.COMPLAINT, NOW)
    await suppression.add(database, "other@sink.test", Reason.MANUAL, NOW, tenant="t2")  # another tenant's
    await suppression.add(database, "expired@sink.test", Reason.HARD_BOUNCE, NOW, tenant="t1",
                          expires_at=NOW - timedelta(hours=1))  # fmt: skip
    await accept(database, new_message("Tenant@sink.test", "global@sink.test", "other@sink.test", "expired@sink.test"))
    states = {r: (d["state"], d["reason"]) for r, d in (await deliveries(database)).items()}
    assert states == {
        "Tenant@sink.test": ("cancelled", "suppressed"),
        "global@sink.test": ("cancelled", "suppressed"),
        "other@sink.test": ("queued", None),
        "expired@sink.test": ("queued", None),
    }


async def test_an_address_suppressed_while_its_mail_waits_is_not_sent_to(database: db.Database, sink: Sink) -> None:
    await accept(database, new_message("waits@sink.test", "goes@sink.test"))
    await suppression.add(database, "waits@sink.test", Reason.UNSUBSCRIBE, datetime.now(UTC), tenant="t1")
    await engine(database, sink, egress.Egress({})).run_until_idle()
    assert [m.recipients for m in sink.received] == [["goes@sink.test"]]
    rows = await deliveries(database)
    assert (rows["waits@sink.test"]["state"], rows["waits@sink.test"]["reason"]) == ("cancelled", "suppressed")
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'cancelled'")
    assert json.loads(event["data"]) == {"recipient": "waits@sink.test", "reason": "suppressed", "before_attempt": True}


async def test_a_tenant_may_refuse_suppressed_recipients_at_rcpt(make_submission: Factory) -> None:
    defaults = {"default": submission.TenantDefaults(refuse_suppressed=True)}
    async with make_submission(tenant_defaults=defaults) as srv:
        await suppression.add(srv.database, "no@example.com", Reason.UNSUBSCRIBE, datetime.now(UTC), tenant="default")
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        assert (await raw.command("MAIL FROM:<app@example.org>")).startswith("250")
        refused = await raw.command("RCPT TO:<No@example.com>")
        assert refused.startswith("550 5.7.1 <No@example.com>: suppressed")
        assert (await raw.command("RCPT TO:<yes@example.com>")).startswith("250")
        await raw.close()


async def test_the_consumer_suppresses_what_comes_back(database: db.Database) -> None:
    handlers = [suppression.Suppressor(suppression.Settings(bounce_expiry=86400.0))]
    consuming = consumers.Consumers(database, handlers)
    await consuming.catch_up()  # it starts here
    at = datetime.now(UTC)
    data = [
        ("bounced", {"recipient": "Gone@example.com", "async": True, "reply": "550 5.1.1 no such user"}),
        ("bounced", {"recipient": "full@example.com", "async": True, "hard": False}),  # soft: only recorded
        ("bounced", {"recipient": "insession@example.com"}),  # suppressed as it was recorded
        ("complained", {"recipient": "angry@example.com"}),
        ("unsubscribed", {"recipient": "bye@example.com"}),
        ("delivered", {"recipient": "fine@example.com"}),
    ]
    for kind, payload in data:
        await query(database, "INSERT INTO events (at, kind, tenant, delivery, data) VALUES ($1, $2, 't1', 7, $3)",
                    at, kind, json.dumps(payload))  # fmt: skip
    assert await consuming.catch_up() == 5  # the delivered event is not its kind
    found = {e.address: e for e in await suppression.entries(database, "t1")}
    assert {a: e.reason for a, e in found.items()} == {
        "gone@example.com": Reason.HARD_BOUNCE,
        "angry@example.com": Reason.COMPLAINT,
        "bye@example.com": Reason.UNSUBSCRIBE,
    }
    gone = found["gone@example.com"]
    assert (gone.detail, gone.delivery, gone.event is not None) == ("550 5.1.1 no such user", 7, True)
    assert gone.expires_at is not None
    assert found["angry@example.com"].expires_at is None


async def test_a_signal_names_its_original_and_suppresses(database: db.Database) -> None:
    sent = new_message("Reader@example.com")
    await accept(database, sent)
    consuming = consumers.Consumers(database, [suppression.Suppressor()])
    await consuming.catch_up()
    found = await signals.original(database, f" {sent.message_id} ", "reader@EXAMPLE.com")
    assert found is not None
    assert (found.message, found.tenant) == (sent.id, "t1")
    assert found.delivery is not None
    assert await signals.original(database, "<unknown@test>") is None
    at = datetime.now(UTC)
    complaint = signals.Signal(signals.Kind.COMPLAINED, "reader@example.com", at, delivery=found.delivery,
                               data={"feedback_type": "abuse"})  # fmt: skip
    await signals.record(database, complaint)
    await signals.record(database, signals.Signal(signals.Kind.REPLIED, "reader@example.com", at, sent.id))
    assert await consuming.catch_up() == 1  # a reply suppresses nothing
    [entry] = await suppression.entries(database, "t1")
    assert (entry.address, entry.reason, entry.delivery) == ("reader@example.com", Reason.COMPLAINT, found.delivery)
    rows = await query(database, "SELECT kind, message, tenant FROM events WHERE kind IN ('complained', 'replied')")
    assert {(r["kind"], r["message"], r["tenant"]) for r in rows} == {("complained", sent.id, "t1"),
                                                                      ("replied", sent.id, "t1")}  # fmt: skip


async def test_csv_import_and_export(database: db.Database) -> None:
    await suppression.add(database, "kept@example.com", Reason.COMPLAINT, NOW, tenant="t1")
    rows = ["address,tenant,reason,created", "A@example.com,,manual,2026-11-01T10:00:00Z",
            "kept@example.com,t1,manual,", "b@example.com,t1,,"]  # fmt: skip
    rows += [f"bulk{i}@example.com,t2,hard_bounce," for i in range(10_000)]
    added = await suppression.import_csv(database, io.BytesIO("\n".join(rows).encode()), NOW)
    assert added == 2 + 10_000  # kept@ was there already, and stays a complaint
    out = io.BytesIO()
    await suppression.export_csv(database, out)
    lines = out.getvalue().decode().splitlines()
    assert lines[0] == "address,tenant,reason,created"
    assert len(lines) == 1 + 10_003
    assert lines[1].startswith('a@example.com,"",manual,2026-11-01 10:00:00')
    assert "kept@example.com,t1,complaint," in out.getvalue().decode()
    again = await suppression.import_csv(database, io.BytesIO(out.getvalue()), NOW)  # a round trip adds nothing
    assert again == 0
    bad = "address,tenant,reason,created\nok@example.com,,manual,\nnope,,manual,\n"
    with pytest.raises(errors.ConfigError, match=r"line 3: address: not an email address \('nope'\)"):
        await suppression.import_csv(database, io.BytesIO(bad.encode()), NOW)
    with pytest.raises(errors.ConfigError, match="line 2: reason"):
        await suppression.import_csv(database, io.BytesIO(b"address,tenant,reason,created\nx@y.z,,spam,\n"), NOW)
    assert not [e for e in await suppression.entries(database) if e.address == "ok@example.com"]  # all or nothing
    assert [e.tenant for e in await suppression.entries(database) if e.address == "a@example.com"] == [GLOBAL]


@pytest.mark.parametrize(
    ("line3", "says"),
    [
        ("nope,,manual,", "line 3: address: not an email address ('nope')"),
        ("x@example.com,,spam,", "line 3: reason: expected hard_bounce, soft_bounce, complaint, unsubscribe or "
                                 "manual ('spam')"),
        ("x@example.com,,manual,at noon", "line 3: created: not a time ('at noon')"),
        ("x@example.com,,manual,,extra", "the CSV cannot be read: line 3: extra data after last expected column"),
        ("x@example.com", "the CSV cannot be read: line 3: missing data for column \"tenant\""),
    ],
)  # fmt: skip
async def test_a_bad_row_is_refused_with_its_line_and_the_value_at_fault(
    database: db.Database, line3: str, says: str
) -> None:
    csv = f"address,tenant,reason,created\nok@example.com,t1,manual,\n{line3}\nlast@example.com,,,\n"
    with pytest.raises(errors.ConfigError) as info:
        await suppression.import_csv(database, io.BytesIO(csv.encode()), NOW)
    assert info.value.problems == (says,)
    assert await suppression.entries(database) == []  # all or nothing


DAY = timedelta(days=1)
SOFT = suppression.Settings(bounce_expiry=180 * 86400.0, soft_after=3, soft_window=30 * 86400.0)


async def bounced(database: db.Database, at: datetime, delivery: int, tenant: str = "t1", **data: object) -> None:
    """A bounced event of full@example.com written as delivery or an intake writes it."""
    payload = {"recipient": "Full@example.com", **data}
    await query(database, "INSERT INTO events (at, kind, tenant, delivery, data) VALUES ($1, 'bounced', $2, $3, $4)",
                at, tenant, delivery, json.dumps(payload))  # fmt: skip


FULL_LATER = {"async": True, "hard": False, "reason": "mailboxfull", "status": "5.2.2", "action": "failed",
              "reply": "552 5.2.2 mailbox full"}  # fmt: skip
FULL_NOW = {"class": "permanent", "reason": "mailboxfull", "status": "5.2.2", "reply": "552 5.2.2 Mailbox full"}


async def soft_rows(database: db.Database) -> list[tuple[str, str, int]]:
    rows = await query(database, "SELECT tenant, address, event FROM soft_bounces ORDER BY event")
    return [(r["tenant"], r["address"], r["event"]) for r in rows]


async def test_soft_bounces_suppress_once_they_repeat_within_the_window(database: db.Database) -> None:
    consuming = consumers.Consumers(database, [suppression.Suppressor(SOFT)])
    await consuming.catch_up()
    start = NOW - 60 * DAY
    await bounced(database, start, 1, **FULL_LATER)
    await bounced(database, start, 1, **FULL_LATER)  # a second report of the same delivery counts once
    await bounced(database, start + 20 * DAY, 2, **FULL_NOW)  # in the SMTP session
    await bounced(database, start + 20 * DAY, 3, **{**FULL_LATER, "action": "delayed", "status": "4.2.2"})
    await bounced(database, start + 21 * DAY, 4, **{**FULL_LATER, "reason": "blocked", "status": "5.7.1"})
    await bounced(database, start + 40 * DAY, 5, **{**FULL_LATER, "action": "expired", "status": "4.2.2"})
    await consuming.catch_up()
    # Three deliveries bounced soft, but the first is out of the window of the third: no entry yet.
    assert await suppression.entries(database, "t1") == []
    assert len(await soft_rows(database)) == 4  # the delay notice and the sender-side refusal are not counted

    await bounced(database, start + 45 * DAY, 6, **FULL_NOW)  # days 20, 40 and 45 within 30 days
    await bounced(database, start + 45 * DAY, 6, tenant="t2", **FULL_NOW)  # another tenant's count
    await consuming.catch_up()
    [entry] = await suppression.entries(database)
    assert (entry.tenant, entry.address, entry.reason, entry.delivery) == ("t1", "full@example.com",
                                                                           Reason.SOFT_BOUNCE, 6)  # fmt: skip
    assert (entry.detail, entry.expires_at) == ("552 5.2.2 Mailbox full", start + 45 * DAY + 180 * DAY)
    assert [t for t, _, _ in await soft_rows(database)] == ["t2"]  # t1's count starts again


async def test_soft_bounces_are_not_counted_when_soft_after_is_0(database: db.Database) -> None:
    off = suppression.Settings(soft_after=0)
    consuming = consumers.Consumers(database, [suppression.Suppressor(off)])
    await consuming.catch_up()
    for n in range(3):
        await bounced(database, NOW + n * DAY, n, **FULL_NOW)
    await bounced(database, NOW, 9, **{**FULL_LATER, "hard": True, "reason": "userunknown", "status": "5.1.1"})
    await consuming.catch_up()
    assert {(e.address, e.reason) for e in await suppression.entries(database)} == {
        ("full@example.com", Reason.HARD_BOUNCE)
    }  # a report of an address that is gone still suppresses it
    assert await soft_rows(database) == []


async def test_a_soft_bounce_entry_yields_to_a_stronger_reason_and_expires(database: db.Database) -> None:
    later = NOW + timedelta(days=180)
    for before, after, kept in [
        (Reason.SOFT_BOUNCE, Reason.HARD_BOUNCE, Reason.HARD_BOUNCE),
        (Reason.SOFT_BOUNCE, Reason.COMPLAINT, Reason.COMPLAINT),
        (Reason.SOFT_BOUNCE, Reason.UNSUBSCRIBE, Reason.UNSUBSCRIBE),
        (Reason.SOFT_BOUNCE, Reason.MANUAL, Reason.SOFT_BOUNCE),
        (Reason.HARD_BOUNCE, Reason.SOFT_BOUNCE, Reason.HARD_BOUNCE),
        (Reason.COMPLAINT, Reason.SOFT_BOUNCE, Reason.COMPLAINT),
        (Reason.UNSUBSCRIBE, Reason.SOFT_BOUNCE, Reason.UNSUBSCRIBE),
        (Reason.MANUAL, Reason.SOFT_BOUNCE, Reason.MANUAL),
    ]:
        address = f"{before.value}-{after.value}@example.com".replace("_", "-")
        expiring = before in (Reason.SOFT_BOUNCE, Reason.HARD_BOUNCE)
        await suppression.add(database, address, before, NOW, tenant="t1", expires_at=later if expiring else None)
        until = later + DAY if after in (Reason.SOFT_BOUNCE, Reason.HARD_BOUNCE) else None
        await suppression.add(database, address, after, NOW + DAY, tenant="t1", expires_at=until)
        [entry] = [e for e in await suppression.entries(database, "t1") if e.address == address]
        assert entry.reason is kept, address
    expired = await suppression.add(database, "again@example.com", Reason.SOFT_BOUNCE, NOW, tenant="t1",
                                    expires_at=NOW + DAY)  # fmt: skip
    assert expired is not None
    assert not expired.active(NOW + 2 * DAY)
    renewed = await suppression.add(database, "again@example.com", Reason.SOFT_BOUNCE, NOW + 2 * DAY, tenant="t1",
                                    expires_at=NOW + 3 * DAY)  # fmt: skip
    assert renewed is not None
    assert renewed.created_at == NOW + 2 * DAY
    soft = "address,tenant,reason,created\nsoft@example.com,t1,soft_bounce,\n"
    assert await suppression.import_csv(database, io.BytesIO(soft.encode()), NOW) == 1


async def test_soft_bounces_in_the_session_suppress_with_their_reason_counted(database: db.Database,
                                                                              sink: Sink) -> None:  # fmt: skip
    consuming = consumers.Consumers(database, [suppression.Suppressor(SOFT)])
    await consuming.catch_up()
    labels = {"reason": "suspend", "group": "other", "kind": "bounced"}
    before = REGISTRY.get_sample_value("mtad_bounce_reasons_total", labels) or 0.0
    mtad = engine(database, sink, egress.Egress({}))
    with structlog.testing.capture_logs() as logs:
        for n in range(3):
            await accept(database, new_message("Disabled-1@sink.test"))
            await mtad.run_until_idle()
            await consuming.catch_up()
            assert [e.reason for e in await suppression.entries(database, "t1")] == ([Reason.SOFT_BOUNCE] if n == 2
                                                                                    else [])  # fmt: skip
    assert REGISTRY.get_sample_value("mtad_bounce_reasons_total", labels) == before + 3
    records = [r for r in logs if r["event"] == "bounced"]
    assert [(r["bounce_reason"], r["status"], r["reason"]) for r in records] == [
        ("suspend", "5.2.1", "permanent_reply")
    ] * 3  # fmt: skip
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'bounced' ORDER BY id DESC LIMIT 1")
    data = json.loads(event["data"])
    assert (data["reason"], data["status"], data["reply"]) == ("suspend", "5.2.1", "550 5.2.1 Mailbox disabled")
    # The next message to it is cancelled at accept.
    await accept(database, new_message("disabled-1@sink.test"))
    states = [r["state"] for r in await query(database, "SELECT state::text FROM deliveries ORDER BY id")]
    assert states == ["bounced"] * 3 + ["cancelled"]
