"""A request of POST /v1/messages made into what the accept takes (mtad.admin.inject)."""

from __future__ import annotations

import email
from email.policy import SMTP

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtad.admin import inject

ENVELOPE = {"envelope_sender": "app@example.org", "recipients": ["a@example.com"]}
LINE = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=120)
ENDING = st.sampled_from(["\r\n", "\n", "\r"])


@given(st.lists(st.tuples(LINE, ENDING), min_size=1, max_size=30), st.booleans())
def test_raw_content_keeps_its_lines_each_ended_by_crlf(lines: list[tuple[str, str]], last_ended: bool) -> None:
    content = "".join(text + ending for text, ending in lines)
    if not last_ended:
        content = content[: -len(lines[-1][1])]
    if not content.strip():
        return
    made = inject.parse({**ENVELOPE, "content": content}).content
    assert made.count(b"\n") == made.count(b"\r") == made.count(b"\r\n")  # no bare CR or LF is left
    lf = content.replace("\r\n", "\n").replace("\r", "\n")  # a CR then an LF is one line break
    assert made == (lf if lf.endswith("\n") else lf + "\n").replace("\n", "\r\n").encode()


def test_a_line_of_998_octets_goes_and_a_longer_one_is_refused() -> None:
    assert inject.parse({**ENVELOPE, "content": "Subject: x\n\n" + "y" * 998 + "\n"}).content.endswith(b"y\r\n")
    with pytest.raises(inject.Invalid, match="longer than 998 octets"):
        inject.parse({**ENVELOPE, "content": "Subject: x\n\n" + "y" * 1000})


def test_the_idempotency_key_header_is_added_only_when_the_message_has_none() -> None:
    keyed = inject.parse({**ENVELOPE, "content": "Subject: x\r\n\r\nbody\r\n"}, "order-7")
    assert keyed.content.startswith(b"Idempotency-Key: order-7\r\nSubject: x\r\n")
    own = inject.parse({**ENVELOPE, "content": "Idempotency-Key: mine\r\n\r\nbody\r\n"}, "order-7")
    assert own.content == b"Idempotency-Key: mine\r\n\r\nbody\r\n"
    with pytest.raises(inject.Invalid, match="Idempotency-Key"):
        inject.parse({**ENVELOPE, "content": "Subject: x\r\n\r\nbody\r\n"}, "bad\x01key")


def test_a_structured_message_becomes_mime_with_every_recipient() -> None:
    made = inject.parse({"from": "Shop <app@example.org>", "to": ["Ann <a@example.com>"], "bcc": "b@example.com",
                         "subject": "Hello", "text": "plain", "html": "<p>rich</p>", "headers": {"X-Campaign": "7"},
                         "attachments": [{"filename": "a.txt", "content_type": "text/plain",
                                          "content": "aGk="}]})  # fmt: skip
    assert (made.sender, made.recipients, made.smtputf8) == ("app@example.org", ("a@example.com", "b@example.com"),
                                                             False)  # fmt: skip
    message = email.message_from_bytes(made.content, policy=SMTP)
    assert (message["Subject"], message["X-Campaign"], message["Bcc"]) == ("Hello", "7", None)
    assert message.get_content_type() == "multipart/mixed"
    assert [part.get_content_type() for part in message.walk()][1:] == [
        "multipart/alternative", "text/plain", "text/html", "text/plain"]  # fmt: skip
    assert made.content.count(b"\n") == made.content.count(b"\r\n") > 0


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ([], "JSON object"),
        ({"subject": "x"}, 'give either "content"'),
        ({**ENVELOPE, "content": "x", "cc": []}, "unknown fields: cc"),
        ({**ENVELOPE, "content": " \r\n"}, "content: empty"),
        ({"envelope_sender": "a@example.org", "recipients": [], "content": "x"}, "recipients: at least one"),
        ({"envelope_sender": "a@example.org", "recipients": ["not an address"], "content": "x"}, "recipients:"),
        ({"from": "app@example.org", "subject": "x", "text": "y"}, "at least one recipient"),
        ({"from": "app@example.org", "to": ["a@example.com"], "subject": "x"}, 'give "text", "html" or both'),
        ({"from": "app@example.org", "to": ["a@example.com"], "text": "y", "headers": {"From": "x"}}, "headers:"),
        ({"from": "app@example.org", "to": ["a@example.com"], "text": "y",
          "attachments": [{"filename": "a", "content": "***"}]}, r"attachments\[0\].content: not base64"),
    ],
)  # fmt: skip
def test_a_bad_request_says_what_is_wrong(body: object, why: str) -> None:
    with pytest.raises(inject.Invalid, match=why):
        inject.parse(body)
