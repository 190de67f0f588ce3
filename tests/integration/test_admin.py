"""The admin API against real PostgreSQL over a real socket: the token, every route,
HTTP injection (raw and structured, idempotent, refused as SMTP would refuse), and
errors as JSON."""

from __future__ import annotations

import base64
import email
import email.policy
from datetime import UTC, datetime
from typing import Any

import pytest

from mtad import db, submission
from mtad.admin import api
from mtad.feedback import reputation, suppression, webhooks
from mtad.spool import quotas, tenants
from tests.integration.admin_api import TOKEN, serving
from tests.integration.mailboxes import SEALER, make
from tests.pg import query

RAW = {
    "envelope_sender": "app@example.org",
    "recipients": ["a@example.com", "b@example.com"],
    "content": "From: app@example.org\nTo: a@example.com\nSubject: raw\n\nhello\n",
}


async def test_without_the_token_nothing_but_the_document(database: db.Database) -> None:
    async with serving(database) as client:
        for token in (None, "wrong", TOKEN[:-1]):
            status, body = await client.call("GET", "/v1/queue", token=token)
            assert status == 401
            assert "Bearer" in body["error"]
        status, document = await client.call("GET", "/v1/openapi.json", token=None)
        assert status == 200
        assert document["openapi"].startswith("3.")
        assert "/v1/messages" in document["paths"]
        assert (await client.call("GET", "/v1/nothing"))[0] == 404
        assert (await client.call("DELETE", "/v1/queue"))[0] == 405


async def test_a_raw_message_is_injected_once_with_its_key(database: db.Database) -> None:
    async with serving(database) as client:
        headers = {"Idempotency-Key": "order-17"}
        status, first = await client.call("POST", "/v1/messages", json=RAW, headers=headers)
        assert status == 202, first
        assert first["duplicate"] is False
        assert first["recipients"] == ["a@example.com", "b@example.com"]
        status, again = await client.call("POST", "/v1/messages", json=RAW, headers=headers)
        assert (status, again["queue_id"], again["duplicate"]) == (202, first["queue_id"], True)
        [row] = await query(database, "SELECT tenant, sender, body FROM messages")
        assert (row["tenant"], row["sender"]) == ("default", "app@example.org")
        body = bytes(row["body"])
        assert b"Idempotency-Key: order-17\r\n" in body
        assert b"Subject: raw\r\nMessage-ID: <" + first["queue_id"].replace("-", "").encode() + b"@mtad.test>" in body
        assert body.endswith(b"\r\n\r\nhello\r\n")  # the line endings made CRLF
        status, shown = await client.call("GET", f"/v1/queue/{first['queue_id']}")
        assert status == 200
        assert [d["recipient"] for d in shown["deliveries"]] == ["a@example.com", "b@example.com"]
        assert shown["events"][0]["kind"] == "received"


async def test_a_structured_message_is_built_into_mime(database: db.Database) -> None:
    await tenants.add(database, "shop", "pw-of-shop")
    async with serving(database) as client:
        status, answer = await client.call("POST", "/v1/messages", json={
            "from": "Shop <shop@example.org>", "to": ["Ann <ann@example.com>"], "bcc": ["audit@example.net"],
            "subject": "Your order", "text": "Thanks.", "html": "<p>Thanks.</p>", "tenant": "shop",
            "headers": {"X-Campaign": "7"},
            "attachments": [{"filename": "r.txt", "content_type": "text/plain",
                             "content": base64.b64encode(b"receipt").decode()}],
        })  # fmt: skip
        assert status == 202, answer
        [row] = await query(database, "SELECT tenant, sender, body FROM messages")
        assert (row["tenant"], row["sender"]) == ("shop", "shop@example.org")
        parsed = email.message_from_bytes(bytes(row["body"]), policy=email.policy.default)
        assert (parsed["To"], parsed["Subject"], parsed["X-Campaign"]) == ("Ann <ann@example.com>", "Your order", "7")
        assert parsed["Bcc"] is None  # an envelope recipient only
        assert parsed.get_body(("html",)).get_content().strip() == "<p>Thanks.</p>"  # type: ignore[union-attr]
        [attached] = list(parsed.iter_attachments())
        assert (attached.get_filename(), attached.get_content()) == ("r.txt", "receipt")
        recipients = [r["recipient"] for r in await query(database, "SELECT recipient FROM deliveries ORDER BY id")]
        assert recipients == ["ann@example.com", "audit@example.net"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"content": "x"}, 422, "envelope_sender: required"),
        ({**RAW, "recipients": []}, 422, "recipients: at least one address"),
        ({**RAW, "recipients": ["not an address"]}, 422, "recipients[0]: 'not an address'"),
        ({**RAW, "tenant": "no spaces"}, 422, "tenant:"),
        ({**RAW, "content": "Subject: x\n\n" + "y" * 1200}, 422, "longer than 998"),
        ({"from": "a@example.org", "to": ["b@example.com"]}, 422, 'give "text", "html" or both'),
        ({"from": "a@example.org", "to": ["b@example.com"], "text": "t", "headers": {"From": "x"}}, 422, "'From'"),
        ({"subject": "neither"}, 422, 'give either "content"'),
        ({**RAW, "colour": "red"}, 422, "unknown fields: colour"),
    ],
)
async def test_a_bad_injection_says_what_is_wrong(
    database: db.Database, body: dict[str, Any], status: int, says: str
) -> None:
    async with serving(database) as client:
        got, answer = await client.call("POST", "/v1/messages", json=body)
        assert got == status
        assert says in answer["error"]
        assert await query(database, "SELECT id FROM messages") == []


