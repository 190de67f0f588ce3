from mtad import envelope
from mtad.submission import assembly

ORIGIN = assembly.Origin(tenant="shop", client="192.0.2.7", helo="app.example", tls=True, authenticated=True)
NOW = 1_800_000_000.0


def spool(content: bytes, *recipients: str) -> assembly.spool.NewMessage:
    return assembly.spoolable(
        content,
        sender="app@example.org",
        recipients=[envelope.parse_mailbox(r) for r in recipients or ("a@example.com",)],
        smtputf8=False,
        origin=ORIGIN,
        hostname="mx.example.net",
        now=NOW,
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
