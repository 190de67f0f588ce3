"""Inbound reports: DSNs as Postfix and Exchange write them, a delay warning, a qmail
bounce, an ARF complaint, automatic replies, junk; and parse never raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mtad.feedback import reports
from mtad.feedback.reports import AutoReply, Bounce, Complaint, Complaints, Failed, Reply, Unknown


def dsn(recipient: str, original_message_id: str, *, action: str = "failed", status: str = "5.1.1",
        diagnostic: str = "smtp; 550 5.1.1 <{r}>: Recipient address rejected: User unknown in virtual\n"
                          "    mailbox table",
        to: str = "b-1f-abcdefghijklmnop@bounces.example.org") -> bytes:  # fmt: skip
    """A DSN as Postfix writes it: text/plain, message/delivery-status, text/rfc822-headers."""
    text = f"""\
Return-Path: <>
From: MAILER-DAEMON@mx.example.net (Mail Delivery System)
Subject: Undelivered Mail Returned to Sender
To: {to}
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status;
\tboundary="4A1B2C3D.1764590400/mx.example.net"
Message-Id: <20261201120000.4A1B2C3D@mx.example.net>

This is a MIME-encapsulated message.

--4A1B2C3D.1764590400/mx.example.net
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.example.net.

I'm sorry to have to inform you that your message could not
be delivered to one or more recipients. It's attached below.

<{recipient}>: host mx.example.com[192.0.2.25] said: 550 5.1.1
    <{recipient}>: Recipient address rejected: User unknown (in reply to RCPT TO
    command)

--4A1B2C3D.1764590400/mx.example.net
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.net
X-Postfix-Queue-ID: 4A1B2C3D
X-Postfix-Sender: rfc822; {to}
Arrival-Date: Tue,  1 Dec 2026 12:00:00 +0000 (UTC)

Final-Recipient: rfc822; {recipient}
Original-Recipient: rfc822;{recipient}
Action: {action}
Status: {status}
Remote-MTA: dns; mx.example.com
Diagnostic-Code: {diagnostic.format(r=recipient)}

--4A1B2C3D.1764590400/mx.example.net
Content-Description: Undelivered Message Headers
Content-Type: text/rfc822-headers

Return-Path: <{to}>
From: app@example.org
To: {recipient}
Subject: hello
Message-ID: {original_message_id}
Date: Tue, 1 Dec 2026 11:59:59 +0000

--4A1B2C3D.1764590400/mx.example.net--
"""
    return text.encode()


EXCHANGE = b"""\
From: postmaster@contoso.com
To: b-2a-abcdefghijklmnop@bounces.example.org
Subject: Undeliverable: hello
Date: Tue, 1 Dec 2026 12:00:01 +0000
Message-ID: <a1b2c3d4-exchange@DM6PR01MB1234.namprd01.prod.outlook.com>
Content-Language: en-US
Content-Type: multipart/report; report-type=delivery-status; boundary="_000_EXCH_"
MIME-Version: 1.0
Auto-Submitted: auto-replied

--_000_EXCH_
Content-Type: multipart/alternative; boundary="_001_EXCH_"

--_001_EXCH_
Content-Type: text/plain; charset="us-ascii"

Your message to nobody@contoso.com couldn't be delivered.
nobody wasn't found at contoso.com.

--_001_EXCH_
Content-Type: text/html; charset="us-ascii"

<html><body><p>Your message to nobody@contoso.com couldn't be delivered.</p></body></html>

--_001_EXCH_--

--_000_EXCH_
Content-Type: message/delivery-status

Reporting-MTA: dns;DM6PR01MB1234.namprd01.prod.outlook.com
Received-From-MTA: dns;mail.example.org
Arrival-Date: Tue, 1 Dec 2026 12:00:00 +0000

Final-Recipient: rfc822;nobody@contoso.com
Action: failed
Status: 5.1.10
Diagnostic-Code: smtp;550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient nobody@contoso.com not found by SMTP
 address lookup
Remote-MTA: dns;DM6PR01MB1234.namprd01.prod.outlook.com
X-Display-Name: Nobody

--_000_EXCH_
Content-Type: message/rfc822

Return-Path: <b-2a-abcdefghijklmnop@bounces.example.org>
From: app@example.org
To: nobody@contoso.com
Subject: hello
Message-ID: <original-2@example.org>
MIME-Version: 1.0
Content-Type: text/plain

hello

--_000_EXCH_--
"""

QMAIL = b"""\
Return-Path: <>
From: MAILER-DAEMON@mail.example.net
To: postmaster@bounces.example.org
Subject: failure notice
Message-ID: <qmail-bounce-1@mail.example.net>