STRUCTURED = {"from": "Shop <shop@example.org>", "to": ["ann@example.com"], "subject": "Hi", "text": "Thanks."}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**RAW, "recipients": ["evil@elsewhere.test <probe@rcpt.test>"]}, "recipients[0]"),
        ({**STRUCTURED, "to": ["evil@elsewhere.test <probe@rcpt.test>"]}, "to[0]"),
        ({**STRUCTURED, "from": "evil@elsewhere.test <shop@example.org>"}, "from"),
        ({**RAW, "envelope_sender": "app@example.org>\r\nRCPT TO:<victim@example.com"}, "envelope_sender"),
        ({**STRUCTURED, "envelope_sender": "<app@example.org> SIZE=1"}, "envelope_sender"),
        ({**STRUCTURED, "subject": "Hi\r\nBcc: victim@example.com"}, "subject"),
        ({**STRUCTURED, "from": "Shop\n <shop@example.org>"}, "from"),
        ({**STRUCTURED, "reply_to": "help@example.org\r\nBcc: victim@example.com"}, "reply_to"),
        ({**STRUCTURED, "attachments": [{"filename": "r\r\n.txt", "content": "aGk="}]}, "attachments[0].filename"),
    ],
)  # fmt: skip
async def test_hostile_addresses_and_line_breaks_are_a_422_naming_the_field(
    database: db.Database, body: dict[str, Any], field: str
) -> None:
    async with serving(database) as client:
        async with client.session.post(client.base + "/v1/messages", json=body,
                                       headers={"Authorization": f"Bearer {TOKEN}"}) as response:  # fmt: skip
            assert (response.status, response.content_type) == (422, "application/json")
            answer = await response.json()
        assert answer["field"] == field
        assert answer["error"].startswith(f"{field}: ")
        assert await query(database, "SELECT id FROM messages") == []


async def test_injection_is_refused_as_smtp_would_refuse(database: db.Database) -> None:
    defaults = {"quick": submission.TenantDefaults(refuse_suppressed=True, quota=quotas.Quota(max_per_hour=1))}
    await tenants.add(database, "quick", "pw-of-quick")
    async with serving(database, tenant_defaults=defaults, max_message_size=2000) as client:
        for bad in (b"{not json", b'{"content": "\\ud800"}', b"\xff"):  # a lone surrogate is no text either
            async with client.session.post(client.base + "/v1/messages", data=bad,
                                           headers={"Authorization": f"Bearer {TOKEN}"}) as response:  # fmt: skip
                assert response.status == 400
                assert (await response.json())["error"].startswith("the body is not JSON: ")
        big = {**RAW, "content": "Subject: big\n\n" + "z\n" * 1500}
        assert (await client.call("POST", "/v1/messages", json=big))[0] == 413
        await suppression.add(database, "a@example.com", suppression.Reason.MANUAL, datetime.now(UTC))
        status, answer = await client.call("POST", "/v1/messages", json={**RAW, "tenant": "quick"})
        assert status == 202
        assert answer["recipients"] == ["b@example.com"]
        assert answer["refused"] == [{"recipient": "a@example.com",
                                      "smtp": "550 5.7.1 <a@example.com>: suppressed, not sent to again"}]  # fmt: skip
        status, answer = await client.call("POST", "/v1/messages", json={**RAW, "tenant": "quick"})
        assert status == 429
        assert "max_per_hour" in answer["error"]
        assert answer["smtp"].startswith("451 4.7.1")

        await tenants.pause(database, "default", "checking a list", by="operator", now=datetime.now(UTC))
        await client.gate.refresh()
        status, answer = await client.call("POST", "/v1/messages", json=RAW)
        assert status == 429
        assert answer["error"] == "Tenant default is paused (operator): checking a list; try again later"


