"""Inbound reports as mailbox providers send them: the samples of tests/samples/reports/
with their expectations, and builders of the reports the tests send to mtad."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).parent / "samples" / "reports"
EXPECTED: dict[str, dict[str, Any]] = tomllib.loads((SAMPLES / "expected.toml").read_text())


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


def arf(recipient: str | None, original_message_id: str, *, sender: str | None = "<app@example.org>",
        feedback_type: str = "abuse", return_path: str | None = None) -> bytes:  # fmt: skip
    """A feedback report (RFC 5965) as a mailbox provider's feedback loop sends it;
    `sender` None: without Original-Mail-From; `return_path`: the original's, as its
    receiver stamped it."""
    rcpt_to = f"Original-Rcpt-To: <{recipient}>\n" if recipient else ""
    mail_from = f"Original-Mail-From: {sender}\n" if sender is not None else ""
    stamped = f"Return-Path: {return_path}\n" if return_path is not None else ""
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
{mail_from}{rcpt_to}Arrival-Date: Tue, 1 Dec 2026 12:00:00 +0000
Source-IP: 192.0.2.10
Reported-Domain: example.org

--arf_boundary
Content-Type: message/rfc822
Content-Disposition: inline

{stamped}From: app@example.org
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
