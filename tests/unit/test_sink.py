"""`mtad sink`'s pure parts: scripted replies, the options, the printed line."""

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mtad import sink
from mtad.base import errors
from mtad.base.endpoints import HostPort
from mtad.base.replies import Reply


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("550 5.1.1 No such user", Reply(550, "5.1.1", "No such user")),
        ("451 Try later", Reply(451, "", "Try later")),
        ("452 4.2.2 Mailbox full = no room", Reply(452, "4.2.2", "Mailbox full = no room")),
        ("250", Reply(250, "", "OK")),  # a reply without text gets its class's
        ("554 5.7.1", Reply(554, "5.7.1", "Refused")),
        ("421 4.7.0 Try again later", Reply(421, "4.7.0", "Try again later")),
        ("550 5 users", Reply(550, "", "5 users")),  # not an enhanced code: text
    ],
)
def test_a_reply_is_a_code_an_optional_enhanced_code_and_text(given: str, expected: Reply) -> None:
    assert sink.parse_reply(given) == expected


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("600 5.0.0 x", "reply code '600'"),
        ("354 Go ahead", "reply code '354'"),
        ("55 short", "reply code '55'"),
        ("5500 long", "reply code '5500'"),
        ("abc", "reply code 'abc'"),
        ("", "reply code ''"),
        ("570 x", "reply code '570'"),  # the second digit is 0 to 5 (RFC 5321 4.2.1)
        ("550 4.1.1 x", "enhanced code '4.1.1': expected 5.x.y to go with 550"),
        ("451 4.3 x", "enhanced code '4.3'"),
        ("550 5.1.1234 x", "enhanced code '5.1.1234'"),
        ("550 5.1.1 caf\u00e9", "the reply text must be printable ASCII"),
        ("550 5.1.1 two\r\nlines", "the reply text must be printable ASCII"),
    ],
)
def test_a_bad_reply_is_refused_with_the_reason(given: str, why: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(why)):
        sink.parse_reply(given)


def test_a_rule_is_a_lower_case_glob_and_a_reply() -> None:
    assert sink.parse_rule("Bounce*@*=550 5.1.1 No such user") == sink.Rule(
        "bounce*@*", Reply(550, "5.1.1", "No such user")
    )
    # An = in the pattern (VERP, SRS) stays there unless a reply code follows it.
    assert sink.parse_rule("b+u=example.com@*=451 4.3.0 Later").pattern == "b+u=example.com@*"
    assert sink.parse_rule("x@y=550").reply == Reply(550, "", "Refused")


@pytest.mark.parametrize("given", ["=550 5.1.1 x", "bounce@*", "bounce@*=", "bounce@*=55 x", "bounce@*:550 x"])
def test_a_rule_without_a_pattern_or_a_reply_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="expected PATTERN=REPLY"):
        sink.parse_rule(given)


def test_the_first_matching_rule_answers_ignoring_case_and_others_get_250() -> None:
    rules = [sink.parse_rule(r) for r in ("slow@*=451 4.3.0 Try later", "*@bounce.test=550 5.1.1 No", "*=250 x")]
    assert sink.reply_for("SLOW@Example.ORG", rules) == Reply(451, "4.3.0", "Try later")
    assert sink.reply_for("slow@bounce.test", rules).code == 451  # the first match
    assert sink.reply_for("a@Bounce.Test", rules).code == 550
    assert sink.reply_for("a@example.org", rules) == Reply(250, "", "x")
    assert sink.reply_for("a@example.org", []) == sink.ACCEPTED


def test_the_options_name_every_bad_one_at_once(tmp_path: Path) -> None:
    rule = "bounce*@*=550 5.1.1 No such user"
    chosen = sink.options("127.0.0.1:0", [rule], tmp_path)
    assert chosen == sink.Options(HostPort("127.0.0.1", 0), (sink.parse_rule(rule),), tmp_path)
    assert sink.options(sink.DEFAULT_LISTEN, [], None).listen == HostPort("127.0.0.1", 2526)
    with pytest.raises(errors.ConfigError) as refused:
        sink.options("localhost", ["ok@*=250", "x@*=650 no", "y@*"], None)
    assert refused.value.problems == (
        '--listen: expected "host:port" or "[ipv6]:port", got \'localhost\'',
        "--reply 'x@*=650 no': reply code '650': expected 2xx, 4xx or 5xx",
        "--reply 'y@*': expected PATTERN=REPLY, such as 'bounce*@*=550 5.1.1 No such user'",
    )


AT = datetime(2026, 12, 1, 9, 30, 5, 123456, tzinfo=UTC)


def test_the_line_says_who_what_and_who_signed() -> None:
    data = (
        b"DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=example.org;\r\n"
        b"\ts=mtad-202612; h=From:To:Subject; bh=abc=; b=def\r\n"
        b"DKIM-Signature: v=1; a=ed25519-sha256; d=example.org; s=mtad-202612-ed; b=x\r\n"
        b"From: App <app@example.org>\r\n"
        b'Subject: =?utf-8?q?Caf=C3=A9?= and\r\n "quotes"\r\n'
        b"Message-ID: <1@example.org>\r\n"
        b"\r\n"
        b"Subject: not this one\r\n"
    )
    line = sink.describe("app@example.org", ["a@sink.test", "b@sink.test"], data, AT, Path("/m/1.eml"))
    assert line == (
        "2026-12-01T09:30:05Z from=<app@example.org> to=<a@sink.test>,<b@sink.test> "
        f'size={len(data)} subject="Café and \\"quotes\\"" message-id=<1@example.org> '
        'dkim="d=example.org s=mtad-202612" dkim="d=example.org s=mtad-202612-ed" file=/m/1.eml'
    )


