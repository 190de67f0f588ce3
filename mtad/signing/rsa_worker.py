"""The RSA signatures of DKIM, made in a worker process (dkim.Signer's pool).

A worker gets each key as its DER (PKCS#8) and parses it once; what comes and goes
per message is the DER, the 32-octet digest and the 256-octet signature. It imports
only `cryptography`, so that a spawned worker starts in a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

KEPT = 256  # parsed keys a worker keeps at most

_parsed: dict[bytes, rsa.RSAPrivateKey] = {}


def sign(jobs: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
    """The RSASSA-PKCS1-v1_5 signature of each (key DER, SHA-256 digest)."""
    return [_key(der).sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())) for der, digest in jobs]


def ready() -> bool:
    """Nothing: a call that makes the pool start its workers."""
    return True


def _key(der: bytes) -> rsa.RSAPrivateKey:
    found = _parsed.get(der)
    if found is None:
        key = serialization.load_der_private_key(der, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise TypeError("not an RSA private key")
        if len(_parsed) >= KEPT:
            _parsed.clear()
        found = _parsed[der] = key
    return found
