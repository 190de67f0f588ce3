"""List-Unsubscribe: tokens name their subscriber and nothing tampered names anyone;
the header fields go at the top of a message that has none of its own."""

from __future__ import annotations

import email
import email.policy
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtad.feedback import unsubscribe
from mtad.feedback.unsubscribe import Subscriber, Tokens

TOKENS = Tokens(b"k" * 32)
MESSAGE = uuid.UUID("0193a5b2-7c1e-7d3f-9a4b-5c6d7e8f9012")

tenants = st.text(min_size=1, max_size=40)
addresses = st.emails().filter(lambda a: len(a) <= 254)
messages = st.none() | st.uuids()


@given(tenants, addresses, messages)
def test_a_url_token_names_its_subscriber(tenant: str, address: str, message: uuid.UUID | None) -> None:
    token = TOKENS.make(tenant, address, message)
    assert TOKENS.read(token) == Subscriber(tenant, address.lower(), message)
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in token)  # base64url, no padding


@given(tenants, addresses, messages)
def test_a_mailto_token_names_its_subscriber_whatever_the_case(
    tenant: str, address: str, message: uuid.UUID | None
) -> None:
    token = TOKENS.make_mailto_token(tenant, address, message)
    expected = Subscriber(tenant, address.lower(), message)
    assert token == token.lower()
    assert TOKENS.read_mailto_token(token) == expected
    assert TOKENS.read_mailto_token(token.upper()) == expected  # mail systems may change a local part's case
    assert TOKENS.read_mailto(f"<{TOKENS.mailto('Example.org', tenant, address, message).upper()}>") == expected


def test_a_token_is_short() -> None:
    token = TOKENS.make("acme", "first.last@example.com", MESSAGE)
    assert len(token) <= 80
    assert len(TOKENS.make_mailto_token("acme", "first.last@example.com", MESSAGE)) <= 96
    assert len(TOKENS.make("acme", "first.last@example.com", None)) <= 60


@st.composite
def mutations(draw: st.DrawFn, token: str) -> str:
    """The token with one character replaced, inserted or deleted, or cut short."""
    at = draw(st.integers(0, len(token)))
    char = draw(st.characters(codec="utf-8") | st.sampled_from("AZaz09-_=+/.~ "))
    how = draw(st.sampled_from(["replace", "insert", "delete", "cut"]))
    if how == "replace":
        return token[:at] + char + token[at + 1 :]
    if how == "insert":
        return token[:at] + char + token[at:]
    if how == "delete":
        return token[:at] + token[at + 1 :]
    return token[:at]


URL_TOKEN = TOKENS.make("acme", "reader@example.com", MESSAGE)
MAILTO_TOKEN = TOKENS.make_mailto_token("acme", "reader@example.com", MESSAGE)


@given(mutations(URL_TOKEN))
def test_a_mutated_url_token_names_nobody(mutated: str) -> None:
    read = TOKENS.read(mutated)
    # Each encoding is canonical and signed: any change at all reads as None.
    assert read is None if mutated != URL_TOKEN else read == Subscriber("acme", "reader@example.com", MESSAGE)


@given(mutations(MAILTO_TOKEN))
def test_a_mutated_mailto_token_names_nobody(mutated: str) -> None:
    read = TOKENS.read_mailto_token(mutated)
    same = mutated.isascii() and mutated.lower() == MAILTO_TOKEN  # only a change of case reads
    assert read is None if not same else read == Subscriber("acme", "reader@example.com", MESSAGE)


@given(st.text(max_size=300))
def test_reading_arbitrary_text_never_raises(text: str) -> None:
    assert TOKENS.read(text) is None
    assert TOKENS.read_mailto_token(text) is None
    assert TOKENS.read_mailto(text) is None


@given(st.binary(max_size=120))
def test_reading_a_well_formed_token_of_unsigned_bytes_finds_nobody(raw: bytes) -> None:
    assert TOKENS.read(unsubscribe._b64(raw)) is None
    assert TOKENS.read_mailto_token(unsubscribe._b32(raw)) is None


def test_a_token_of_another_key_or_form_names_nobody() -> None:
    other = Tokens(b"x" * 32)
    assert other.read(URL_TOKEN) is None
    assert TOKENS.read(MAILTO_TOKEN) is None  # the two encodings are not interchangeable
    assert TOKENS.read_mailto_token(URL_TOKEN.lower()) is None
    assert TOKENS.read(URL_TOKEN + "A") is None
    assert TOKENS.read(URL_TOKEN[:-1]) is None
    assert TOKENS.read("") is None
    assert TOKENS.read_mailto("unsubscribe@example.org") is None
    assert TOKENS.read_mailto(f"other+{MAILTO_TOKEN}@example.org") is None
    assert TOKENS.read_mailto(f"unsubscribe+{MAILTO_TOKEN}") is None


def test_what_cannot_be_a_token_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Tokens(b"short")
    with pytest.raises(ValueError, match="tenant"):
        TOKENS.make("", "a@example.com", None)
    with pytest.raises(ValueError, match="tenant"):
        TOKENS.make("t" * 256, "a@example.com", None)
    with pytest.raises(ValueError, match="not an email address"):
        TOKENS.make("acme", "nobody", None)
    with pytest.raises(ValueError, match="254"):
        TOKENS.make("acme", "a" * 250 + "@example.com", None)


