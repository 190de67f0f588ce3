"""A request of POST /v1/messages made into what the accept takes (mtad.admin.inject)."""

from __future__ import annotations

import email
import email.policy
from email.policy import SMTP

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtad.admin import filters, inject

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


def test_the_campaign_becomes_the_messages_x_mtad_campaign_in_place_of_its_own() -> None:
    named = inject.parse({**ENVELOPE, "content": "X-Mtad-Campaign: old\r\nSubject: x\r\n\r\nbody\r\n",
                          "campaign": "spring"})  # fmt: skip
    assert named.content == b"X-Mtad-Campaign: spring\r\nSubject: x\r\n\r\nbody\r\n"
    structured = inject.parse({"from": "app@example.org", "to": ["a@example.com"], "text": "hi", "campaign": "s"})
    assert structured.content.startswith(b"X-Mtad-Campaign: s\r\n")
    for bad in ("", "a b", 7, "x" * 65):
        with pytest.raises(filters.BadParameter, match="not a campaign name") as refused:
            inject.parse({**ENVELOPE, "content": "Subject: x\r\n\r\nbody\r\n", "campaign": bad})
        assert refused.value.field == "campaign"


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
        ({"envelope_sender": "a@example.org", "recipients": ["not an address"], "content": "x"},
         r"recipients\[0\]: 'not an address'"),
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


STRUCTURED = {"from": "Shop <app@example.org>", "to": ["a@example.com"], "subject": "Hi", "text": "y"}
AMBIGUOUS = "evil@elsewhere.test <probe@rcpt.test>"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**ENVELOPE, "recipients": [AMBIGUOUS], "content": "x"}, "recipients[0]"),
        ({**STRUCTURED, "to": ["ok@example.com", AMBIGUOUS]}, "to[1]"),
        ({**STRUCTURED, "cc": [AMBIGUOUS]}, "cc[0]"),
        ({**STRUCTURED, "bcc": AMBIGUOUS}, "bcc"),
        ({**STRUCTURED, "from": AMBIGUOUS}, "from"),
        ({**STRUCTURED, "reply_to": AMBIGUOUS}, "reply_to"),
        ({**STRUCTURED, "to": ["evil@elsewhere.test, probe@rcpt.test"]}, "to[0]"),  # two in one
        ({**STRUCTURED, "to": ["Ann <a@example.com> <b@example.com>"]}, "to[0]"),
        ({**STRUCTURED, "to": ["Ann <a@example.com>, Bob <b@example.com>"]}, "to[0]"),
        ({**STRUCTURED, "to": ["<@relay.test:a@example.com>"]}, "to[0]"),  # a source route in a header
        ({**STRUCTURED, "to": ['"unclosed <a@example.com>']}, "to[0]"),
        ({**STRUCTURED, "to": ["Ann (x) <a@example.com>"]}, "to[0]"),
        ({**STRUCTURED, "to": ["Ann\r\nBcc: c@example.com <a@example.com>"]}, "to[0]"),
        ({**STRUCTURED, "to": ["a@localhost"]}, "to[0]"),
        ({**STRUCTURED, "from": "Shop <>"}, "from"),
    ],
)  # fmt: skip
def test_an_ambiguous_or_malformed_address_is_refused_naming_its_field(body: object, field: str) -> None:
    with pytest.raises(inject.Invalid) as info:
        inject.parse(body)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    "sender",
    ["app@example.org>\r\nRCPT TO:<victim@example.com", "app@example.org\n", "<app@example.org> SIZE=10",
     "<app@example.org", "app@localhost", "Shop <app@example.org>", "<@x.test:>", "a b@example.org"],
)  # fmt: skip
def test_the_envelope_sender_is_checked_as_mail_from_is(sender: str) -> None:
    for body in ({**ENVELOPE, "envelope_sender": sender, "content": "x"}, {**STRUCTURED, "envelope_sender": sender}):
        with pytest.raises(inject.Invalid) as info:
            inject.parse(body)
        assert info.value.field == "envelope_sender"


def test_the_envelope_sender_may_be_null_or_in_brackets() -> None:
    cases = [("", ""), ("<>", ""), ("<App@Example.ORG>", "App@example.org"), ("b@example.org", "b@example.org")]
    for sent, sender in cases:
        assert inject.parse({**ENVELOPE, "envelope_sender": sent, "content": "x"}).sender == sender
        assert inject.parse({**STRUCTURED, "envelope_sender": sent}).sender == sender


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**STRUCTURED, "subject": "Hi\r\nBcc: victim@example.com"}, "subject"),
        ({**STRUCTURED, "subject": "Hi\nthere"}, "subject"),
        ({**STRUCTURED, "subject": "Hi\rthere"}, "subject"),
        ({**STRUCTURED, "subject": "nul\x00"}, "subject"),
        ({**STRUCTURED, "from": "Shop\r\n <app@example.org>"}, "from"),
        ({**STRUCTURED, "reply_to": "help@example.org\r\nBcc: x@example.com"}, "reply_to"),
        ({**STRUCTURED, "attachments": [{"filename": "a\r\n.txt", "content": "aGk="}]}, "attachments[0].filename"),
        ({**STRUCTURED, "attachments": [{"filename": "a.txt", "content_type": "text/plain\r\nX-Evil: 1",
                                         "content": "aGk="}]}, "attachments[0].content_type"),
        ({**STRUCTURED, "headers": {"X-Campaign": "7\r\nBcc: x@example.com"}}, "headers"),
    ],
)  # fmt: skip
def test_a_line_break_in_a_header_value_is_refused_naming_its_field(body: object, field: str) -> None:
    with pytest.raises(inject.Invalid) as info:
        inject.parse(body)
    assert info.value.field == field


def test_names_are_kept_and_written_by_the_parser_not_guessed() -> None:
    made = inject.parse({**STRUCTURED, "from": '"Shop, Inc." <app@example.org>', "reply_to": "Help <help@Example.org>",
                         "to": ["Ann O. Nymous <a@example.com>", "<b@example.com>", '"c d"@example.com'],
                         "cc": ["José <jose@example.com>"], "subject": "Grüße"})  # fmt: skip
    assert made.recipients == ("a@example.com", "b@example.com", '"c d"@example.com', "jose@example.com")
    assert (made.sender, made.smtputf8) == ("app@example.org", False)  # a name needs no SMTPUTF8: it is encoded
    message = email.message_from_bytes(made.content, policy=email.policy.default)
    assert message["From"].addresses[0].display_name == "Shop, Inc."
    assert message["From"].addresses[0].addr_spec == "app@example.org"
    assert message["Reply-To"].addresses[0].addr_spec == "help@example.org"
    assert [a.addr_spec for a in message["To"].addresses] == ["a@example.com", "b@example.com", '"c d"@example.com']
    assert message["Cc"].addresses[0].display_name == "José"
    assert message["Subject"] == "Grüße"
    assert made.content.isascii()
    utf8 = inject.parse({**STRUCTURED, "to": ["Jö <jö@example.com>"]})
    assert (utf8.recipients, utf8.smtputf8) == (("jö@example.com",), True)
    assert b"To: J\xc3\xb6 <j\xc3\xb6@example.com>\r\n" in utf8.content
