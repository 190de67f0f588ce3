"""DANE (RFC 7672): TLSA records and a receiver's certificate chain."""

from __future__ import annotations

import hashlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import given
from hypothesis import strategies as st

from mtad.outbound import dane
from tests.certs import Authority


def _der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def _spki(cert: x509.Certificate) -> bytes:
    return cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


AUTHORITY = Authority()
CA = AUTHORITY.cert
LEAF = AUTHORITY.certificate("mx.example.com")[0]
CHAIN = [_der(LEAF), _der(CA)]


@pytest.mark.parametrize(
    "record",
    [
        dane.Tlsa(3, 1, 1, hashlib.sha256(_spki(LEAF)).digest()),
        dane.Tlsa(3, 1, 2, hashlib.sha512(_spki(LEAF)).digest()),
        dane.Tlsa(3, 0, 1, hashlib.sha256(_der(LEAF)).digest()),
        dane.Tlsa(3, 0, 0, _der(LEAF)),
        dane.Tlsa(3, 1, 0, _spki(LEAF)),
    ],
)
def test_dane_ee_matches_the_leaf_by_any_selector_and_matching_type(record: dane.Tlsa) -> None:
    assert dane.check(dane.usable([record]), CHAIN, ["mx.example.com"]) is None
    assert dane.check(dane.usable([record]), CHAIN, ["another.example"]) is None  # EE: no name check


def test_dane_ee_ignores_the_leafs_dates_and_a_wrong_digest_fails() -> None:
    expired = AUTHORITY.certificate("mx.example.com", expired=True)[0]
    record = dane.Tlsa(3, 1, 1, hashlib.sha256(_spki(expired)).digest())
    assert dane.check([record], [_der(expired)], ["mx.example.com"]) is None
    wrong = dane.Tlsa(3, 1, 1, hashlib.sha256(b"another key").digest())
    assert dane.check([wrong], CHAIN, ["mx.example.com"]) == "no certificate of the receiver's matches its TLSA records"


def test_dane_ta_needs_the_chain_to_the_anchor_and_a_valid_name() -> None:
    record = dane.Tlsa(2, 1, 1, hashlib.sha256(_spki(CA)).digest())
    assert dane.check([record], CHAIN, ["mx.example.com"]) is None
    assert dane.check([record], CHAIN, ["other.example", "mx.example.com"]) is None  # any of the names
    why = dane.check([record], CHAIN, ["other.example"])
    assert why is not None
    assert "other.example" in why
    stranger = Authority("another CA").certificate("mx.example.com")[0]
    assert dane.check([record], [_der(stranger), _der(CA)], ["mx.example.com"]) is not None  # not signed by it
    assert dane.check([record], [], ["mx.example.com"]) == "the receiver sent no certificate"


def test_only_dane_usages_and_known_types_are_usable() -> None:
    digest = hashlib.sha256(b"x").digest()
    records = [
        dane.Tlsa(0, 1, 1, digest),  # PKIX-TA: not for SMTP
        dane.Tlsa(1, 1, 1, digest),  # PKIX-EE: not for SMTP
        dane.Tlsa(3, 2, 1, digest),  # unknown selector
        dane.Tlsa(3, 1, 3, digest),  # unknown matching type
        dane.Tlsa(3, 1, 2, digest),  # a SHA-256 length under SHA-512
        dane.Tlsa(3, 1, 0, b""),
        dane.Tlsa(2, 0, 1, digest),
        dane.Tlsa(3, 1, 2, hashlib.sha512(b"x").digest()),
    ]
    assert dane.usable(records) == records[-2:]


def test_tlsa_rdata_is_parsed_or_refused() -> None:
    assert dane.parse("3 1 1 AB cd") == dane.Tlsa(3, 1, 1, b"\xab\xcd")
    for bad in ("3 1 1", "3 1 x abcd", "3 1 1 abc", "300 1 1 ab"):
        with pytest.raises(dane.TlsaError):
            dane.parse(bad)


@given(st.text(max_size=120))
def test_any_text_parses_or_raises_a_tlsa_error(text: str) -> None:
    try:
        record = dane.parse(text)
    except dane.TlsaError:
        return
    assert 0 <= record.usage <= 255
