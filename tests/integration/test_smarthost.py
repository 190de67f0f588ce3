"""The smarthost process (tests/smarthost.py) times sends as a client sees them."""

from __future__ import annotations

import smtplib
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.smarthost import Smarthost, Timeline, violations

LOGINS = {"box@example.com": "pw-box", "other@example.com": "pw-other"}
MESSAGE = b"From: app@example.org\r\nTo: r@example.net\r\nSubject: hi\r\n\r\nhello\r\n"


def client(smarthost: Smarthost, cert: Path, login: str = "box@example.com") -> smtplib.SMTP:
    """An authenticated session over STARTTLS, trusting the test certificate (issued to localhost)."""
    connection = smtplib.SMTP("localhost", smarthost.port, timeout=30)
    connection.starttls(context=ssl.create_default_context(cafile=cert))
    connection.login(login, LOGINS[login])
    return connection


@pytest.fixture
def plain(tls_files: tuple[Path, Path]) -> Iterator[Smarthost]:
    with Smarthost(*tls_files, LOGINS) as started:
        yield started


def test_a_message_is_answered_and_timed(plain: Smarthost, tls_files: tuple[Path, Path]) -> None:
    before = time.time()
    with client(plain, tls_files[0]) as connection:
        connection.sendmail("box@example.com", ["r@example.net"], MESSAGE)
    after = time.time()
    [answered] = plain.wait_for_answers(1)
    [(mail, paired)] = plain.timeline()["box@example.com"]
    assert before <= mail <= answered <= after
    assert paired == answered
    assert plain.mails("box@example.com") == [mail]
    assert plain.answers("other@example.com") == []
    assert [r["code"] for r in plain.records if r["event"] == "answered"] == [250]
    assert plain.stop() == 0


def test_mail_before_auth_is_refused(plain: Smarthost) -> None:
    with smtplib.SMTP("127.0.0.1", plain.port, timeout=30) as connection:
        connection.ehlo()
        code, _ = connection.mail("box@example.com")
    assert code == 530
    assert plain.mails() == []


def test_delay_holds_the_answer(tls_files: tuple[Path, Path]) -> None:
    with Smarthost(*tls_files, LOGINS, delay=1) as smarthost, client(smarthost, tls_files[0]) as connection:
        started = time.monotonic()
        connection.sendmail("box@example.com", ["r@example.net"], MESSAGE)
        assert time.monotonic() - started >= 1
        smarthost.wait_for_answers(1)
        [(mail, answered)] = smarthost.timeline()["box@example.com"]
    assert answered is not None
    assert answered - mail >= 1


def test_stall_holds_every_answer_after_the_nth(tls_files: tuple[Path, Path]) -> None:
    with (
        Smarthost(*tls_files, LOGINS, stall_after=1, stall_for=2) as smarthost,
        client(smarthost, tls_files[0]) as first,
        client(smarthost, tls_files[0], "other@example.com") as second,
    ):
        first.sendmail("box@example.com", ["r@example.net"], MESSAGE)
        second.sendmail("other@example.com", ["r@example.net"], MESSAGE)
        stall_began, held = smarthost.wait_for_answers(2)
    assert held - stall_began >= 2
    assert smarthost.timeline()["other@example.com"][0][1] == held


def test_no_violation_when_sends_keep_their_gap() -> None:
    # a's gap is exactly 2; b's sends fall between a's, which does not count
    timeline: Timeline = {"a": [(13.0, 13.5), (10.0, 11.0)], "b": [(10.5, 11.5), (13.6, 14.0)]}
    assert violations(timeline, 2.0) == []
    assert violations({}, 2.0) == []


def test_an_overlap_is_a_violation() -> None:
    found = violations({"a": [(12.0, None), (10.0, 14.0), (11.0, 11.5)]}, 0.0)
    assert found == [
        "a: MAIL at 11.000 overlaps send 0 (MAIL 10.000, answered 14.000)",
        "a: MAIL at 12.000 overlaps send 0 (MAIL 10.000, answered 14.000)",
    ]


def test_a_send_too_close_to_the_last_is_a_violation() -> None:
    found = violations({"a": [(10.0, 11.0), (12.0, None), (15.0, 15.5)]}, 2.0)
    assert found == ["a: MAIL at 12.000 is 1.000s after send 0 ended (< 2.0s)"]
    assert violations({"a": [(10.0, None), (11.0, 11.5)]}, 2.0) == [
        "a: MAIL at 11.000 is 1.000s after send 0 ended (< 2.0s)"
    ]