# The header fields.

URL = "https://unsub.example.org/unsubscribe/" + URL_TOKEN
MAILTO = f"unsubscribe+{MAILTO_TOKEN}@example.org"
BODY = b"\r\nHello\r\nList-Unsubscribe: <https://not.a.header.example>\r\n"
HEADERS = b"From: a@example.com\r\nTo: reader@example.com\r\nSubject: news\r\n"


def test_the_fields_go_at_the_top_and_fold_between_the_links() -> None:
    out = unsubscribe.add_fields(HEADERS + BODY, URL, MAILTO)
    added = (
        f"List-Unsubscribe: <{URL}>,\r\n\t<mailto:{MAILTO}>\r\n".encode()
        + b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"
    )
    assert out == added + HEADERS + BODY
    parsed = email.message_from_bytes(out, policy=email.policy.default)
    assert "".join(str(parsed["List-Unsubscribe"]).split()) == f"<{URL}>,<mailto:{MAILTO}>"
    assert parsed["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert parsed["Subject"] == "news"
    assert all(len(line) <= unsubscribe.MAX_LINE for line in out.split(b"\r\n"))


def test_short_fields_stay_on_one_line() -> None:
    out = unsubscribe.add_fields(HEADERS + BODY, "https://u.example/x", "mailto:u@example.org")
    assert out.startswith(b"List-Unsubscribe: <https://u.example/x>, <mailto:u@example.org>\r\nList-Unsubscribe-Post")
    assert unsubscribe.add_fields(HEADERS + BODY, "https://u.example/x").startswith(
        b"List-Unsubscribe: <https://u.example/x>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\nFrom:"
    )


@pytest.mark.parametrize(
    "own",
    [
        b"List-Unsubscribe: <mailto:leave@example.com>\r\n",
        b"list-unsubscribe:<https://theirs.example/u>\r\n",
        b"LIST-UNSUBSCRIBE : <https://theirs.example/u>,\r\n <mailto:leave@example.com>\r\n",  # folded, obsolete space
    ],
)
def test_a_message_keeps_its_own_field(own: bytes) -> None:
    message = HEADERS + own + b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n" + BODY
    assert unsubscribe.add_fields(message, URL, MAILTO) == message
    assert unsubscribe.add_fields(own + HEADERS + BODY, URL, MAILTO) == own + HEADERS + BODY  # the first field


def test_only_the_header_block_and_whole_field_names_count() -> None:
    lookalikes = b"X-List-Unsubscribe: <https://x.example>\r\nSubject: hi\r\n List-Unsubscribe: folded\r\n"
    message = HEADERS + lookalikes + BODY  # and a List-Unsubscribe line in the body
    out = unsubscribe.add_fields(message, URL)
    assert out.endswith(message)
    assert out.startswith(b"List-Unsubscribe: <https://")


def test_a_stray_post_field_is_replaced() -> None:
    message = HEADERS + b"List-Unsubscribe-Post: something\r\n\telse\r\n" + BODY
    out = unsubscribe.add_fields(message, URL)
    assert out.count(b"List-Unsubscribe-Post:") == 1
    assert out.endswith(HEADERS + BODY)


def test_the_header_block_boundary() -> None:
    no_headers = b"\r\nbody only\r\n"
    out = unsubscribe.add_fields(no_headers, URL)
    assert out == unsubscribe.fields(URL) + no_headers
    headers_only = b"Subject: no body"  # no CRLF at the end at all
    assert unsubscribe.add_fields(headers_only, URL) == unsubscribe.fields(URL) + headers_only
    assert unsubscribe.add_fields(b"", URL) == unsubscribe.fields(URL)


def test_a_message_mtad_would_not_spool_is_left_alone() -> None:
    lf_only = HEADERS.replace(b"\r\n", b"\n") + BODY.replace(b"\r\n", b"\n")
    assert unsubscribe.add_fields(lf_only, URL) == lf_only
    mixed = b"From: a@example.com\nSubject: x\r\n\r\nbody\r\n"
    assert unsubscribe.add_fields(mixed, URL) == mixed
    starts_folded = b" continued\r\n" + HEADERS + BODY
    assert unsubscribe.add_fields(starts_folded, URL) == starts_folded


@pytest.mark.parametrize(
    ("url", "mailto", "why"),
    [
        ("http://u.example/x", None, "https"),
        ("https://", None, "https"),
        ("https://u.example/a b", None, "character"),
        ("https://u.example/<x>", None, "character"),
        ("https://u.example/ü", None, "character"),
        ("https://u.example/x\r\nBcc: x@example.com", None, "character"),
        ("https://u.example/x", "mailto:a b@example.org", "character"),
        ("https://u.example/" + "x" * 990, None, "998"),
    ],
)
def test_a_link_that_cannot_stand_in_the_field_is_refused(url: str, mailto: str | None, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        unsubscribe.add_fields(HEADERS + BODY, url, mailto)
