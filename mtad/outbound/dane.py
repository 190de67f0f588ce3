"""DANE for SMTP (RFC 7672): a receiver's certificate checked against the TLSA
records of its MX host (`_25._tcp.<mx>`), when they come from a DNSSEC-validated
answer.

`parse()` reads TLSA rdata; `usable()` keeps the records SMTP may use (section
3.1.3: DANE-TA(2) and DANE-EE(3), selectors 0 and 1, matching types 0, 1 and
2); `check()` says whether a certificate chain, as the receiver sent it, leaf
first, satisfies them:
- DANE-EE: the leaf matches a record; its names and dates are not checked
  (section 3.1.1).
- DANE-TA: a certificate of the chain matches a record, and the leaf chains up
  to it with a name valid for the MX host (or the domain, when the MX was not
  from a secure answer: the caller says which names count).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509 import verification

from mtad.base import errors


class Usage(IntEnum):
    PKIX_TA = 0
    PKIX_EE = 1
    DANE_TA = 2
    DANE_EE = 3


class Selector(IntEnum):
    CERT = 0  # the whole certificate (DER)
    SPKI = 1  # its SubjectPublicKeyInfo (DER)


class Matching(IntEnum):
    FULL = 0
    SHA256 = 1
    SHA512 = 2


class TlsaError(errors.RemoteError):
    """TLSA rdata that does not parse."""


@dataclass(frozen=True, slots=True)
class Tlsa:
    usage: int
    selector: int
    matching: int
    data: bytes

    def matches(self, der: bytes) -> bool:
        """Whether a certificate (DER) is the one this record names."""
        try:
            certificate = x509.load_der_x509_certificate(der)
        except ValueError:
            return False
        if self.selector == Selector.CERT:
            selected = der
        else:
            selected = certificate.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        if self.matching == Matching.SHA256:
            selected = hashlib.sha256(selected).digest()
        elif self.matching == Matching.SHA512:
            selected = hashlib.sha512(selected).digest()
        return selected == self.data


def parse(value: str) -> Tlsa:
    """A TLSA record from its rdata as text: "3 1 1 <hex>" (the hex may be split by spaces)."""
    parts = value.split()
    if len(parts) < 4:
        raise TlsaError(f"not 'usage selector matching data': {value[:80]!r}")
    try:
        usage, selector, matching = (int(p) for p in parts[:3])
        data = bytes.fromhex("".join(parts[3:]))
    except ValueError as exc:
        raise TlsaError(f"not 'usage selector matching data': {value[:80]!r}") from exc
    if not all(0 <= n <= 255 for n in (usage, selector, matching)):
        raise TlsaError(f"a field past 255: {value[:80]!r}")
    return Tlsa(usage, selector, matching, data)


def usable(records: Iterable[Tlsa]) -> list[Tlsa]:
    """The records SMTP uses: DANE-TA and DANE-EE, with known selectors and matching
    types, and digests of the right length."""
    lengths = {Matching.SHA256: 32, Matching.SHA512: 64}
    return [
        r
        for r in records
        if r.usage in (Usage.DANE_TA, Usage.DANE_EE)
        and r.selector in (Selector.CERT, Selector.SPKI)
        and r.matching in (Matching.FULL, Matching.SHA256, Matching.SHA512)
        and len(r.data) == lengths.get(Matching(r.matching), len(r.data))
        and r.data
    ]


def check(
    records: Sequence[Tlsa], chain: Sequence[bytes], names: Sequence[str], now: datetime | None = None
) -> str | None:
    """None when the chain (DER, leaf first) satisfies one of the usable records,
    else why not. `names`: the host names a DANE-TA leaf may be valid for."""
    if not chain:
        return "the receiver sent no certificate"
    leaf = chain[0]
    if any(r.usage == Usage.DANE_EE and r.matches(leaf) for r in records):
        return None
    anchors = [der for der in chain if any(r.usage == Usage.DANE_TA and r.matches(der) for r in records)]
    if not anchors:
        return "no certificate of the receiver's matches its TLSA records"
    at = now or datetime.now(UTC)
    why = "no name of the certificate is valid for " + ", ".join(names)
    for anchor in anchors:
        store = verification.Store([x509.load_der_x509_certificate(anchor)])
        intermediates = [x509.load_der_x509_certificate(der) for der in chain[1:]]
        for name in names:
            verifier = verification.PolicyBuilder().store(store).time(at).build_server_verifier(x509.DNSName(name))
            try:
                verifier.verify(x509.load_der_x509_certificate(leaf), intermediates)
            except verification.VerificationError as exc:
                why = f"the certificate does not chain to the TLSA trust anchor for {name}: {exc}"
                continue
            return None
    return why