async def test_the_operations_of_the_command_line(database: db.Database) -> None:
    async with serving(database) as client:
        _, injected = await client.call("POST", "/v1/messages", json=RAW)
        status, listed = await client.call("GET", "/v1/queue?state=queued&limit=1")
        assert status == 200
        assert [d["recipient"] for d in listed["deliveries"]] == ["a@example.com"]
        assert (await client.call("GET", "/v1/queue?limit=0"))[0] == 400
        status, acted = await client.call("POST", f"/v1/queue/{injected['queue_id']}/cancel")
        assert status == 200
        assert len(acted["changed"]) == 2
        assert (await client.call("POST", f"/v1/queue/{injected['queue_id']}/explode"))[0] == 404
        assert (await client.call("GET", "/v1/queue/no-such-thing"))[0] == 404

        await tenants.add(database, "shop", "secret-password")
        status, found = await client.call("GET", "/v1/tenants")
        assert [t["name"] for t in found["tenants"]] == ["shop"]
        assert "password_hash" not in found["tenants"][0]
        status, paused = await client.call("POST", "/v1/tenants/shop/pause", json={"reason": "spam trap hits"})
        assert (status, paused["paused"]) == (200, True)
        assert (await client.call("POST", "/v1/tenants/shop/pause"))[0] == 409
        status, shown = await client.call("GET", "/v1/tenants/shop")
        assert (shown["paused_by"], shown["paused_reason"]) == ("operator", "spam trap hits")
        assert shown["windows"]["24h"]["delivered"] == 0
        assert (await client.call("POST", "/v1/tenants/shop/resume"))[1]["paused"] is False
        assert (await client.call("POST", "/v1/tenants/shop/resume"))[0] == 409
        assert (await client.call("GET", "/v1/tenants/bad%20name"))[0] == 422

        status, added = await client.call("POST", "/v1/suppressions", json={"address": "X@Example.com",
                                                                           "tenant": "shop"})  # fmt: skip
        assert (status, added["address"], added["reason"]) == (201, "x@example.com", "manual")
        status, listed = await client.call("GET", "/v1/suppressions?tenant=shop")
        assert [e["address"] for e in listed["suppressions"]] == ["x@example.com"]
        assert (await client.call("GET", "/v1/suppressions?reason=bogus"))[0] == 422
        assert (await client.call("DELETE", "/v1/suppressions/x@example.com?tenant=shop"))[0] == 200
        assert (await client.call("DELETE", "/v1/suppressions/x@example.com?tenant=shop"))[0] == 404

        await webhooks.add(database, SEALER, "shop", "https://hooks.example.net/x")
        status, hooks = await client.call("GET", "/v1/webhooks")
        assert [h["url"] for h in hooks["endpoints"]] == ["https://hooks.example.net/x"]
        assert "secret" not in str(hooks)
        assert (await client.call("GET", "/v1/accounts"))[1] == {"accounts": []}
        assert (await client.call("GET", "/v1/buckets"))[0] == 200
        assert (await client.call("GET", "/v1/reputation?scope=planet"))[0] == 422
        assert (await client.call("GET", "/v1/reputation"))[1] == {"windows": []}


async def test_suspensions_and_reroutes_over_http(database: db.Database) -> None:
    async with serving(database) as client:
        status, made = await client.call("POST", "/v1/suspensions", json={"kind": "provider", "key": "google",
                                                                         "reason": "421s", "for": "2h"})  # fmt: skip
        assert (status, made["kind"], made["key"], made["reason"]) == (201, "provider", "google", "421s")
        assert made["until"] is not None
        bad = {"kind": "planet", "key": "mars"}
        assert (await client.call("POST", "/v1/suspensions", json=bad))[0] == 422
        assert (await client.call("POST", "/v1/suspensions", json={**bad, "kind": "source"}))[0] == 422
        status, _ = await client.call("POST", "/v1/reroutes", json={"provider": "google", "pool": "bulk"})
        assert status == 201
        status, found = await client.call("GET", "/v1/suspensions")
        assert [(s["kind"], s["key"]) for s in found["suspensions"]] == [("provider", "google")]
        assert [(r["provider"], r["pool"]) for r in found["reroutes"]] == [("google", "bulk")]
        assert (await client.call("DELETE", "/v1/suspensions/provider/google"))[1]["released"] == 0
        assert (await client.call("DELETE", "/v1/suspensions/provider/google"))[0] == 404
        assert (await client.call("DELETE", "/v1/reroutes/google"))[0] == 200
        assert (await client.call("DELETE", "/v1/reroutes/google"))[0] == 404


