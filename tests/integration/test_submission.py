"""The submission port against real sockets and real PostgreSQL."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl

import aiosmtplib
import pytest

from mtad import db, submission
from mtad.deliver import delivery
from mtad.outbound import outcomes, routing, sessions
from mtad.spool import leases, tenants
from tests import waiting
from tests.integration.delivering import PROVIDERS, RULES
from tests.integration.delivering import ZONE as DELIVERY_ZONE
from tests.integration.submitting import Factory
from tests.pg import query
from tests.proxy import PgProxy
from tests.smtpclient import RawClient
from tests.zones import ZoneResolver

MESSAGE = b"From: app@example.org\r\nTo: rcpt@example.com\r\nSubject: hi\r\n\r\nHello.\r\n"
ONLY_LOCALHOST = (ipaddress.ip_network("127.0.0.1/32"),)
UNTRUSTED = "127.0.0.2"  # a client address outside ONLY_LOCALHOST


async def stored(database: db.Database) -> list[dict[str, object]]:
    return [dict(r) for r in await query(database, "SELECT * FROM messages ORDER BY received_at")]


async def test_ehlo_advertises_the_extensions(make_submission: Factory) -> None:
    async with make_submission(tls=True, trusted_networks=ONLY_LOCALHOST, max_message_size=1000) as srv:
        trusted = await RawClient.connect("127.0.0.1", srv.port)
        lines = (await trusted.ehlo()).splitlines()
        for ext in ["SIZE 1000", "8BITMIME", "PIPELINING", "ENHANCEDSTATUSCODES", "SMTPUTF8", "STARTTLS"]:
            assert f"250-{ext}" in lines
        assert "250-AUTH LOGIN PLAIN" in lines  # trusted: AUTH without STARTTLS
        await trusted.close()

        untrusted = await RawClient.connect("127.0.0.1", srv.port, source=UNTRUSTED)
        assert "AUTH" not in await untrusted.ehlo()
        assert (await untrusted.auth_plain("shop", "pw")).startswith("538 5.7.11")
        await untrusted.close()


async def test_trusted_client_submits_and_mtad_adds_its_headers(make_submission: Factory) -> None:
    async with make_submission() as srv:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=srv.port, start_tls=False)
        await client.connect()
        errors, reply = await client.sendmail("app@example.org", ["rcpt@example.com", "two@example.com"], MESSAGE)
        await client.quit()
        assert errors == {}
        assert reply.startswith("2.0.0 Ok: queued as ")
        [row] = await stored(srv.database)
    assert str(row["id"]) == reply.rsplit(" ", 1)[1]
    assert (row["tenant"], row["sender"], row["client_address"]) == ("default", "app@example.org", "127.0.0.1")
    body = bytes(row["body"])  # type: ignore[arg-type]
    assert body.startswith(b"Received: from ")
    assert b"by mtad.test (mtad) with ESMTP id " in body
    assert row["message_id"] == f"<{row['id'].hex}@mtad.test>"  # type: ignore[attr-defined]
    # Message-ID and Date are added at the end of the header block.
    assert f"Subject: hi\r\nMessage-ID: {row['message_id']}\r\nDate: ".encode() in body
    assert body.endswith(b"\r\n\r\nHello.\r\n")
    assert row["idempotency_key"] is None  # no Message-ID of the client's own: nothing to recognise


async def test_untrusted_client_must_authenticate(make_submission: Factory, client_tls: ssl.SSLContext) -> None:
    async with make_submission(tls=True, trusted_networks=ONLY_LOCALHOST) as srv:
        await tenants.add(srv.database, "shop", "s3cret")
        raw = await RawClient.connect("127.0.0.1", srv.port, source=UNTRUSTED)
        await raw.ehlo()
        assert (await raw.command("MAIL FROM:<app@example.org>")).startswith("530 5.7.0")
        await raw.close()

        client = aiosmtplib.SMTP(
            hostname="127.0.0.1", port=srv.port, source_address=(UNTRUSTED, 0), start_tls=False, tls_context=client_tls
        )
        await client.connect()
        await client.starttls()
        await client.ehlo()
        assert "auth" in client.esmtp_extensions
        with pytest.raises(aiosmtplib.SMTPAuthenticationError) as info:
            await client.login("shop", "wrong")
        assert info.value.code == 535
        assert "5.7.8" in info.value.message
        await client.login("shop", "s3cret")
        await client.sendmail("app@example.org", ["rcpt@example.com"], MESSAGE)
        await client.quit()
        [row] = await stored(srv.database)
    assert row["tenant"] == "shop"
    assert b"with ESMTPSA id" in bytes(row["body"])  # type: ignore[arg-type]


async def test_require_auth_applies_to_trusted_networks_too(make_submission: Factory) -> None:
    async with make_submission(require_auth=True) as srv:
        await tenants.add(srv.database, "shop", "s3cret")
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        assert (await raw.command("MAIL FROM:<app@example.org>")).startswith("530 5.7.0")
        # AUTH LOGIN, challenge by challenge (trusted: no STARTTLS needed).
        assert (await raw.command("AUTH LOGIN")).startswith("334 ")
        assert (await raw.command("c2hvcA==")).startswith("334 ")  # "shop"
        assert (await raw.command("czNjcmV0")).startswith("235 2.7.0")  # "s3cret"
        assert (await raw.command("MAIL FROM:<app@example.org>")).startswith("250 2.1.0")
        await raw.close()


async def test_auth_logs_no_deprecation_of_aiosmtpd_login_data(
    make_submission: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    async with make_submission(require_auth=True) as srv:
        await tenants.add(srv.database, "shop", "s3cret")
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        with caplog.at_level(logging.WARNING):
            assert (await raw.auth_plain("shop", "s3cret")).startswith("235 2.7.0")
            assert (await raw.command("MAIL FROM:<app@example.org>")).startswith("250 2.1.0")
        await raw.close()
    assert [r.getMessage() for r in caplog.records if "login_data" in r.getMessage()] == []


async def test_failed_auth_is_rate_limited_per_client(make_submission: Factory) -> None:
    async with make_submission(auth_max_failures=3) as srv:
        await tenants.add(srv.database, "shop", "s3cret")
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        for _ in range(3):
            assert (await raw.auth_plain("shop", "nope")).startswith("535 5.7.8")
        assert (await raw.auth_plain("shop", "s3cret")).startswith("454 4.7.0")  # even the right password
        await raw.close()


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        (["MAIL FROM:<a..b@example.org>"], "553 5.1.3"),
        (["MAIL FROM:<app@example.org"], "501 5.1.7"),
        (["MAIL FROM:<@x.test:>"], "501 5.1.7"),  # a source route to no mailbox: not the null sender
        (["MAIL FROM:<app@example.org>", "RCPT TO:<@x.test:>"], "501 5.1.3"),
        (["MAIL FROM:"], "501 5.5.4"),
        (["MAIL FROM:<>", "MAIL FROM:<>"], "503 5.5.1"),  # nested, after a null reverse-path
        (["MAIL FROM:<>", "RCPT TO:<>"], "501 5.5.4"),
        (["MAIL FROM:<jösé@example.org>"], "553 5.6.7"),  # needs SMTPUTF8
        (["MAIL FROM:<app@example.org> SIZE=2000"], "552 5.3.4"),
        (["MAIL FROM:<app@example.org>", "RCPT TO:<rcpt@localhost>"], "553 5.1.2"),
        (["MAIL FROM:<app@example.org>", "RCPT TO:<rcpt@[192.0.2.1]>"], "553 5.1.2"),
        (["MAIL FROM:<app@example.org>", "RCPT TO:<rc pt@example.com>"], "553 5.1.3"),
        (["RCPT TO:<rcpt@example.com>"], "503 5.5.1"),
        (["DATA"], "503 5.5.1"),
        (["FROB"], "500 5.5.2"),
        (["MAIL FROM:<app@example.org> FOO=BAR"], "555 5.5.4"),
    ],
)
async def test_refusals_carry_enhanced_codes(make_submission: Factory, commands: list[str], expected: str) -> None:
    async with make_submission(max_message_size=1000) as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        for command in commands[:-1]:
            assert (await raw.command(command)).startswith("250")
        reply = await raw.command(commands[-1])
        assert reply.startswith(expected + " "), reply
        assert len(reply) > len(expected) + 5  # with a text that says why
        await raw.close()


async def test_recipient_count_is_limited(make_submission: Factory) -> None:
    async with make_submission(max_recipients=2) as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.envelope("app@example.org", "a@example.com", "b@example.com")
        assert (await raw.command("RCPT TO:<c@example.com>")).startswith("452 4.5.3")
        assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0")
        await raw.close()
        [row] = await query(srv.database, "SELECT count(*) AS n FROM deliveries")
    assert row["n"] == 2


async def test_idna_and_smtputf8_addresses(make_submission: Factory) -> None:
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        assert (await raw.command("MAIL FROM:<jösé@example.org> SMTPUTF8")).startswith("250")
        assert (await raw.command("RCPT TO:<ünï@Bücher.Example>")).startswith("250")
        assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0")
        await raw.close()
        [row] = await query(srv.database, "SELECT recipient, domain FROM deliveries")
        [msg] = await stored(srv.database)
    assert (row["recipient"], row["domain"]) == ("ünï@xn--bcher-kva.example", "xn--bcher-kva.example")
    assert msg["smtputf8"] is True
    assert b"with UTF8SMTP id" in bytes(msg["body"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"Subject: x\r\n\r\n" + b"a" * 1100 + b"\r\n.\r\n", "500 5.5.6"),  # line too long
        (b"Subject: x\r\n\r\n" + b"a" * 990 + b"\r\n" + b"b" * 990 + b"\r\n.\r\n", "552 5.3.4"),  # too big
        (b"Subject: x\r\n\r\nbare\nLF\r\n.\r\n", "550 5.5.2"),
        (b"Subject: x\r\n\r\nbare\rCR\r\n.\r\n", "550 5.5.2"),
    ],
)
async def test_data_limits_and_line_endings(make_submission: Factory, data: bytes, expected: str) -> None:
    async with make_submission(max_message_size=1500) as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.envelope()
        assert (await raw.data(data)).startswith(expected + " ")
        # The session goes on: a clean message is accepted after the refusal.
        await raw.envelope()
        assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0")
        await raw.close()
        assert len(await stored(srv.database)) == 1


SMUGGLED = b"MAIL FROM:<evil@example.org>\r\nRCPT TO:<victim@example.com>\r\nDATA\r\nSubject: smuggled\r\n\r\nx\r\n"


@pytest.mark.parametrize("fake_end", [b"\n.\r\n", b"\r\n.\n", b"\n.\n", b"\r.\r\n", b"\r\n.\r"])
async def test_smtp_smuggling_is_refused(make_submission: Factory, fake_end: bytes) -> None:
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.envelope()
        reply = await raw.data(b"Subject: outer\r\n\r\nouter body" + fake_end + SMUGGLED + b".\r\n")
        assert reply.startswith("550 5.5.2"), reply
        assert (await raw.command("NOOP")).startswith("250 2.0.0")  # nothing smuggled is pending
        await raw.close()
        assert await stored(srv.database) == []


async def test_pipelined_commands_get_replies_in_order(make_submission: Factory) -> None:
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.send(b"MAIL FROM:<app@example.org>\r\nRCPT TO:<a@example.com>\r\nRCPT TO:<bad@localhost>\r\nDATA\r\n")
        replies = [await raw.reply() for _ in range(4)]
        assert [r[:3] for r in replies] == ["250", "250", "553", "354"]
        await raw.send(MESSAGE + b".\r\nQUIT\r\n")
        assert (await raw.reply()).startswith("250 2.0.0 Ok: queued as ")
        assert (await raw.reply()).startswith("221 2.0.0")
        await raw.close()


async def test_resubmission_with_the_same_key_gets_the_original_queue_id(make_submission: Factory) -> None:
    with_key = b"Idempotency-Key: order-42\r\n" + MESSAGE
    with_msgid = b"Message-ID: <fixed@example.org>\r\n" + MESSAGE
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        results = []
        for data in (with_key, with_key, with_msgid, with_msgid):
            await raw.envelope()
            results.append(await raw.data(data + b".\r\n"))
        await raw.close()
        assert len(await stored(srv.database)) == 2
    first, second, third, fourth = results
    assert first.startswith("250 2.0.0 Ok: queued as ")
    assert second == f"250 2.0.0 Ok: already queued as {first.rsplit(' ', 1)[1]} (duplicate submission)"
    assert fourth.startswith(f"250 2.0.0 Ok: already queued as {third.rsplit(' ', 1)[1]}")


async def test_database_down_gives_451_and_accept_resumes(dsn: str, tls_files: object) -> None:
    from tests.integration.submitting import submission_server

    with PgProxy(dsn) as proxy:
        database = await db.Database.connect(proxy.dsn, max_size=3)
        try:
            async with submission_server(database) as srv:
                raw = await RawClient.connect("127.0.0.1", srv.port)
                await raw.ehlo()
                proxy.cut()
                await raw.envelope()
                assert (await raw.data(MESSAGE + b".\r\n")).startswith("451 4.3.0")
                proxy.restore()
                await raw.envelope()
                assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0")
                await raw.close()
                assert len(await stored(database)) == 1
        finally:
            await database.close()


async def test_shutdown_lets_data_in_flight_finish_and_closes_idle_sessions(make_submission: Factory) -> None:
    async with make_submission() as srv:
        port = srv.port
        idle = await RawClient.connect("127.0.0.1", port)
        await idle.ehlo()
        busy = await RawClient.connect("127.0.0.1", srv.port)
        await busy.ehlo()
        await busy.envelope()
        assert (await busy.command("DATA")).startswith("354")
        await busy.send(b"Subject: half\r\n\r\nfirst half\r\n")
        assert any(s.in_data for s in srv.server.sessions())  # marked before the 354 went out

        srv.server.stop_accepting()
        drained = asyncio.create_task(srv.server.wait_data_done(10))
        with pytest.raises(OSError):
            await RawClient.connect("127.0.0.1", port)  # no new sessions
        await busy.send(b"second half\r\n.\r\n")
        assert (await busy.reply()).startswith("250 2.0.0")
        assert await drained
        await srv.server.close_sessions()
        assert (await idle.reply()).startswith("421 4.3.2")
        await idle.close()
        await busy.close()
        assert len(await stored(srv.database)) == 1


async def test_one_message_id_sent_to_different_recipients_is_not_a_duplicate(make_submission: Factory) -> None:
    """Applications send one Message-ID to a list in several transactions: all are delivered."""
    data = b"Message-ID: <newsletter-7@example.org>\r\n" + MESSAGE + b".\r\n"
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.envelope("app@example.org", "a@example.com", "b@example.com")
        first = await raw.data(data)
        await raw.envelope("app@example.org", "c@example.com")
        second = await raw.data(data)
        await raw.envelope("app@example.org", "b@example.com", "a@example.com")  # the first, again
        third = await raw.data(data)
        await raw.close()
        [count] = await query(srv.database, "SELECT count(*) AS n FROM deliveries")
    assert first.startswith("250 2.0.0 Ok: queued as ")
    assert second.startswith("250 2.0.0 Ok: queued as ")
    assert third == f"250 2.0.0 Ok: already queued as {first.rsplit(' ', 1)[1]} (duplicate submission)"
    assert count["n"] == 3


async def test_data_is_dot_unstuffed_and_may_arrive_in_any_pieces(make_submission: Factory) -> None:
    body = b"Subject: dots\r\n\r\n..leading dot\r\n...two\r\nmiddle.\r\n" + b"x" * 70 + b"\r\n"
    big = body + (b"y" * 998 + b"\r\n") * 300  # ~300 KB: several reads
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.envelope()
        assert (await raw.command("DATA")).startswith("354")
        wire = big + b".\r\n"
        for i in range(0, len(wire), 7_777):  # the terminator is split across writes too
            await raw.send(wire[i : i + 7_777])
        assert (await raw.reply()).startswith("250 2.0.0")
        await raw.envelope()
        assert (await raw.data(b".\r\n")).startswith("250 2.0.0")  # an empty message
        await raw.close()
        rows = await stored(srv.database)
    first = bytes(rows[0]["body"])  # type: ignore[arg-type]
    assert b"\r\n.leading dot\r\n..two\r\nmiddle.\r\n" in first
    assert first.endswith((b"y" * 998 + b"\r\n") * 300)
    assert len(rows) == 2


@pytest.mark.parametrize("split", range(1, 9))
async def test_end_of_data_and_dots_split_anywhere(make_submission: Factory, split: int) -> None:
    wire = b"Subject: s\r\n\r\n.. a\r\nb\r\n..\r\n.\r\n"
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        await raw.envelope()
        assert (await raw.command("DATA")).startswith("354")
        for i in range(0, len(wire), split):
            await raw.send(wire[i : i + split])
        assert (await raw.reply()).startswith("250 2.0.0")
        await raw.close()
        [row] = await stored(srv.database)
    assert bytes(row["body"]).endswith(b"\r\n\r\n. a\r\nb\r\n.\r\n")  # type: ignore[arg-type]


async def test_recipients_whose_domain_takes_no_mail_are_refused(make_submission: Factory) -> None:
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        assert (await raw.command("MAIL FROM:<app@example.org>")).startswith("250")
        null_mx = await raw.command("RCPT TO:<a@undeliverable.test>")
        assert null_mx.startswith("550 5.1.2 <a@undeliverable.test>: the domain undeliverable.test accepts no mail")
        assert (await raw.command("RCPT TO:<a@nxdomain.test>")).startswith("550 5.1.2")
        assert (await raw.command("RCPT TO:<a@dnsdown.test>")).startswith("250")  # DNS trouble refuses nothing
        await raw.close()


async def test_priority_and_pool_are_stored_and_the_instructions_never_are(make_submission: Factory) -> None:
    pools = frozenset({"transactional", "bulk"})
    defaults = {
        "default": submission.TenantDefaults(priority=-20, pool="transactional"),
        "shop": submission.TenantDefaults(priority=10),
    }
    async with make_submission(pools=pools, tenant_defaults=defaults) as srv:
        await tenants.add(srv.database, "shop", "s3cret")
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        replies = {}
        for name, head in [
            ("instructed", b"X-Mtad-Priority: 30\r\nPriority: non-urgent\r\nx-mtad-pool: bulk\r\n"),
            ("standard", b"Priority: urgent\r\n"),
            ("tenant", b""),
        ]:
            await raw.envelope("app@example.org", "a@example.com", "b@example.com")
            replies[name] = await raw.data(head + MESSAGE + b".\r\n")
        refusals = []
        for head in [b"X-Mtad-Priority: high\r\n", b"X-Mtad-Priority: 101\r\n", b"X-Mtad-Pool: warm\r\n"]:
            await raw.envelope()
            refusals.append(await raw.data(head + MESSAGE + b".\r\n"))
        await raw.close()
        shop = await RawClient.connect("127.0.0.1", srv.port)
        await shop.ehlo()
        assert (await shop.auth_plain("shop", "s3cret")).startswith("235")
        await shop.envelope()
        replies["shop"] = await shop.data(MESSAGE + b".\r\n")
        await shop.close()

        rows = await query(
            srv.database,
            "SELECT m.id, m.tenant, m.pool, m.body, array_agg(d.priority ORDER BY d.id) AS priorities"
            " FROM messages m JOIN deliveries d ON d.message = m.id GROUP BY m.id",
        )
        ids = {name: reply.rsplit(" ", 1)[1] for name, reply in replies.items()}
        for_sending = await leases.messages(srv.database, [row["id"] for row in rows])

    assert all(reply.startswith("250 2.0.0 Ok: queued as ") for reply in replies.values()), replies
    stored_rows = {str(row["id"]): row for row in rows}
    assert len(stored_rows) == 4  # nothing refused was stored
    expected = {"instructed": (30, "bulk"), "standard": (50, "transactional"), "tenant": (-20, "transactional")}
    expected["shop"] = (10, None)
    for name, (priority, pool) in expected.items():
        row = stored_rows[ids[name]]
        assert set(row["priorities"]) == {priority}, name  # every delivery of the message
        assert row["pool"] == pool, name
        body = bytes(row["body"])
        assert b"x-mtad-" not in body.lower(), name
        assert MESSAGE.split(b"\r\n\r\n")[0] + b"\r\nMessage-ID: " in body, name  # the rest as it was
        assert body.endswith(b"\r\n\r\nHello.\r\n"), name
    assert b"\r\nPriority: non-urgent\r\n" in bytes(stored_rows[ids["instructed"]]["body"])  # kept
    assert stored_rows[ids["shop"]]["tenant"] == "shop"
    assert {str(m["id"]): m["pool"] for m in for_sending} == {ids[n]: pool for n, (_, pool) in expected.items()}

    assert refusals[0] == "550 5.6.0 X-Mtad-Priority: expected a whole number from -100 to 100, got 'high'"
    assert refusals[1] == "550 5.6.0 X-Mtad-Priority: expected a whole number from -100 to 100, got '101'"
    assert refusals[2] == "550 5.7.0 X-Mtad-Pool: no source IP pool named 'warm' (configured: bulk, transactional)"


# --- EHLO/HELO names, the null reverse-path, 8-bit addresses, connection caps ----------


HOSTILE_NAMES = [
    b"x\r.\rMAIL FROM:<s@evil.test>",  # CR.CR smuggling into the header
    b"x\rX-Injected: yes",
    b"client\x00.example",
    b"client\r.example",
    b"\x1b[31mred.example",
    b"caf\xe9.example",  # Latin-1
    b"caf\xc3\xa9.example",  # UTF-8
    b"two words",
    b"client.example;",
    b"[192.0.2.300]",
    b"[IPv6:1:2:3]",
    b"[IPv6:fe80::1%eth0]",
    b"[not an address]",
    b"a" * 300,
]


@pytest.mark.parametrize("verb", ["EHLO", "HELO"])
async def test_a_helo_name_that_is_not_a_domain_or_address_literal_is_refused(
    make_submission: Factory, verb: str
) -> None:
    async with make_submission() as srv:
        for name in HOSTILE_NAMES:
            raw = await RawClient.connect("127.0.0.1", srv.port)
            await raw.send(verb.encode() + b" " + name + b"\r\n")
            reply = await raw.reply()
            assert reply.startswith("501 5.5.2 "), (name, reply)
            assert (await raw.command("MAIL FROM:<app@example.org>")).startswith("503 5.5.1"), name  # still no EHLO
            # The session goes on: a good name, and the message carries it, not the refused one.
            assert (await raw.command(f"{verb} client.example")).startswith("250"), name
            await raw.envelope()
            assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0"), name
            await raw.close()
        rows = await stored(srv.database)
    assert len(rows) == len(HOSTILE_NAMES)
    for row in rows:
        body = bytes(row["body"])  # type: ignore[arg-type]
        assert body.startswith(b"Received: from client.example ([127.0.0.1])\r\n\tby mtad.test (mtad) with ESMTP id ")
        assert b"evil" not in body
        assert b"Injected" not in body


async def test_domains_and_address_literals_are_taken_as_helo_names(make_submission: Factory) -> None:
    names = ["client.example", "client.example.", "localhost", "DESKTOP-1AB2C3", "mail_relay.example",
             "[192.0.2.1]", "[IPv6:2001:db8::1]", "[ipv6:::ffff:192.0.2.1]", "xn--bcher-kva.example"]  # fmt: skip
    async with make_submission() as srv:
        for name in names:
            raw = await RawClient.connect("127.0.0.1", srv.port)
            assert (await raw.ehlo(name)).startswith("250-mtad.test"), name
            await raw.envelope()
            assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0")
            await raw.close()
        rows = await stored(srv.database)
    heads = [bytes(row["body"]).split(b"\r\n\tby ")[0] for row in rows]  # type: ignore[arg-type]
    assert heads == [f"Received: from {name} ([127.0.0.1])".encode() for name in names]


@pytest.mark.parametrize(
    "mail", ["MAIL FROM:<>", "MAIL FROM: <>", "MAIL FROM:<> BODY=8BITMIME", "mail from:<> SMTPUTF8"]
)
async def test_the_null_reverse_path_is_accepted_and_spooled_as_an_empty_sender(
    make_submission: Factory, mail: str
) -> None:
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        assert (await raw.command(mail)).startswith("250 2.1.0")
        assert (await raw.command("RCPT TO:<rcpt@example.com>")).startswith("250 2.1.5")
        assert (await raw.data(b"Subject: auto-reply\r\n\r\naway\r\n.\r\n")).startswith("250 2.0.0 Ok: queued as ")
        await raw.envelope()  # the session goes on, with a sender again
        assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0 Ok: queued as ")
        await raw.close()
        rows = await stored(srv.database)
        events = await query(srv.database, "SELECT data FROM events WHERE kind = 'received' ORDER BY id")
    assert [row["sender"] for row in rows] == ["", "app@example.org"]
    assert '"sender": ""' in events[0]["data"]


class Recorder:
    """A bare SMTP receiver on 127.0.0.2 that records each command line as it arrived,
    byte for byte (tests/sink.py is aiosmtpd, which refuses MAIL FROM:<>)."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.messages: list[bytes] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> Recorder:
        self._server = await asyncio.start_server(self._serve, "127.0.0.2", 0)
        return self

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        writer.write(b"220 recorder.test ESMTP\r\n")
        while line := await reader.readline():
            self.lines.append(line)
            verb = line[:4].upper()
            if verb == b"EHLO":
                writer.write(b"250-recorder.test\r\n250 8BITMIME\r\n")
            elif verb == b"DATA":
                writer.write(b"354 go ahead\r\n")
                self.messages.append(await reader.readuntil(b"\r\n.\r\n"))
                writer.write(b"250 2.0.0 Ok: queued\r\n")
            elif verb == b"QUIT":
                writer.write(b"221 2.0.0 Bye\r\n")
                break
            else:
                writer.write(b"250 2.0.0 Ok\r\n")
        writer.close()


