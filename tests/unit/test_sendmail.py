"""sendmail's command line, the message read from standard input, and the message as
handed to the port (mtad.sendmail): the parts with no socket."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mtad import sendmail
from mtad.base import errors


def test_the_options_cron_php_and_mailx_give() -> None:
    cron = sendmail.parse(["-FCronDaemon", "-i", "-B8BITMIME", "-oem", "root"])
    assert (cron.full_name, cron.dot_ends, cron.recipients, cron.from_headers) == ("CronDaemon", False, ["root"], False)
    php = sendmail.parse(["-t", "-i", "-f", "app@example.org"])
    assert (php.from_headers, php.dot_ends, php.sender) == (True, False, "app@example.org")
    together = sendmail.parse(["-ti", "-fbounce@example.org", "-C", "/etc/x.toml", "--", "-odd@example.com"])
    assert together.from_headers
    assert not together.dot_ends
    assert (together.sender, together.config, together.recipients) == (
        "bounce@example.org", Path("/etc/x.toml"), ["-odd@example.com"],
    )  # fmt: skip
    assert sendmail.parse(["-oi"]).dot_ends is False
    assert sendmail.parse(["-f", "<>"]).sender == ""
    assert sendmail.parse(["--config=/a.toml", "-bm", "-N", "never", "x@y"]).config == Path("/a.toml")


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["-bs"], "-bs is not supported"), (["-bp"], "mtad queue ls"), (["-f"], "-f needs a value"),
     (["-k"], "-k: unknown option"), (["-bz"], "-bz: unknown mode")],
)  # fmt: skip
def test_what_it_refuses_names_the_option(argv: list[str], said: str) -> None:
    with pytest.raises(errors.UsageError, match=said):
        sendmail.parse(argv)


def test_a_lone_dot_ends_the_message_unless_i() -> None:
    raw = b"Subject: s\n\nline\n.\nafter\n"
    assert sendmail.read(io.BytesIO(raw), dot_ends=True) == b"Subject: s\r\n\r\nline\r\n"
    assert sendmail.read(io.BytesIO(raw), dot_ends=False) == b"Subject: s\r\n\r\nline\r\n.\r\nafter\r\n"
    assert sendmail.read(io.BytesIO(b"a\r\nb"), dot_ends=True) == b"a\r\nb\r\n"


def test_t_reads_to_cc_bcc_removes_bcc_and_adds_from() -> None:
    message = (b"To: A <a@example.com>,\r\n b@example.com\r\nBcc: hidden@example.net\r\n"
               b"Cc: a@example.com\r\nSubject: s\r\n\r\nbody\r\n")  # fmt: skip
    got = sendmail.parse(["-t", "-F", "Jo Doe", "-f", "jo@example.org", "extra@example.com"])
    sender, recipients, sent = sendmail.prepare(message, got, "host.example")
    assert sender == "jo@example.org"
    assert recipients == ["extra@example.com", "a@example.com", "b@example.com", "hidden@example.net"]
    assert sent == (b"From: Jo Doe <jo@example.org>\r\nTo: A <a@example.com>,\r\n b@example.com\r\n"
                    b"Cc: a@example.com\r\nSubject: s\r\n\r\nbody\r\n")  # fmt: skip


def test_a_message_with_its_from_and_one_with_no_header() -> None:
    kept = sendmail.parse(["x@example.com"])
    _, _, sent = sendmail.prepare(b"From: app@example.org\r\nSubject: s\r\n\r\nb\r\n", kept, "host.example")
    assert sent == b"From: app@example.org\r\nSubject: s\r\n\r\nb\r\n"
    sender, _, bare = sendmail.prepare(b"just text\r\n", kept, "host.example")
    assert sender.endswith("@host.example")
    assert bare == f"From: {sender}\r\n\r\njust text\r\n".encode()