Hi. This is the qmail-send program at mail.example.net.
I'm afraid I wasn't able to deliver your message to the following addresses.
This is a permanent error; I've given up. Sorry it didn't work out.

<x@y.example>:
10.5.1.1 does not like recipient.
Remote host said: 550 5.1.1 <x@y.example>... User unknown
Giving up on 10.5.1.1.

--- Below this line is a copy of the message.

Return-Path: <app@example.org>
From: app@example.org
To: x@y.example
Subject: hello
Message-ID: <original-4@example.org>

hello
"""


def arf(recipient: str | None, original_message_id: str, *, sender: str = "<app@example.org>",
        feedback_type: str = "abuse") -> bytes:  # fmt: skip
    """A feedback report (RFC 5965) as a mailbox provider's feedback loop sends it."""
    rcpt_to = f"Original-Rcpt-To: <{recipient}>\n" if recipient else ""
    text = f"""\
From: feedback@fbl.example.net
To: fbl@example.org
Subject: FW: hello
Date: Tue, 1 Dec 2026 12:00:02 +0000
Message-ID: <arf-1@fbl.example.net>
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report;
\tboundary="arf_boundary"

--arf_boundary
Content-Type: text/plain; charset="US-ASCII"

This is an email abuse report for an email message received from IP
192.0.2.10 on Tue, 1 Dec 2026 12:00:00 +0000.

--arf_boundary
Content-Type: message/feedback-report

Feedback-Type: {feedback_type}
User-Agent: ExampleFBL/1.0
Version: 1
Original-Mail-From: {sender}
{rcpt_to}Arrival-Date: Tue, 1 Dec 2026 12:00:00 +0000
Source-IP: 192.0.2.10
Reported-Domain: example.org

--arf_boundary
Content-Type: message/rfc822
Content-Disposition: inline

From: app@example.org
To: {recipient or "redacted@example.net"}
Subject: hello
Message-ID: {original_message_id}

hello
--arf_boundary--
"""
    return text.encode()


OUT_OF_OFFICE = b"""\
From: Bob <bob@example.net>
To: app@example.org
Subject: Automatic reply: hello
Auto-Submitted: auto-replied
X-Auto-Response-Suppress: All
In-Reply-To: <original-6@example.org>
Message-ID: <ooo-1@example.net>

I am out of the office until Monday.
"""


def test_a_postfix_dsn() -> None:
    report = reports.parse(dsn("gone@example.com", "<original-1@example.org>"))
    diagnostic = "550 5.1.1 <gone@example.com>: Recipient address rejected: User unknown in virtual mailbox table"
    assert report == Bounce((Failed("gone@example.com", True, "5.1.1", diagnostic),), "<original-1@example.org>")


def test_an_exchange_dsn() -> None:
    report = reports.parse(EXCHANGE)
    diagnostic = ("550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient nobody@contoso.com not found by SMTP "
                  "address lookup")  # fmt: skip
    assert report == Bounce((Failed("nobody@contoso.com", True, "5.1.10", diagnostic),), "<original-2@example.org>")


def test_a_delay_is_soft() -> None:
    timeout = "connect to mx.slow.example[192.0.2.9]:25: Connection timed out"
    delay = dsn("slow@example.com", "<o-3@x>", action="delayed", status="4.4.1", diagnostic=f"X-Postfix; {timeout}")
    assert reports.parse(delay) == Bounce((Failed("slow@example.com", False, "4.4.1", timeout),), "<o-3@x>")


def test_a_failure_with_a_4xx_status_is_soft_and_one_without_a_status_is_hard() -> None:
    [soft] = _bounce(dsn("a@example.com", "<o@x>", status="4.2.2", diagnostic="smtp; 452 4.2.2 Mailbox full"))
    assert (soft.hard, soft.status) == (False, "4.2.2")
    [hard] = _bounce(dsn("a@example.com", "<o@x>", status="", diagnostic="smtp; 550 no such user"))
    assert (hard.hard, hard.status, hard.diagnostic) == (True, None, "550 no such user")
    [from_diagnostic] = _bounce(dsn("a@example.com", "<o@x>", status="", diagnostic="smtp; 550 5.7.1 refused"))
    assert from_diagnostic.status == "5.7.1"


def test_a_qmail_bounce_is_found_by_flufl_bounce_with_its_reply() -> None:
    report = reports.parse(QMAIL)
    assert report == Bounce(
        (Failed("x@y.example", True, "5.1.1", "550 5.1.1 <x@y.example>... User unknown"),), "<original-4@example.org>"
    )


def test_an_address_next_to_no_status_code_has_none() -> None:
    text = QMAIL.replace(b"Remote host said: 550 5.1.1 <x@y.example>... User unknown\n", b"")
    [failed] = _bounce(text)
    assert (failed.recipient, failed.hard, failed.status, failed.diagnostic) == ("x@y.example", True, None, None)