def test_the_line_of_a_bare_unsigned_message() -> None:
    line = sink.describe("<>", ["ü@sink.test"], b"X: y\r\n\r\nbody\r\n", AT, None)
    assert line == '2026-12-01T09:30:05Z from=<> to=<ü@sink.test> size=14 subject="" message-id=- dkim=none'


def test_a_message_is_stored_under_a_name_that_sorts_by_arrival(tmp_path: Path) -> None:
    first = sink.store(tmp_path, b"one\r\n", AT, 9)
    second = sink.store(tmp_path, b"two\r\n", AT.replace(second=6), 10)
    assert first.name == "20261201T093005.123456Z-000009.eml"
    assert sorted(tmp_path.iterdir()) == [first, second]  # no partial file left behind
    assert first.read_bytes() == b"one\r\n"


@pytest.mark.parametrize(("given", "fraction"), [("5%", 0.05), ("0.5%", 0.005), ("100%", 1.0), ("0%", 0.0)])
def test_a_rate_is_a_percentage(given: str, fraction: float) -> None:
    assert sink.percent(given) == fraction


@pytest.mark.parametrize("given", ["5", "0.05", "101%", "-1%", "five%"])
def test_a_rate_without_a_percent_sign_or_above_100_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="expected a percentage from 0% to 100%"):
        sink.percent(given)


def test_a_delay_is_one_duration_or_a_range() -> None:
    assert sink.delay_range("200ms") == (0.2, 0.2)
    assert sink.delay_range("100ms-300ms") == (0.1, 0.3)
    with pytest.raises(ValueError, match="ends before it starts"):
        sink.delay_range("1s-10ms")


def test_the_new_options_are_parsed_and_each_bad_one_named() -> None:
    chosen = sink.options("127.0.0.1:0", [], None, defer="5%", bounce="1%", delay="200ms", tls=True,
                          auth="app:s3:cret", seed=7, quiet=True)  # fmt: skip
    assert chosen.chances == sink.Chances(0.05, 0.01, (0.2, 0.2))
    assert (chosen.tls, chosen.login, chosen.seed, chosen.quiet) == (sink.Tls(), sink.Login("app", "s3:cret"), 7, True)
    assert sink.options("127.0.0.1:0", [], None, auth="").login == sink.Login()  # any login
    assert sink.options("127.0.0.1:0", [], None, cert=Path("c"), key=Path("k")).tls == sink.Tls(Path("c"), Path("k"))
    with pytest.raises(errors.ConfigError) as refused:
        sink.options("127.0.0.1:0", [], None, defer="60%", bounce="50%", delay="soon", cert=Path("c"), auth="app")
    assert refused.value.problems == (
        '--delay: expected a duration such as "250ms", "30s", "5m", "2h" or "7d", got \'soon\'',
        "--defer and --bounce: together more than 100%",
        "--cert and --key: give both, or neither for a self-signed certificate",
        "--auth: expected USER:PASSWORD, or nothing to take any login",
    )


def test_the_draws_defer_and_bounce_the_shares_given_the_same_for_a_seed() -> None:
    import random

    chances = sink.Chances(defer=0.05, bounce=0.01)
    draw = random.Random(33)
    replies = [chances.reply(draw) for _ in range(10_000)]
    # 500 and 100 expected; 4 standard deviations are 87 and 40.
    assert 413 <= replies.count(sink.DEFERRED) <= 587
    assert 60 <= replies.count(sink.BOUNCED) <= 140
    assert replies.count(sink.ACCEPTED) == 10_000 - replies.count(sink.DEFERRED) - replies.count(sink.BOUNCED)
    again = random.Random(33)
    assert [chances.reply(again) for _ in range(10_000)] == replies
    assert sink.Chances().reply(draw) == sink.ACCEPTED


def test_a_login_is_any_or_the_one_given() -> None:
    from aiosmtpd.smtp import LoginPassword

    assert sink.Login().allows(LoginPassword(b"anyone", b"anything"))
    assert sink.Login("app", "pw").allows(LoginPassword(b"app", b"pw"))
    assert not sink.Login("app", "pw").allows(LoginPassword(b"app", b"PW"))


def test_the_summary_counts_recipients_by_the_class_of_their_reply() -> None:
    tally = sink.Tally(messages=2, octets=2048, first=10.0, last=12.0)
    for reply in (sink.ACCEPTED, sink.ACCEPTED, sink.DEFERRED, sink.BOUNCED, Reply(452, "4.2.2", "Full")):
        tally.recipient(reply)
    assert tally.summary() == ("mtad sink: summary: messages=2 recipients=5 accepted=2 deferred=2 bounced=1 "
                               "bytes=2048 seconds=2.000 rate=1.0/s")  # fmt: skip
    assert sink.Tally().summary().endswith("seconds=0.000 rate=-")
