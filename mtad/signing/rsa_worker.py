"""The RSA signatures of DKIM, made in a process of their own (dkim.Signer's workers).

`python -m mtad.signing.rsa_worker` reads requests on stdin and answers on stdout,
in order, until stdin ends. A request is a header (`REQUEST`: its number, the
lengths of the key and of the digest), the key's DER (PKCS#8, parsed once and kept)
and the SHA-256 digest to sign; an answer is a header (`ANSWER`: the request's
number, 1 for a signature or 0 for an error, the length) and the signature or the
error's text. It imports only `cryptography`, so that it starts in a fraction of a
second, and ignores SIGINT (it ends with its stdin, when the daemon closes it or
is gone).
"""

from __future__ import annotations

import signal
import struct
import sys
from typing import BinaryIO

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

REQUEST = struct.Struct("!QHH")  # number, key length, digest length
ANSWER = struct.Struct("!QBH")  # number, 1: signature / 0: error, length
KEPT = 256  # parsed keys kept at most

_parsed: dict[bytes, rsa.RSAPrivateKey] = {}


def sign(der: bytes, digest: bytes) -> bytes:
    """The RSASSA-PKCS1-v1_5 signature of a SHA-256 digest with the key `der`."""
    return _key(der).sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))


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


def _exactly(stream: BinaryIO, size: int) -> bytes | None:
    """`size` octets, or None at the end of the stream."""
    got = b""
    while len(got) < size:
        more = stream.read(size - len(got))
        if not more:
            return None
        got += more
    return got


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer every request until the requests end."""
    while (head := _exactly(requests, REQUEST.size)) is not None:
        number, key_length, digest_length = REQUEST.unpack(head)
        body = _exactly(requests, key_length + digest_length)
        if body is None:
            return
        try:
            made, ok = sign(body[:key_length], body[key_length:]), 1
        except Exception as exc:  # a bad key: said, and the next request served
            made, ok = f"{type(exc).__name__}: {exc}".encode()[:1000], 0
        answers.write(ANSWER.pack(number, ok, len(made)) + made)
        answers.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.stdin.buffer, sys.stdout.buffer)
