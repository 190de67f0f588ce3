import pytest

from mtad.base import envelope
from mtad.base.replies import Reply
from mtad.submission import assembly

ORIGIN = assembly.Origin(tenant="shop", client="192.0.2.7", helo="app.example", tls=True, authenticated=True)
NOW = 1_800_000_000.0
POOLS = frozenset({"transactional", "bulk"})
SHOP = assembly.TenantDefaults(priority=-20, pool="transactional")


def assemble(
    content: bytes,
    *recipients: str,
    pools: frozenset[str] = POOLS,
    account_pools: frozenset[str] = frozenset({"outreach"}),
    defaults: assembly.TenantDefaults = assembly.NO_DEFAULTS,
) -> assembly.commit.NewMessage | Reply:
    return assembly.spoolable(
        content,
        sender="app@example.org",
        recipients=[envelope.parse_mailbox(r) for r in recipients or ("a@example.com",)],
        smtputf8=False,
        origin=ORIGIN,
        hostname="mx.example.net",
        now=NOW,
        pools=pools,
        account_pools=account_pools,
        defaults=defaults,
    )


def spool(content: bytes, *recipients: str, **options: object) -> assembly.commit.NewMessage:
    message = assemble(content, *recipients, **options)  # type: ignore[arg-type]
    assert isinstance(message, assembly.commit.NewMessage), message
    return message


def refusal(content: bytes, **options: object) -> Reply:
    reply = assemble(content, **options)  # type: ignore[arg-type]
    assert isinstance(reply, Reply), reply
    return reply


def trace(message: assembly.commit.NewMessage) -> bytes:
    """The Received header mtad put on top of the message."""
    recipients = message.recipients
    return assembly.received(
        ORIGIN, recipients, smtputf8=False, hostname="mx.example.net", queue_id=message.id.hex, now=NOW
    )


def test_missing_message_id_and_date_are_added_once_at_the_end_of_the_headers() -> None:
    message = spool(b"Subject: hi\r\n\r\nbody\r\n")
    assert message.message_id == f"<{message.id.hex}@mx.example.net>"
    head, _, body = message.body.partition(b"\r\n\r\n")
    assert body == b"body\r\n"
    assert head.endswith(
        f"Subject: hi\r\nMessage-ID: {message.message_id}\r\nDate: Fri, 15 Jan 2027 08:00:00 +0000".encode()
    )
    assert message.idempotency_key is None  # mtad's own Message-ID recognises nothing


def test_received_names_the_client_the_protocol_and_the_single_recipient() -> None:
    message = spool(b"Message-ID: <m@x>\r\nDate: x\r\n\r\n")
    received = message.body.split(b"\r\nMessage-ID:")[0].decode()
    assert received == (
        "Received: from app.example ([192.0.2.7])\r\n"
        f"\tby mx.example.net (mtad) with ESMTPSA id {message.id.hex}\r\n"
        "\tfor <a@example.com>;\r\n"
        "\tFri, 15 Jan 2027 08:00:00 +0000"
    )
    two = spool(b"Message-ID: <m@x>\r\n\r\n", "a@example.com", "b@example.com")
    assert b"for <" not in two.body.split(b"Message-ID")[0]


def test_received_writes_nothing_unsafe_whatever_it_is_given() -> None:
    hostile = assembly.Origin(tenant="shop", client="192.0.2.7\r\n", helo="x\r.\rMAIL FROM:<s@evil.test>\x00\x1b[0m",
                              tls=False, authenticated=False)  # fmt: skip
    recipient = envelope.Address("\u2028caf\u00e9\x85\udce9", "example.com")
    trace = assembly.received(hostile, [recipient], smtputf8=True, hostname="mx.example.net", queue_id="q", now=NOW)
    assert (
        trace
        == (
            "Received: from x?.?MAIL FROM:<s@evil.test>??[0m ([192.0.2.7??])\r\n"
            "\tby mx.example.net (mtad) with UTF8SMTP id q\r\n"
            "\tfor <?caf\u00e9??@example.com>;\r\n"
            "\tFri, 15 Jan 2027 08:00:00 +0000\r\n"
        ).encode()
    )
    ascii_only = assembly.received(ORIGIN, [envelope.Address("caf\u00e9", "example.com")], smtputf8=False,
                                   hostname="mx.example.net", queue_id="q", now=NOW)  # fmt: skip
    assert b"\tfor <caf?@example.com>;\r\n" in ascii_only


