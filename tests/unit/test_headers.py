import pytest

from mtad.base import headers


@pytest.mark.parametrize(
    ("data", "bare"),
    [
        (b"a: b\r\n\r\nbody\r\n", False),
        (b"a: b\r\n\r\nbo\ndy\r\n", True),
        (b"a: b\r\n\r\nbo\rdy\r\n", True),
        (b"body\r\n\n.\r\n", True),  # a smuggled end of data
        (b"body\r\n.\n", True),
        (b"\n", True),
        (b"a\rb\nc", True),  # a bare CR and a bare LF, in CR-then-LF order
        (b"a\r\n\x0b\x0c\x1c\x85\r\n", False),  # what str.splitlines would also break at
        (b"a\r\n", False),
        (b"a", False),
        (b"", False),
    ],
)
def test_bare_line_endings(data: bytes, bare: bool) -> None:
    assert headers.has_bare_line_ending(data) is bare


def test_header_end() -> None:
    assert headers.header_end(b"A: 1\r\nB: 2\r\n\r\nbody\r\n") == len(b"A: 1\r\nB: 2\r\n")
    assert headers.header_end(b"\r\nbody only\r\n") == 0
    assert headers.header_end(b"A: 1\r\n") == len(b"A: 1\r\n")


def test_find_unfolds_and_takes_the_first() -> None:
    block = (
        b"Subject: hello\r\n"
        b"Message-ID:\r\n <folded@example.com>\r\n"
        b"X-Other: 1\r\n"
        b"message-id: <second@example.com>\r\n"
        b"Idempotency-Key:  order-42 \r\n"
    )
    found = headers.find(block, [b"Message-ID", b"idempotency-key", b"date"])
    assert found == {b"message-id": b"<folded@example.com>", b"idempotency-key": b"order-42"}


def test_field_and_fold() -> None:
    assert headers.field("Date", "x") == b"Date: x\r\n"
    assert headers.fold("Received", ["a", "b"]) == b"Received: a\r\n\tb\r\n"


def test_find_skips_longer_names_and_takes_obsolete_space_before_colon() -> None:
    block = b"X-Date: no\r\nDate-Sent: no\r\nDATE : yes\r\n\tfolded\r\nIdempotency-Key:k\r\n"
    found = headers.find(block, [b"date", b"idempotency-key"])
    assert found == {b"date": b"yes\tfolded", b"idempotency-key": b"k"}
    assert headers.find(b"Subject: x\r\n", [b"date"]) == {}
    assert headers.find(b"Date:", [b"date"]) == {b"date": b""}


def test_remove_takes_out_whole_fields_and_returns_their_values() -> None:
    block = b"X-A: 1\r\nSubject: x-a: no\r\nx-a :\r\n\ttwo\r\n  folded\r\nX-A-B: kept\r\nTo: t\r\nX-a: 3"
    rest, values = headers.remove(block, (b"x-a", b"x-c"))
    assert rest == b"Subject: x-a: no\r\nX-A-B: kept\r\nTo: t\r\n"
    assert values == {b"x-a": [b"1", b"two  folded", b"3"]}


def test_remove_returns_the_block_itself_when_nothing_matches() -> None:
    block = b"Subject: hi\r\nX-Other: 1\r\n"
    rest, values = headers.remove(block, (b"x-a",))
    assert rest is block
    assert values == {}


@pytest.mark.parametrize(
    ("message", "rewritten"),
    [
        (b"Subject: s\r\nFrom: Shop <news@shop.example>\r\n\r\nFrom: body\r\n",
         b"Subject: s\r\nFrom: Shop <a@box.example>\r\n\r\nFrom: body\r\n"),
        (b'From: "Shop, Inc." <news@shop.example>\r\nTo: x@y\r\n\r\nb',
         b'From: "Shop, Inc." <a@box.example>\r\nTo: x@y\r\n\r\nb'),
        (b"From: =?utf-8?q?Caf=C3=A9?=\r\n <news@shop.example>\r\nTo: x@y\r\n\r\nb",
         b"From: =?utf-8?q?Caf=C3=A9?= <a@box.example>\r\nTo: x@y\r\n\r\nb"),
        (b"from:news@shop.example\r\n\r\nb", b"From: <a@box.example>\r\n\r\nb"),
        (b"Subject: none\r\n\r\nb", b"Subject: none\r\nFrom: <a@box.example>\r\n\r\nb"),
    ],
)  # fmt: skip
def test_rewrite_from_replaces_the_address_and_keeps_the_display_name(message: bytes, rewritten: bytes) -> None:
    assert headers.rewrite_from(message, "a@box.example") == rewritten