async def test_every_route_is_documented_and_wants_the_token(database: db.Database) -> None:
    async with serving(database) as client:
        _, document = await client.call("GET", "/v1/openapi.json", token=None)
        # The API's routes: the status page's (/, /page/...) are documented in docs/admin-api.md.
        routed = {(r.method, r.resource.canonical) for r in api.application(
            api.Services(database, TOKEN, None, "default", lambda t: (quotas.NONE, reputation.Guard()), 30.0)
        ).router.routes() if r.method != "HEAD" and r.resource is not None
            and r.resource.canonical.startswith("/v1/")}  # fmt: skip
        documented = {(method.upper(), path) for path, item in document["paths"].items() for method in item}
        assert routed == documented
        for method, path in sorted(documented - {("GET", "/v1/openapi.json")}):
            concrete = path.replace("{id}", "1").replace("{action}", "retry").replace("{name}", "shop")
            concrete = concrete.replace("{address}", "a@example.com").replace("{kind}", "tenant")
            concrete = concrete.replace("{key}", "shop").replace("{provider}", "google")
            concrete = concrete.replace("{action}", "enable")
            for token in (None, "not-the-token"):
                status, body = await client.call(method, concrete, token=token, json={})
                assert (status, "Bearer" in body["error"]) == (401, True), (method, concrete)


async def test_tenants_webhooks_and_accounts_are_made_and_changed(database: db.Database) -> None:
    async with serving(database) as client:
        assert (await client.call("POST", "/v1/tenants", json={"name": "shop", "password": "pw-of-shop"}))[0] == 201
        assert (await client.call("POST", "/v1/tenants", json={"name": "shop", "password": "again"}))[0] == 409
        assert await tenants.Authenticator(database).verify("shop", "pw-of-shop")
        status, made = await client.call("POST", "/v1/webhooks", json={
            "tenant": "shop", "url": "https://hooks.example.net/in", "events": ["bounced"], "batch": 10})  # fmt: skip
        assert status == 201
        assert made["secret"].startswith("whsec_")
        assert (made["events"], made["batch"]) == (["bounced"], 10)
        bad = {"tenant": "shop", "url": "https://hooks.example.net/in", "events": ["exploded"]}
        assert (await client.call("POST", "/v1/webhooks", json=bad))[0] == 422
        status, rotated = await client.call("POST", f"/v1/webhooks/{made['id']}/rotate-secret", json={"overlap": "1h"})
        assert status == 200
        assert rotated["secret"] != made["secret"]
        since = {"tenant": "shop", "since": "2026-01-01T00:00:00"}
        status, replayed = await client.call("POST", "/v1/webhooks/replay", json=since)
        assert (status, replayed["written"]) == (200, 0)
        assert (await client.call("DELETE", f"/v1/webhooks/{made['id']}"))[0] == 200
        assert (await client.call("DELETE", f"/v1/webhooks/{made['id']}"))[0] == 404

        await make(database, "box")
        status, changed = await client.call("POST", "/v1/accounts/box/disable", json={"reason": "complaints"})
        assert (status, changed["state"]) == (200, "disabled")
        assert (await client.call("POST", "/v1/accounts/box/enable"))[1]["state"] == "active"
        assert (await client.call("POST", "/v1/accounts/nobody/enable"))[0] == 404
        [listed] = (await client.call("GET", "/v1/accounts"))[1]["accounts"]
        assert "secret" not in listed
        assert "password" not in str(listed)


