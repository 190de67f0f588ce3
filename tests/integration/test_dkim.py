"""DKIM keys in PostgreSQL, and signatures made at transmission that verify at the sink."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dkim as dkimpy
import pytest

from mtad import db
from mtad.base import errors, vault
from mtad.deliver import delivery
from mtad.mailboxes import accounts, relay
from mtad.outbound import routing
from mtad.signing import dkim
from mtad.signing.dkim import Algorithm, KeyState
from tests.integration.delivering import accept, engine, new_message
from tests.integration.mailboxes import SEALER, add, relayed, relaying
from tests.pg import query
from tests.sink import Sink

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def verifies(message: bytes, *keys: dkim.Key) -> bool:
    records = {f"{k.name}.".encode(): k.record().encode() for k in keys}
    try:
        return bool(dkimpy.DKIM(message).verify(dnsfunc=lambda name, timeout=5: records.get(name, b"")))
    except dkimpy.ValidationError:
        return False


async def active_key(database: db.Database, domain: str, algorithm: Algorithm = Algorithm.RSA2048) -> dkim.Key:
    key = await dkim.add(database, dkim.generate(domain, dkim.default_selector(algorithm, NOW), algorithm), SEALER)
    await dkim.set_state(database, domain, key.selector, KeyState.ACTIVE, NOW)
    return dataclasses.replace(key, state=KeyState.ACTIVE)


async def test_keys_are_stored_sealed_listed_and_loaded(database: db.Database) -> None:
    rsa_key = await dkim.add(database, dkim.generate("Example.COM", "s1", Algorithm.RSA2048), SEALER)
    ed_key = await dkim.add(database, dkim.generate("example.com", "s2", Algorithm.ED25519), SEALER)
    assert (rsa_key.domain, rsa_key.state) == ("example.com", KeyState.PENDING)
    with pytest.raises(errors.Conflict, match=r"selector 's1' of example\.com already exists"):
        await dkim.add(database, dkim.generate("example.com", "s1", Algorithm.RSA2048), SEALER)
    [stored] = await query(database, "SELECT private_key FROM dkim_keys WHERE selector = 's1'")
    assert b"PRIVATE KEY" not in bytes(stored["private_key"])  # sealed at rest
    assert await dkim.load(database, SEALER) == []  # pending keys do not sign
    await dkim.set_state(database, "example.com", "s1", KeyState.ACTIVE, NOW)
    await dkim.set_state(database, "example.com", "s2", KeyState.ACTIVE, NOW)
    loaded = await dkim.load(database, SEALER)
    assert [(k.selector, k.algorithm) for k in loaded] == [("s1", Algorithm.RSA2048), ("s2", Algorithm.ED25519)]
    assert [k.record() for k in loaded] == [rsa_key.record(), ed_key.record()]
    listed = {k.selector: k for k in await dkim.list_all(database)}
    assert listed["s1"].record.startswith("v=DKIM1; k=rsa; p=MII")
    assert listed["s2"].record.startswith("v=DKIM1; k=ed25519; p=")
    with pytest.raises(errors.NotFound):
        await dkim.set_state(database, "example.com", "nope", KeyState.ACTIVE, NOW)
    with pytest.raises(errors.ConfigError, match="does not open"):
        await dkim.load(database, vault.Vault(vault.Vault.new_key()))


async def test_mail_is_signed_at_transmission_once_per_key_and_verifies(database: db.Database, sink: Sink) -> None:
    rsa_key = await active_key(database, "example.org")
    ed_key = await active_key(database, "example.org", Algorithm.ED25519)
    signer = dkim.Signer(processes=1)  # as the daemon signs: RSA in a worker process
    signer.replace(await dkim.load(database, SEALER))
    body = b"From: App <app@example.org>\r\nTo: a@sink.test\r\nSubject: signed\r\n\r\nhello\r\n"
    await accept(database, new_message("a@sink.test", "b@other.test", body=body))  # two jobs: two transactions
    await engine(database, sink, signer=signer).run_until_idle()
    await signer.close()
    assert len(sink.received) == 2
    for message in sink.received:
        assert message.data.startswith(b"DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=example.org;")
        assert verifies(message.data, rsa_key, ed_key)
        assert message.data.count(b"DKIM-Signature:") == 2  # RSA and Ed25519 side by side
    first, second = (m.data.split(b"\r\nFrom:")[0] for m in sink.received)
    assert first == second  # signed once, the signatures reused for the second transaction
    assert signer.made == 1  # also when both went at once
    [stored] = await query(database, "SELECT dkim_fields FROM messages")
    assert stored["dkim_fields"] is None  # delivered at once: nothing kept for a retry
    events = await query(database, "SELECT data FROM events WHERE kind = 'delivered'")
    assert {json.loads(e["data"])["dkim"] for e in events} == {
        f"d=example.org s={rsa_key.selector} d=example.org s={ed_key.selector}"
    }


async def test_a_message_without_a_key_goes_unsigned_and_the_event_says_so(database: db.Database, sink: Sink) -> None:
    await active_key(database, "example.org")
    signer = dkim.Signer()
    signer.replace(await dkim.load(database, SEALER))
    await accept(database, new_message("a@sink.test", body=b"From: x@elsewhere.example\r\n\r\nhi\r\n"))
    await engine(database, sink, signer=signer).run_until_idle()
    [message] = sink.received
    assert b"DKIM-Signature" not in message.data
    [event] = await query(database, "SELECT data FROM events WHERE kind = 'delivered'")
    assert json.loads(event["data"])["dkim"] == "unsigned: no active key for elsewhere.example"


async def test_the_tenants_signing_domain_comes_first(database: db.Database, sink: Sink) -> None:
    key = await active_key(database, "tenant.example")
    signer = dkim.Signer()
    signer.replace(await dkim.load(database, SEALER))
    await accept(database, new_message("a@sink.test", body=b"From: x@other.example\r\n\r\nhi\r\n"))  # tenant t1
    await engine(database, sink, signer=signer, tenant_dkim_domains={"t1": "tenant.example"}).run_until_idle()
    [message] = sink.received
    assert b"d=tenant.example;" in message.data
    assert verifies(message.data, key)


async def test_relayed_mail_is_signed_after_the_from_rewrite(
    database: db.Database, smarthost: Sink, tls_files: tuple[Path, Path]
) -> None:
    key = await active_key(database, "example.com")  # the accounts' domain
    await add(database, smarthost, "a")
    await accept(database, relayed("r@example.net", body=b"From: Shop <news@shop.example>\r\n\r\nhello\r\n"))
    settings = relay.Settings(pools={"p": relay.PoolSettings(rewrite_from=True)}, poll=0.2)
    signer = dkim.Signer()
    signer.replace(await dkim.load(database, SEALER))
    await relaying(database, tls_files, settings=settings, signer=signer).run_until_idle()
    [message] = smarthost.received
    assert b"From: Shop <a@example.com>" in message.data
    assert b"d=example.com;" in message.data
    assert verifies(message.data, key)
    assert (await accounts.get(database, "a")).state is accounts.State.ACTIVE


def test_settings_carry_the_tenant_domains() -> None:
    assert delivery.Settings(node="n", tenant_dkim_domains={"t": "d.example"}).tenant_dkim_domains == {"t": "d.example"}


async def test_a_retry_reuses_the_signature_while_the_key_and_header_are_the_same(
    database: db.Database, sink: Sink
) -> None:
    key = await active_key(database, "example.org")
    signer = dkim.Signer()
    signer.replace(await dkim.load(database, SEALER))
    await accept(database, new_message("flaky-1@sink.test", body=b"From: a@example.org\r\n\r\nhi\r\n"))
    clock = [datetime.now(UTC)]
    await engine(database, sink, signer=signer, now=lambda: clock[0]).run_until_idle()  # refused at RCPT: deferred
    [stored] = await query(database, "SELECT dkim_fields, dkim_keys FROM messages")
    assert stored["dkim_keys"] == [key.id]
    clock[0] += timedelta(seconds=61)
    await engine(database, sink, signer=signer, now=lambda: clock[0]).run_until_idle()  # a new engine: from the spool
    [message] = sink.received
    assert message.data.startswith(bytes(stored["dkim_fields"]))  # the first attempt's signature, reused
    assert verifies(message.data, key)


async def test_mail_waiting_for_a_session_is_signed_before_its_turn(database: db.Database, sink: Sink) -> None:
    key = await active_key(database, "example.org")
    signer = dkim.Signer()
    signer.replace(await dkim.load(database, SEALER))
    one_session = routing.parse_providers({"default": {"rate": "unlimited", "max_rate": "unlimited", "sessions": 1}})
    body = b"From: a@example.org\r\nSubject: %d\r\n\r\nhi\r\n"
    await accept(database, new_message("slow-1@sink.test", body=body % 0))
    await accept(database, *(new_message("a@sink.test", body=body % n) for n in range(1, 4)))
    node = engine(database, sink, signer=signer, providers=one_session)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(node.run_until_idle())
        await sink.holding.wait()  # the first send holds the group's one session
        for _ in range(1000):  # each loop turn: the others' signing is under way, not their sends
            if signer.made == 4:
                break
            await asyncio.sleep(0)
        assert signer.made == 4
        assert len(sink.received) == 0
        sink.release()
    assert len(sink.received) == 4
    assert all(verifies(m.data, key) for m in sink.received)
    assert signer.made == 4  # signed once each: the sends took the signatures made ahead