def test_an_arf_complaint() -> None:
    report = reports.parse(arf("angry@example.net", "<original-5@example.org>",
                               sender="<b-1f-abcdefghijklmnop@bounces.example.org>"))  # fmt: skip
    assert report == Complaints((Complaint("angry@example.net", "abuse", "<original-5@example.org>",
                                           "b-1f-abcdefghijklmnop@bounces.example.org"),))  # fmt: skip


def test_a_complaint_without_original_rcpt_to_names_the_originals_one_recipient() -> None:
    report = reports.parse(arf(None, "<original-5@example.org>", feedback_type="Fraud"))
    assert report == Complaints((Complaint("redacted@example.net", "fraud", "<original-5@example.org>", "app@example.org"),))


def test_automatic_replies() -> None:
    assert reports.parse(OUT_OF_OFFICE) == AutoReply("<original-6@example.org>", "bob@example.net")
    vacation = b"From: c@example.net\nSubject: Re: hello\nX-Autoreply: yes\nReferences: <a@x> <b@x>\n\nAway.\n"
    assert reports.parse(vacation) == AutoReply("<b@x>", "c@example.net")
    gmail = b"From: d@example.net\nSubject: Re: hello\nAuto-Submitted: auto-replied (vacation)\n\nAway.\n"
    assert reports.parse(gmail) == AutoReply(None, "d@example.net")
    encoded = b"From: e@example.net\nSubject: =?utf-8?q?Abwesenheitsnotiz=3A_hello?=\n\nAbwesend.\n"
    assert reports.parse(encoded) == AutoReply(None, "e@example.net")
    assert not isinstance(reports.parse(b"From: f@example.net\nAuto-Submitted: no\nSubject: hi\n\nhi\n"), AutoReply)


def test_a_reply_names_what_it_answers_newest_first() -> None:
    raw = (b"From: \"Carol C.\" <carol@example.net>\nSubject: Re: hello\nIn-Reply-To: <c@x>\n"
           b"References: <a@x> <b@x>\n <c@x>\n\nThanks!\n")  # fmt: skip
    assert reports.parse(raw) == Reply(("<c@x>", "<b@x>", "<a@x>"), "carol@example.net")
    assert reports.parse(b"From: nobody\nReferences: <a@x>\n\nhi\n") == Reply(("<a@x>",), None)


def test_junk_and_plain_mail_are_unknown() -> None:
    for raw in (b"", b"\x00\xff\xfe junk", b"Subject: hello\n\nJust a note.\n", b"Content-Type: multipart/mixed\n\n"):
        assert isinstance(reports.parse(raw), Unknown), raw
    delivered = dsn("fine@example.com", "<o@x>", action="delivered", status="2.0.0", diagnostic="smtp; 250 ok")
    assert reports.parse(delivered) == Unknown("a delivery status notification that reports no failure")


def test_only_the_head_of_a_large_message_is_read() -> None:
    huge_original = EXCHANGE.replace(b"hello\n\n--_000_EXCH_--", b"hello\n" + (b"x" * 70 + b"\n") * 150_000)
    [failed] = _bounce(huge_original)
    assert failed.recipient == "nobody@contoso.com"
    assert reports.parse(huge_original) == reports.parse(EXCHANGE)
    part = b"Content-Type: multipart/mixed; boundary=b\n\n"
    nested = part + (b"--b\n" + part) * 9000
    assert reports.parse(nested) == Unknown(f"more than {reports.MULTIPARTS} multipart parts")


def _bounce(raw: bytes) -> tuple[Failed, ...]:
    report = reports.parse(raw)
    assert isinstance(report, Bounce), report
    return report.recipients


KINDS = (Bounce, Complaints, reports.Delivered, AutoReply, Reply, Unknown)
SAMPLES = (dsn("gone@example.com", "<o@x>"), EXCHANGE, QMAIL, arf("a@example.net", "<o@x>"), OUT_OF_OFFICE)


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=3000))
def test_parse_never_raises_on_any_octets(raw: bytes) -> None:
    assert isinstance(reports.parse(raw), KINDS)


@settings(deadline=None, max_examples=300)
@given(st.sampled_from(SAMPLES), st.integers(min_value=0), st.integers(min_value=0),
       st.binary(max_size=200) | st.text(max_size=200).map(str.encode))  # fmt: skip
def test_parse_never_raises_on_a_mangled_report(sample: bytes, at: int, cut: int, junk: bytes) -> None:
    at %= len(sample) + 1
    mangled = sample[:at] + junk + sample[at + cut % 50 :]
    assert isinstance(reports.parse(mangled), KINDS)