async def test_a_null_sender_message_is_delivered_with_an_empty_mail_from(make_submission: Factory) -> None:
    recorder = await Recorder().start()
    try:
        async with make_submission(check_recipient_domains=False) as srv:
            raw = await RawClient.connect("127.0.0.1", srv.port)
            await raw.ehlo()
            assert (await raw.command("MAIL FROM:<>")).startswith("250 2.1.0")
            assert (await raw.command("RCPT TO:<bounce-to@sink.test>")).startswith("250 2.1.5")
            assert (await raw.data(b"Subject: delivery report\r\n\r\nnot delivered\r\n.\r\n")).startswith("250 2.0.0")
            await raw.close()
            router = routing.Router(ZoneResolver(DELIVERY_ZONE), PROVIDERS, port=recorder.port)
            pool = sessions.Pool(sessions.Settings(port=recorder.port, ehlo_hostname="mtad.test"))
            settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0))
            await delivery.Delivery(settings, srv.database, router, pool, RULES).run_until_idle()
            [row] = await query(srv.database, "SELECT state FROM deliveries")
    finally:
        await recorder.stop()
    assert row["state"] == "delivered"
    assert recorder.lines[1:3] == [b"MAIL FROM:<>\r\n", b"RCPT TO:<bounce-to@sink.test>\r\n"]
    [message] = recorder.messages
    assert message.startswith(b"Received: from client.example ([127.0.0.1])\r\n")
    assert b"\r\nSubject: delivery report\r\n" in message


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        ([b"MAIL FROM:<caf\xe9@one.test>"], "501 5.5.2"),  # Latin-1: not UTF-8
        ([b"MAIL FROM:<app@caf\xe9.test>"], "501 5.5.2"),
        ([b"MAIL FROM:<caf\xe9@one.test> SMTPUTF8"], "501 5.5.2"),
        ([b"MAIL FROM:<app@example.org>", b"RCPT TO:<caf\xe9@one.test>"], "501 5.5.2"),
        ([b"MAIL FROM:<app@example.org> SMTPUTF8", b"RCPT TO:<caf\xe9@one.test>"], "501 5.5.2"),
        ([b"MAIL FROM:<app@example.org>", b'RCPT TO:<"caf\xe9"@one.test>'], "501 5.5.2"),
        ([b"MAIL FROM:<app@example.org>", b"RCPT TO:<caf\xc3\xa9@one.test>"], "553 5.6.7"),  # UTF-8, no SMTPUTF8
        ([b"MAIL FROM:<caf\xc3\xa9@one.test>"], "553 5.6.7"),
        ([b"MAIL FROM:<app@example.org> SIZE=\xe9"], "501 5.5.4"),
        ([b"AUTH PLAIN \xe9\xe9\xe9\xe9"], "501 5.5.2"),
        ([b"AUTH LOGIN \xe9\xe9\xe9\xe9"], "501 5.5.2"),
        ([b"VRFY <caf\xe9"], "502 5.5.1"),
    ],
)
async def test_octets_that_are_not_utf8_get_a_permanent_refusal(
    make_submission: Factory, commands: list[bytes], expected: str
) -> None:
    async with make_submission() as srv:
        raw = await RawClient.connect("127.0.0.1", srv.port)
        await raw.ehlo()
        for command in commands[:-1]:
            assert (await raw.command(command.decode())).startswith("250")
        await raw.send(commands[-1] + b"\r\n")
        reply = await raw.reply()
        assert reply.startswith(expected + " "), reply
        # The session goes on.
        assert (await raw.command("RSET")).startswith("250")
        await raw.envelope()
        assert (await raw.data(MESSAGE + b".\r\n")).startswith("250 2.0.0")
        await raw.close()
        assert len(await stored(srv.database)) == 1