def test_idempotency_keys() -> None:
    keyed = spool(b"Idempotency-Key: order-7\r\nMessage-ID: <m@x>\r\n\r\n")
    assert keyed.idempotency_key == "key:order-7"
    by_id = spool(b"Message-ID: <m@x>\r\n\r\n", "a@example.com", "b@example.com")
    same = spool(b"Message-ID: <m@x>\r\n\r\n", "b@example.com", "a@example.com")
    other = spool(b"Message-ID: <m@x>\r\n\r\n", "c@example.com")
    assert by_id.idempotency_key is not None
    assert by_id.idempotency_key.startswith("msgid:<m@x>:")
    assert by_id.idempotency_key == same.idempotency_key  # recipients in any order
    assert by_id.idempotency_key != other.idempotency_key  # another transaction


def test_the_instructions_to_mtad_are_removed_and_nothing_else_changes() -> None:
    content = (
        b"X-Mtad-Priority: 20\r\n"  # the first line
        b"From: app@example.org\r\n"
        b"Message-ID: <m@x>\r\n"
        b"x-mtad-pool :\r\n bulk\r\n"  # any case, folded, obsolete space before the colon
        b"Priority: urgent\r\n"  # standard: kept
        b"X-Mtad-Pool-Note: not an instruction\r\n"
        b"Subject: X-Mtad-Pool: in a value\r\n"
        b"Date: Fri, 15 Jan 2027 08:00:00 +0000\r\n"
        b"X-MTAD-PRIORITY:\t-5 \r\n"  # the last line: two priorities are refused, so...
        b"\r\n"
        b"X-Mtad-Priority: 7\r\n"  # the body is not the header
        b"body\r\n"
    )
    assert refusal(content).line() == "550 5.6.0 X-Mtad-Priority: given more than once; give it once"
    content = content.replace(b"X-MTAD-PRIORITY:\t-5 \r\n", b"X-MTAD-POOL-X: y\r\n")
    message = spool(content)
    expected = content.replace(b"X-Mtad-Priority: 20\r\n", b"").replace(b"x-mtad-pool :\r\n bulk\r\n", b"")
    assert message.body == trace(message) + expected
    assert (message.priority, message.pool) == (20, "bulk")


def test_a_header_block_of_instructions_only() -> None:
    message = spool(b"X-Mtad-Pool: bulk\r\nX-Mtad-Priority: 1\r\n\r\nbody\r\n")
    head, _, body = message.body.partition(b"\r\n\r\n")
    assert body == b"body\r\n"
    assert b"X-Mtad" not in head
    assert head.startswith(trace(message) + b"Message-ID: ")
    assert (message.priority, message.pool) == (1, "bulk")


def test_x_mtad_campaign_names_the_campaign_and_a_bad_name_is_refused() -> None:
    message = spool(b"X-Mtad-Campaign:  spring-2026 \r\nSubject: hi\r\n\r\nbody\r\n")
    assert message.campaign == "spring-2026"
    assert b"X-Mtad" not in message.body
    assert spool(b"Subject: hi\r\n\r\nbody\r\n").campaign is None
    for bad in (b"", b"-x", b"a b", b"a/b", b"x" * 65, "\u00e9t\u00e9".encode()):
        refused = refusal(b"X-Mtad-Campaign: " + bad + b"\r\n\r\nbody\r\n")
        assert (refused.code, refused.enhanced) == (550, "5.6.0")
        assert refused.text.startswith("X-Mtad-Campaign: ")
    twice = refusal(b"X-Mtad-Campaign: a\r\nX-Mtad-Campaign: b\r\n\r\nbody\r\n")
    assert twice.line() == "550 5.6.0 X-Mtad-Campaign: given more than once; give it once"


def test_a_campaign_named_carries_its_tenants_defaults_for_one_made_on_first_use() -> None:
    limited = assembly.TenantDefaults(campaign_max_per_hour=100, campaign_max_per_day=1000)
    named = spool(b"X-Mtad-Campaign: spring\r\nSubject: hi\r\n\r\nbody\r\n", defaults=limited)
    assert named.campaign_limits == (100, 1000)
    assert spool(b"Subject: hi\r\n\r\nbody\r\n", defaults=limited).campaign_limits == (None, None)


def test_a_message_without_instructions_is_stored_as_before() -> None:
    content = b"Message-ID: <m@x>\r\nDate: x\r\nSubject: hi\r\n\r\nX-Mtad-Pool: bulk\r\n"
    message = spool(content)
    assert message.body == trace(message) + content
    assert (message.priority, message.pool) == (0, None)


