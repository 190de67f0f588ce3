"""mtad's DKIM signatures checked by a second, independent verifier: opendkim-testmsg."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtad.signing import dkim
from mtad.signing.dkim import Algorithm
from tests import opendkim

pytestmark = pytest.mark.skipif(opendkim.missing() is not None, reason=str(opendkim.missing()))

RSA = dkim.generate("example.com", "odk-rsa", Algorithm.RSA2048)
ED = dkim.generate("example.com", "odk-ed", Algorithm.ED25519)
# opendkim-testmsg refuses a message without a Date field; mtad adds one at accept.
HEAD = b"From: Shop <news@example.com>\r\nTo: someone@example.net\r\nDate: Mon, 30 Nov 2026 02:00:00 +0000\r\n"
PLAIN = HEAD + b"Subject: Hello\r\nMessage-ID: <1@example.com>\r\n\r\nHello,\r\n\r\nsee  you.  \r\n\r\n"
MULTIPART = HEAD + (
    b"Subject: =?utf-8?q?Caf=C3=A9?= and a very long subject line that goes on and on and on past\r\n"
    b" the end of the line, folded, and on again for good measure and a bit more\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/alternative; boundary="b"\r\nList-Unsubscribe: <https://example.com/u/1>\r\n\r\n'
    b"--b\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
    b"Caf\xc3\xa9  \t au lait\r\n\r\n--b\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    b"<p>Caf\xc3\xa9</p>\r\n--b--\r\n"
)


def test_opendkim_verifies_rsa_and_ed25519_in_each_canonicalisation_and_refuses_tampering(tmp_path: Path) -> None:
    messages = {}
    for c in dkim.CANONICALIZATIONS:
        for label, body in (("plain", PLAIN), ("multipart", MULTIPART)):
            for keys in ([RSA], [ED], [RSA, ED]):
                name = f"{c.replace('/', '-')}-{label}-{'-'.join(k.algorithm.value for k in keys)}"
                messages[name] = dkim.sign(body, keys, c=c)
    tampered = dkim.sign(MULTIPART, [RSA])
    messages["tampered-body"] = tampered.replace(b"au lait", b"au laid")
    messages["tampered-subject"] = tampered.replace(b"Subject: =?utf-8?q?Caf", b"Subject: =?utf-8?q?Cof")
    verdicts = opendkim.verify(tmp_path / "opendkim", messages, [RSA, ED])
    assert {n: v for n, v in verdicts.items() if not n.startswith("tampered")} == {
        n: "ok" for n in messages if not n.startswith("tampered")
    }
    assert "Bad signature" in verdicts["tampered-body"] or "body hash" in verdicts["tampered-body"].lower()
    assert verdicts["tampered-subject"] != "ok"
