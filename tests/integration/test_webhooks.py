"""Webhook endpoints against real PostgreSQL: secrets made, shown once and kept
sealed; signatures that the standardwebhooks package verifies; a rotated secret
that signs beside the new one until its overlap ends; bad input refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from mtad import db
from mtad.base import errors, vault
from mtad.feedback import webhooks
from tests.pg import query

SEALER = vault.Vault(vault.Vault.new_key())
BODY = json.dumps({"type": "delivered", "data": {"recipient": "a@example.net"}})


async def test_an_endpoint_gets_a_secret_shown_once_and_kept_sealed(database: db.Database) -> None:
    endpoint, secret = await webhooks.add(database, SEALER, "shop", "https://hooks.example.com/mtad",
                                          ["delivered", "bounced"])  # fmt: skip
    assert secret.startswith("whsec_")
    assert (endpoint.tenant, endpoint.url, endpoint.events) == ("shop", "https://hooks.example.com/mtad",
                                                               frozenset({"delivered", "bounced"}))  # fmt: skip
    assert endpoint.wants("bounced")
    assert not endpoint.wants("received")
    assert endpoint.batch == 1  # one event a request, its object alone
    [stored] = await query(database, "SELECT secret FROM webhook_endpoints")
    assert secret.encode() not in bytes(stored["secret"])
    assert await webhooks.listing(database) == [endpoint]
    assert await webhooks.listing(database, "other") == []
    everything, _ = await webhooks.add(database, SEALER, "shop", "http://10.0.0.5:8080/hook", batch=100)
    assert everything.events is None
    assert everything.wants("received")
    assert [e.batch for e in await webhooks.listing(database)] == [1, 100]


async def test_requests_are_signed_the_standard_webhooks_way(database: db.Database) -> None:
    endpoint, secret = await webhooks.add(database, SEALER, "shop", "https://hooks.example.com/mtad")
    now = datetime.now(UTC)
    signing = await webhooks.signers(database, SEALER, endpoint.id, now)
    headers = webhooks.headers(signing, "msg_1", now, BODY)
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace("a@", "b@"), headers)


async def test_a_rotated_secret_signs_beside_the_new_one_until_its_overlap_ends(database: db.Database) -> None:
    endpoint, old = await webhooks.add(database, SEALER, "shop", "https://hooks.example.com/mtad")
    now = datetime.now(UTC)
    new = await webhooks.rotate(database, SEALER, endpoint.id, now + timedelta(hours=1))
    assert new != old
    during = webhooks.headers(await webhooks.signers(database, SEALER, endpoint.id, now), "msg_2", now, BODY)
    assert len(during["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(BODY, during)
    later = now + timedelta(hours=2)
    after = await webhooks.signers(database, SEALER, endpoint.id, later)
    assert len(after) == 1
    assert after[0].sign("msg_3", later, BODY) == Webhook(new).sign("msg_3", later, BODY)
    [listed] = await webhooks.listing(database)
    assert listed.previous_until is not None


async def test_bad_input_is_refused_with_what_is_wrong(database: db.Database) -> None:
    with pytest.raises(errors.ConfigError) as refused:
        await webhooks.add(database, SEALER, "no spaces", "ftp://x.example.com/", ["delivered", "nope"])
    problems = refused.value.problems
    assert any("'no spaces' is not a tenant name" in p for p in problems)
    assert any("http:// or https://" in p for p in problems)
    for url, why in (("https://user:pw@x.example.com/", "no user or password"), ("https:///path", "names a host")):
        with pytest.raises(errors.ConfigError, match=why):
            await webhooks.add(database, SEALER, "shop", url)
    with pytest.raises(errors.ConfigError, match="unknown event kinds: nope"):
        await webhooks.add(database, SEALER, "shop", "https://x.example.com/", ["nope"])
    for batch in (0, 1001):
        with pytest.raises(errors.ConfigError, match=f"a batch is 1 to 1000 events, not {batch}"):
            await webhooks.add(database, SEALER, "shop", "https://x.example.com/", batch=batch)
    with pytest.raises(errors.NotFound):
        await webhooks.rotate(database, SEALER, 999, datetime.now(UTC))
    assert not await webhooks.remove(database, 999)
    assert await webhooks.listing(database) == []
