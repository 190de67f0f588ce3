"""Inbound reports: every sample of tests/samples/reports/ read as its expectations
(expected.toml) say; another reply table taken when given; and parse never raises,
whatever the octets; the reports the other tiers send (tests/reports.py) read as
they expect."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtad.feedback import reports
from mtad.feedback.reports import AutoReply, Bounce, Complaints, Delivered, Reply, Unknown
from mtad.outbound import outcomes
from tests.reports import EXCHANGE, EXPECTED, OUT_OF_OFFICE, SAMPLES, arf, dsn


def octets(name: str) -> bytes:
    return (SAMPLES / f"{name}.eml").read_bytes()


def read(report: reports.Report) -> dict[str, Any]:
    """A report as expected.toml writes it."""
    match report:
        case Bounce():
            recipients = [{"recipient": f.recipient, "reason": f.reason.value, "status": f.status, "hard": f.hard,
                           "action": f.action, "code": f.code} for f in report.recipients]  # fmt: skip
            return {"kind": "bounce", "original_message_id": report.original_message_id, "recipients": recipients}
        case Delivered():
            return {"kind": "delivered", "original_message_id": report.original_message_id,
                    "recipients": list(report.recipients)}  # fmt: skip
        case Complaints():
            found = [{"recipient": c.recipient, "feedback_type": c.feedback_type,
                      "original_message_id": c.original_message_id} for c in report.reports]  # fmt: skip
            return {"kind": "complaints", "reports": found}
        case AutoReply():
            return {"kind": "auto_reply", "sender": report.sender, "original_message_id": report.original_message_id}
        case Reply():
            return {"kind": "reply", "sender": report.sender, "message_ids": list(report.message_ids)}
        case Unknown():
            return {"kind": "unknown"}


def expectation(name: str) -> dict[str, Any]:
    """The sample's expectations, its original's Message-ID None when not given, a
    recipient's reply code checked only where given."""
    expected = {k: v for k, v in EXPECTED[name].items() if k != "xfail"}
    if expected["kind"] in ("bounce", "delivered", "auto_reply"):
        expected.setdefault("original_message_id", None)
    return expected


def as_expected(actual: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """`actual` with only the fields `expected` gives for each recipient."""
    recipients = actual.get("recipients")
    wanted = expected.get("recipients")
    if not (isinstance(recipients, list) and isinstance(wanted, list) and len(recipients) == len(wanted)):
        return actual
    pairs = list(zip(recipients, wanted, strict=True))
    if not all(isinstance(r, dict) and isinstance(w, dict) for r, w in pairs):
        return actual  # notices of delivery list addresses
    return {**actual, "recipients": [{k: r[k] for k in w} for r, w in pairs]}


def cases() -> list[Any]:
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=EXPECTED[name]["xfail"]))
        if "xfail" in EXPECTED[name]
        else name
        for name in sorted(EXPECTED)
    ]


@pytest.mark.parametrize("name", cases())
def test_a_sample_reads_as_expected(name: str) -> None:
    expected = expectation(name)
    assert as_expected(read(reports.parse(octets(name))), expected) == expected


def test_every_sample_has_its_expectations() -> None:
    assert sorted(p.stem for p in SAMPLES.glob("*.eml")) == sorted(EXPECTED)


def test_the_crlf_sample_is_the_lf_one_with_crlf_line_endings() -> None:
    crlf, lf = octets("gmail-text-crlf"), octets("gmail-text-lf")
    assert b"\r\n" in crlf
    assert b"\r\n" not in lf
    assert b"\n" not in crlf.replace(b"\r\n", b"")


def test_the_configured_reply_table_judges() -> None:
    """A table that says a full mailbox is gone makes it a hard bounce."""
    rules = outcomes.parse_rules({"rule": [{"text": "mailbox full", "reason": "userunknown"}]})
    [shipped] = _bounce(octets("mailbox-full-5.2.2"))
    [configured] = _bounce(octets("mailbox-full-5.2.2"), rules)
    assert (shipped.reason.value, shipped.hard) == ("mailboxfull", False)
    assert (configured.reason.value, configured.hard) == ("userunknown", True)


