"""MTA-STS policy text (RFC 8461): the TXT record and the policy file."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtad.outbound import mtasts

POLICY = b"version: STSv1\r\nmode: enforce\r\nmx: mail.example.com\r\nmx: *.example.net\r\nmax_age: 604800\r\n"


def test_a_policy_file_is_read_with_its_patterns() -> None:
    policy = mtasts.parse(POLICY)
    assert policy == mtasts.Policy(mtasts.Mode.ENFORCE, 604800, ("mail.example.com", "*.example.net"))
    assert mtasts.parse(POLICY.replace(b"\r\n", b"\n")) == policy  # LF alone too
    assert mtasts.parse(POLICY + b"future_key: whatever\n") == policy  # unknown keys are ignored


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (POLICY.replace(b"STSv1", b"STSv2"), "version"),
        (POLICY.replace(b"enforce", b"strict"), "mode"),
        (POLICY.replace(b"604800", b"a week"), "max_age"),
        (POLICY.replace(b"604800", b"-1"), "max_age"),
        (b"version: STSv1\nmode: enforce\nmax_age: 60\n", "names no mx"),
        (POLICY.replace(b"mail.example.com", b"mail..example.com"), "not a host name"),
        (POLICY.replace(b"*.example.net", b"a.*.example.net"), "not a host name"),
        (POLICY + b"this line has no colon\n", "not a 'key: value' line"),
        (b"\xff" + POLICY, "not UTF-8"),
        (POLICY + b"x: " + b"y" * mtasts.MAX_POLICY_OCTETS, "larger than"),
    ],
)
def test_a_policy_that_does_not_parse_says_why(text: bytes, why: str) -> None:
    with pytest.raises(mtasts.PolicyError, match=why):
        mtasts.parse(text)


def test_mode_none_needs_no_mx_and_max_age_is_capped_at_a_year() -> None:
    policy = mtasts.parse(b"version: STSv1\nmode: none\nmax_age: 9999999999\n")
    assert policy == mtasts.Policy(mtasts.Mode.NONE, mtasts.MAX_AGE_LIMIT, ())


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("mail.example.com", True),
        ("MAIL.Example.COM.", True),
        ("other.example.com", False),
        ("mx1.example.net", True),
        ("a.mx1.example.net", False),  # the wildcard stands for one label only
        ("example.net", False),
    ],
)
def test_an_mx_is_allowed_by_an_exact_name_or_a_one_label_wildcard(host: str, allowed: bool) -> None:
    assert mtasts.parse(POLICY).allows(host) is allowed


@pytest.mark.parametrize(
    ("records", "policy_id"),
    [
        (['"v=STSv1; id=20160831085700Z;"'], "20160831085700Z"),
        (['"v=STSv1;" " id=abc123"'], "abc123"),  # split into strings
        (["v=STSv1;id=x1"], "x1"),
        (['"v=spf1 -all"', '"v=STSv1; id=one"'], "one"),  # others are discarded
        (['"v=STSv1; id=one"', '"v=STSv1; id=two"'], None),  # two: as if none
        (['"v=STSv1; id=not-alnum"'], None),
        (['"v=STSv1; id="'], None),
        (['"v=STSv10; id=abc"'], None),
        (['"v=STSv1"'], None),
        ([], None),
    ],
)
def test_the_txt_record_gives_the_policy_id_or_none(records: list[str], policy_id: str | None) -> None:
    assert mtasts.txt_id(records) == policy_id


@given(st.binary(max_size=2000))
def test_any_octets_parse_or_raise_a_policy_error(text: bytes) -> None:
    try:
        policy = mtasts.parse(text)
    except mtasts.PolicyError:
        return
    assert 0 <= policy.max_age <= mtasts.MAX_AGE_LIMIT
    assert policy.mode is mtasts.Mode.NONE or policy.mx


@given(st.lists(st.text(max_size=80), max_size=3))
def test_any_txt_records_give_an_id_or_none(records: list[str]) -> None:
    policy_id = mtasts.txt_id(records)
    assert policy_id is None or (policy_id.isalnum() and policy_id.isascii() and len(policy_id) <= 32)


_LABELS = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z")


@given(st.lists(_LABELS, min_size=2, max_size=4), _LABELS)
def test_a_wildcard_matches_exactly_one_more_label(labels: list[str], extra: str) -> None:
    domain = ".".join(labels)
    policy = mtasts.Policy(mtasts.Mode.ENFORCE, 60, (f"*.{domain}",))
    assert policy.allows(f"{extra}.{domain}")
    assert not policy.allows(domain)
    assert not policy.allows(f"{extra}.{extra}.{domain}")