async def test_a_name_that_names_nothing_is_refused_with_the_one_meant(database: db.Database) -> None:
    """A tenant, pool, provider group, account, webhook endpoint or source address that
    does not exist: 404 in the path, 422 naming the field in the body or the query,
    with the closest known name; and nothing is done."""
    await tenants.add(database, "shop", "pw-of-shop")
    await make(database, "box", pool="outreach")
    async with serving(database) as client:

        async def refused(method: str, path: str, status: int, meant: str | None, field: str | None = None,
                          **kw: Any) -> str:  # fmt: skip
            got, answer = await client.call(method, path, **kw)
            assert (got, answer.get("field"), answer["did_you_mean"]) == (status, field, meant), (path, answer)
            return str(answer["error"])

        said = await refused("POST", "/v1/messages", 422, "shop", "tenant", json={**RAW, "tenant": "shpo"})
        assert said == "no tenant 'shpo' (did you mean 'shop'?)"
        assert (await client.call("POST", "/v1/messages", json={**RAW, "tenant": "default"}))[0] == 202  # no row
        await refused("GET", "/v1/tenants/shpo", 404, "shop")
        await refused("POST", "/v1/tenants/shpo/pause", 404, "shop")
        await refused("POST", "/v1/tenants/shpo/resume", 404, "shop")
        await refused("GET", "/v1/reputation?tenant=shpo", 422, "shop", "tenant")
        await refused("POST", "/v1/suppressions", 422, "shop", "tenant", json={"address": "a@b.c", "tenant": "shpo"})
        await refused("GET", "/v1/suppressions?tenant=shpo", 422, "shop", "tenant")
        await refused("DELETE", "/v1/suppressions/a@b.c?tenant=shpo", 422, "shop", "tenant")
        await refused("POST", "/v1/webhooks", 422, "shop", "tenant", json={"tenant": "shpo", "url": "https://h.test/"})
        await refused("GET", "/v1/webhooks?tenant=shpo", 422, "shop", "tenant")
        await refused("DELETE", "/v1/webhooks/7", 404, None)
        await refused("POST", "/v1/webhooks/7/rotate-secret", 404, None)
        since = "2026-01-01T00:00:00"
        await refused("POST", "/v1/webhooks/replay", 422, "shop", "tenant", json={"tenant": "shpo", "since": since})
        await refused("POST", "/v1/webhooks/replay", 422, None, "endpoint",
                      json={"tenant": "shop", "since": since, "endpoint": 7})  # fmt: skip
        await refused("POST", "/v1/accounts/bx/disable", 404, "box")
        await refused("GET", "/v1/accounts?pool=outrech", 422, "outreach", "pool")
        await refused("GET", "/v1/queue?provider=gogle", 422, "google", "provider")

        for kind, key, meant in [("tenant", "shpo", "shop"), ("provider", "gogle", "google"), ("pool", "bulkk", "bulk"),
                                 ("source", "127.0.0.13", "127.0.0.12"), ("account", "bx", "box"),
                                 ("provider", "mx:mx.example.net", None)]:  # fmt: skip
            await refused("POST", "/v1/suspensions", 422, meant, "key", json={"kind": kind, "key": key})
        await refused("POST", "/v1/reroutes", 422, "bulk", "pool", json={"provider": "google", "pool": "bulkk"})
        said = await refused("POST", "/v1/reroutes", 422, None, "provider", json={"provider": "nosuchgroup",
                                                                                  "pool": "bulk"})  # fmt: skip
        assert (
            said == "no provider group 'nosuchgroup' is configured or was routed to (known: accounts:outreach, "
            "google, microsoft)"
        )
        await refused("DELETE", "/v1/reroutes/google", 404, None)
        await refused("DELETE", "/v1/suspensions/pool/bulk", 404, None)
        assert await query(database, "SELECT * FROM tenant_states") == []
        assert await query(database, "SELECT * FROM suspensions") == []
        assert await query(database, "SELECT * FROM reroutes") == []
        assert await query(database, "SELECT * FROM suppressions") == []
        assert await query(database, "SELECT * FROM webhook_endpoints") == []
        assert [r["tenant"] for r in await query(database, "SELECT tenant FROM messages")] == ["default"]

        # What is known is taken: the default tenant, a configured group and address, and
        # an mx: group once the spool has seen it.
        for kind, key in [("tenant", "default"), ("provider", "google"), ("source", "127.0.0.12")]:
            assert (await client.call("POST", "/v1/suspensions", json={"kind": kind, "key": key}))[0] == 201
        await query(database, "INSERT INTO buckets (route_group, source, rate, sessions, changed_by, updated_at) "
                              "VALUES ('mx:mx.example.net', '', 1, 1, 'n1', now())")  # fmt: skip
        assert (await client.call("POST", "/v1/suspensions", json={"kind": "provider",
                                                                   "key": "mx:mx.example.net"}))[0] == 201  # fmt: skip
        await refused("DELETE", "/v1/suspensions/source/127.0.0.13", 404, "127.0.0.12")