async def connect_refused(port: int, source: str = "127.0.0.1") -> bytes:
    """What a connection that should be refused gets: everything up to the close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def until_admitted(port: int, source: str = "127.0.0.1") -> RawClient:
    """A session, once the server has seen a closed one go (its count falls after the close)."""

    async def admitted() -> RawClient | None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        client = RawClient(reader, writer)
        if (await client.reply()).startswith("220 "):
            return client
        await client.close()
        return None

    client = await waiting.eventually_async(admitted, within=10, every=0.02)
    assert client is not None
    return client


async def test_connections_from_one_client_address_are_capped(make_submission: Factory) -> None:
    async with make_submission(max_connections_per_client=3, trusted_networks=ONLY_LOCALHOST) as srv:
        clients = [await RawClient.connect("127.0.0.1", srv.port, source=UNTRUSTED) for _ in range(3)]  # silent
        refused = b"421 4.7.0 Too many connections from your address\r\n"
        assert await connect_refused(srv.port, UNTRUSTED) == refused
        other = await RawClient.connect("127.0.0.1", srv.port, source="127.0.0.3")  # another address: its own count
        assert (await clients[0].ehlo()).startswith("250")  # those let in are served
        await clients.pop().close()
        clients.append(await until_admitted(srv.port, UNTRUSTED))
        assert await connect_refused(srv.port, UNTRUSTED) == refused
        # The apps on trusted networks are not capped per address.
        trusted = [await RawClient.connect("127.0.0.1", srv.port) for _ in range(5)]
        assert (await trusted[-1].ehlo()).startswith("250")
        for client in [*clients, other, *trusted]:
            await client.close()


async def test_connections_in_total_are_capped(make_submission: Factory) -> None:
    async with make_submission(max_connections=3) as srv:
        clients = [await RawClient.connect("127.0.0.1", srv.port, source=f"127.0.0.{i}") for i in (1, 2, 3)]
        assert await connect_refused(srv.port, "127.0.0.4") == b"421 4.7.0 Too many connections\r\n"
        await clients.pop().close()
        clients.append(await until_admitted(srv.port, "127.0.0.4"))
        for client in clients:
            await client.close()


async def test_each_submission_process_allows_its_share_of_the_caps(make_submission: Factory) -> None:
    async with make_submission(processes=2, max_connections_per_client=3, trusted_networks=ONLY_LOCALHOST) as srv:
        clients = [await RawClient.connect("127.0.0.1", srv.port, source=UNTRUSTED) for _ in range(2)]  # ceil(3 / 2)
        assert (await connect_refused(srv.port, UNTRUSTED)).startswith(b"421 4.7.0 ")
        for client in clients:
            await client.close()
