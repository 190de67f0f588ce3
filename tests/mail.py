"""The mail the tests submit to a running mtad, and the submitting of it over SMTP."""

from __future__ import annotations

import smtplib
from email.message import EmailMessage
from email.policy import SMTP

from tests.running import Mtad


def email(subject: str, message_id: str | None = None) -> EmailMessage:
    """A plain message from app@example.org to someone@example.com."""
    msg = EmailMessage()
    msg["From"] = "app@example.org"
    msg["To"] = "someone@example.com"
    msg["Subject"] = subject
    if message_id:
        msg["Message-ID"] = message_id
    msg.set_content("Hello from the acceptance tests.\n")
    return msg


def send(node: Mtad, recipient: str, subject: str) -> None:
    """One message to `recipient`, over a session of its own."""
    with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", [recipient], email(subject).as_bytes(policy=SMTP))


def send_as(port: int, tenant: str, recipient: str, subject: str) -> tuple[int, bytes]:
    """Submit one message as `tenant`; the reply to the first command refused, else to DATA."""
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.login(tenant, "pw")
        code, text = client.mail("app@example.org")
        if code != 250:
            return code, text
        assert client.rcpt(recipient)[0] == 250
        return client.data(email(subject, f"<{subject}@example.org>").as_bytes(policy=SMTP))


def submit(client: smtplib.SMTP, message_id: str) -> str:
    """One message; returns the queue id of the 250 (original or duplicate)."""
    client.ehlo_or_helo_if_needed()
    assert client.mail("app@example.org")[0] == 250
    assert client.rcpt("someone@example.com")[0] == 250
    code, reply = client.data(email("burst", message_id).as_bytes(policy=SMTP))
    if code != 250:
        raise smtplib.SMTPDataError(code, reply)
    return reply.decode().split(" as ", 1)[1].split(" ", 1)[0]