@pytest.mark.parametrize(
    ("header", "defaults", "priority"),
    [
        (b"X-Mtad-Priority: 20\r\nPriority: urgent\r\n", SHOP, 20),  # X-Mtad-Priority first
        (b"X-Mtad-Priority: -100\r\n", SHOP, -100),
        (b"X-Mtad-Priority: +100\r\n", SHOP, 100),
        (b"X-Mtad-Priority: 007\r\n", SHOP, 7),
        (b"X-Mtad-Priority: 0100\r\n", SHOP, 100),
        (b"X-Mtad-Priority: 0\r\nPriority: urgent\r\n", SHOP, 0),
        (b"Priority: urgent\r\n", SHOP, 50),  # then the standard Priority
        (b"Priority: Non-Urgent\r\n", SHOP, -50),
        (b"Priority: normal\r\n", SHOP, 0),
        (b"Priority: high\r\n", SHOP, -20),  # not an RFC 2156 value: ignored
        (b"Priority: 1\r\n", assembly.NO_DEFAULTS, 0),
        (b"", SHOP, -20),  # then the tenant's default
        (b"", assembly.NO_DEFAULTS, 0),  # then 0
    ],
)
def test_priority_from_each_source_in_order(header: bytes, defaults: assembly.TenantDefaults, priority: int) -> None:
    message = spool(header + b"Subject: x\r\n\r\nbody\r\n", defaults=defaults)
    assert message.priority == priority
    assert b"X-Mtad-Priority" not in message.body
    assert (b"Priority: " in message.body) == (b"Priority: " in header.replace(b"X-Mtad-Priority: ", b""))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (b"high", "'high'"),
        (b"101", "'101'"),
        (b"-101", "'-101'"),
        (b"1.5", "'1.5'"),
        (b"1_0", "'1_0'"),
        (b"1 0", "'1 0'"),
        (b"", "''"),
        ("\u0663".encode(), "'\\u0663'"),  # a digit, but not an ASCII one
        (b"9" * 100, "'" + "9" * 64 + "...'"),
    ],
)
def test_a_bad_x_mtad_priority_is_refused(value: bytes, shown: str) -> None:
    reply = refusal(b"Subject: x\r\nX-Mtad-Priority: " + value + b"\r\n\r\nbody\r\n", defaults=SHOP)
    assert reply.line() == f"550 5.6.0 X-Mtad-Priority: expected a whole number from -100 to 100, got {shown}"


def test_the_pool_from_the_header_else_the_tenant() -> None:
    assert spool(b"X-Mtad-Pool: bulk\r\n\r\n", defaults=SHOP).pool == "bulk"
    assert spool(b"X-Mtad-Pool:  bulk \r\n\r\n").pool == "bulk"
    assert spool(b"Subject: x\r\n\r\n", defaults=SHOP).pool == "transactional"
    assert spool(b"Subject: x\r\n\r\n").pool is None


def test_an_unknown_pool_is_refused() -> None:
    reply = refusal(b"X-Mtad-Pool: Bulk\r\n\r\n", defaults=SHOP)  # names are case-sensitive
    assert reply.line() == "550 5.7.0 X-Mtad-Pool: no source IP pool named 'Bulk' (configured: bulk, transactional)"
    reply = refusal(b"X-Mtad-Pool: bulk\r\n\r\n", pools=frozenset())
    assert reply.line() == "550 5.7.0 X-Mtad-Pool: no source IP pool named 'bulk' (configured: none)"
    assert refusal(b"X-Mtad-Pool:\r\n\r\n").enhanced == "5.7.0"


def test_an_instruction_given_twice_is_refused() -> None:
    reply = refusal(b"X-Mtad-Pool: bulk\r\nSubject: x\r\nX-Mtad-Pool: bulk\r\n\r\n")
    assert reply.line() == "550 5.6.0 X-Mtad-Pool: given more than once; give it once"


def test_the_account_pool_from_the_header_else_the_tenant_and_the_field_is_removed() -> None:
    tenant = assembly.TenantDefaults(account_pool="warm")
    given = spool(b"Subject: s\r\nX-Mtad-Account-Pool: outreach\r\n\r\nbody\r\n", defaults=tenant)
    assert given.account_pool == "outreach"
    assert b"X-Mtad-Account-Pool" not in given.body
    assert spool(b"Subject: s\r\n\r\nbody\r\n", defaults=tenant).account_pool == "warm"
    assert spool(b"Subject: s\r\n\r\nbody\r\n").account_pool is None


def test_an_unknown_account_pool_is_refused() -> None:
    reply = refusal(b"X-Mtad-Account-Pool: cold\r\n\r\n")
    assert (reply.code, reply.enhanced) == (550, "5.7.0")
    assert "no account pool named 'cold' (configured: outreach)" in reply.text
    twice = refusal(b"X-Mtad-Account-Pool: outreach\r\nX-Mtad-Account-Pool: outreach\r\n\r\n")
    assert (twice.code, twice.enhanced) == (550, "5.6.0")