def test_the_reports_the_other_tiers_send_read_as_they_expect() -> None:
    [gone] = _bounce(dsn("gone@example.com", "<o@x>"))
    assert (gone.recipient, gone.hard, gone.status, gone.reason.value) == ("gone@example.com", True, "5.1.1",
                                                                            "userunknown")  # fmt: skip
    timeout = "X-Postfix; connect to mx.example.com[192.0.2.9]:25: Connection timed out"
    [delay] = _bounce(dsn("slow@example.com", "<o@x>", action="delayed", status="4.4.1", diagnostic=timeout))
    assert (delay.hard, delay.action, delay.permanent) == (False, "delayed", False)
    [nobody] = _bounce(EXCHANGE)
    assert (nobody.recipient, nobody.hard) == ("nobody@contoso.com", True)
    complaint = reports.parse(arf("angry@example.net", "<o-5@example.org>", feedback_type="Fraud"))
    assert isinstance(complaint, Complaints)
    assert [(c.recipient, c.feedback_type) for c in complaint.reports] == [("angry@example.net", "fraud")]
    assert reports.parse(OUT_OF_OFFICE) == AutoReply("<original-6@example.org>", "bob@example.net")


def test_a_complaint_names_the_originals_envelope_sender_from_its_return_path_too() -> None:
    """Original-Mail-From says it; without it, the Return-Path its receiver stamped on
    the original (a VERP address there names the delivery)."""
    verp = "<b-1f-abcdefghijklmnop@bounces.example.org>"
    for report in (arf("a@example.net", "<o@x>", sender=verp, return_path="<other@example.org>"),
                   arf("a@example.net", "<o@x>", sender=None, return_path=verp)):  # fmt: skip
        complaint = reports.parse(report)
        assert isinstance(complaint, Complaints)
        assert [c.original_sender for c in complaint.reports] == ["b-1f-abcdefghijklmnop@bounces.example.org"]
    neither = reports.parse(arf("a@example.net", "<o@x>", sender=None))
    assert isinstance(neither, Complaints)
    assert [c.original_sender for c in neither.reports] == [None]


def test_only_the_head_of_a_large_message_is_read() -> None:
    huge_original = EXCHANGE.replace(b"hello\n\n--_000_EXCH_--", b"hello\n" + (b"x" * 70 + b"\n") * 150_000)
    assert reports.parse(huge_original) == reports.parse(EXCHANGE)
    part = b"Content-Type: multipart/mixed; boundary=b\n\n"
    nested = part + (b"--b\n" + part) * 9000
    assert isinstance(reports.parse(nested), Unknown)


def _bounce(raw: bytes, rules: outcomes.Rules | None = None) -> tuple[reports.Failed, ...]:
    report = reports.parse(raw, rules)
    assert isinstance(report, Bounce), report
    return report.recipients


# --- parse never raises ------------------------------------------------------------

KINDS = (Bounce, Complaints, Delivered, AutoReply, Reply, Unknown)
ALL_SAMPLES = tuple(octets(name) for name in sorted(EXPECTED))


@settings(deadline=None, max_examples=300)
@given(st.binary(max_size=3000))
def test_parse_never_raises_on_any_octets(raw: bytes) -> None:
    assert isinstance(reports.parse(raw), KINDS)


@settings(deadline=None, max_examples=300)
@given(st.sampled_from(ALL_SAMPLES), st.integers(min_value=0), st.integers(min_value=0),
       st.binary(max_size=200) | st.text(max_size=200).map(str.encode))  # fmt: skip
def test_parse_never_raises_on_a_mangled_report(sample: bytes, at: int, cut: int, junk: bytes) -> None:
    at %= len(sample) + 1
    mangled = sample[:at] + junk + sample[at + cut % 50 :]
    assert isinstance(reports.parse(mangled), KINDS)


@settings(deadline=None, max_examples=200)
@given(st.sampled_from(ALL_SAMPLES), st.sampled_from([b"\r\n", b"\r", b"\n\n", b"\n ", b""]),
       st.integers(min_value=0, max_value=200))  # fmt: skip
def test_parse_never_raises_on_a_report_with_its_lines_broken(sample: bytes, ending: bytes, every: int) -> None:
    lines = sample.split(b"\n")
    broken = b"".join(line + (ending if every and i % every == 0 else b"\n") for i, line in enumerate(lines))
    assert isinstance(reports.parse(broken), KINDS)
