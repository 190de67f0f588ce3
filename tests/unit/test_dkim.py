"""DKIM signatures made by mtad.signing.dkim, checked by dkimpy's verifier (keys from a dict, no DNS)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from datetime import UTC, datetime

import dkim as dkimpy
import pytest
import uvloop
from dkim.canonicalization import CanonicalizationPolicy

from mtad.signing import dkim
from mtad.signing.dkim import Algorithm

RELAXED = CanonicalizationPolicy.from_c_value(b"relaxed/relaxed")  # dkimpy's, to compare with
RSA = dkim.generate("example.com", "mtad-202611", Algorithm.RSA2048)
ED = dkim.generate("example.com", "mtad-202611-ed", Algorithm.ED25519)
PLAIN = (
    b"From: Shop <news@example.com>\r\nTo: someone@example.net\r\nSubject: Hello\r\n"
    b"Date: Mon, 30 Nov 2026 02:00:00 +0000\r\nMessage-ID: <1@example.com>\r\nX-Other: not signed\r\n\r\n"
    b"Hello,\r\n\r\nsee you.\r\n"
)
MULTIPART = (
    b"From: news@example.com\r\nTo: a@example.net\r\nSubject: =?utf-8?q?Caf=C3=A9?= and a very long subject line "
    b'that goes on\r\n and on, folded\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary="b"\r\n'
    b"List-Unsubscribe: <https://example.com/u/1>\r\n\r\n--b\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Transfer-Encoding: 8bit\r\n\r\nCaf\xc3\xa9  \t\r\n\r\n\r\n--b--\r\n"
)


def verify(message: bytes, *keys: dkim.Key) -> list[bool]:
    records = {f"{k.selector}._domainkey.{k.domain}.".encode(): k.record().encode() for k in keys}

    def dns(name: bytes, timeout: int = 5) -> bytes:
        return records.get(name, b"")

    found = dkimpy.DKIM(message)
    count = sum(1 for line in message.split(b"\r\n\r\n")[0].split(b"\r\n") if line.startswith(b"DKIM-Signature:"))
    results = []
    for i in range(count):
        try:
            results.append(bool(found.verify(idx=i, dnsfunc=dns)))
        except dkimpy.ValidationError:  # a body hash mismatch is raised, not answered
            results.append(False)
    return results


@pytest.mark.parametrize("key", [RSA, ED], ids=["rsa", "ed25519"])
@pytest.mark.parametrize("message", [PLAIN, MULTIPART], ids=["plain", "multipart-8bit-folded"])
def test_a_signature_verifies(key: dkim.Key, message: bytes) -> None:
    signed = dkim.sign(message, [key])
    assert signed.endswith(message)
    assert verify(signed, key) == [True]
    field = signed[: len(signed) - len(message)]
    assert b"c=relaxed/relaxed" in field
    assert all(len(line) <= 78 for line in field.split(b"\r\n"))


def test_rsa_and_ed25519_side_by_side() -> None:
    signed = dkim.sign(PLAIN, [RSA, ED])
    assert verify(signed, RSA, ED) == [True, True]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("keys", [[RSA], [ED], [RSA, ED]], ids=["rsa", "ed25519", "both"])
async def test_a_signer_with_processes_signs_as_sign_does(keys: list[dkim.Key]) -> None:
    signer = dkim.Signer(processes=2)
    try:
        signed = await asyncio.gather(*(signer.sign(m, keys) for m in [PLAIN, MULTIPART] * 8))  # 16 in flight
        # RSA is signed in the signer's processes; Ed25519 alone never starts them.
        workers = signer.pids()
        assert len(workers) == (2 if RSA in keys else 0)
    finally:
        await signer.close()
    assert all(gone(pid) for pid in workers)  # ended, and reaped
    for message, one in zip([PLAIN, MULTIPART] * 8, signed, strict=True):
        assert one.endswith(message)
        assert verify(one, *keys) == [True] * len(keys)
    made = dkim.sign(PLAIN, keys, now=int(signed[0].split(b"t=")[1].split(b";")[0]))
    assert made[: made.index(b"b=")] == signed[0][: signed[0].index(b"b=")]  # the same field up to b=


async def test_a_signer_whose_worker_died_still_signs_and_starts_another() -> None:
    signer = dkim.Signer(processes=1)
    signer.replace([dataclasses.replace(RSA, state=dkim.KeyState.ACTIVE)])
    try:
        await signer.start()
        [worker] = signer.pids()
        os.kill(worker, signal.SIGKILL)  # as the OOM killer would
        signed = await signer.sign(PLAIN, [RSA])  # on the loop this time: the worker is gone
        assert verify(signed, RSA) == [True]
        signed = await signer.sign(PLAIN, [RSA])  # in a new worker
        assert verify(signed, RSA) == [True]
        [again] = signer.pids()
        assert again != worker
    finally:
        await signer.close()


def test_a_signer_signs_in_its_processes_on_uvloop_as_in_the_daemon() -> None:
    """uvloop's subprocess transports are of asyncio's shape, not its classes."""

    async def signing() -> tuple[bytes, list[int]]:
        signer = dkim.Signer(processes=1)
        try:
            return await signer.sign(PLAIN, [RSA]), signer.pids()
        finally:
            await signer.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        signed, workers = runner.run(signing())
    assert len(workers) == 1
    assert gone(workers[0])
    assert verify(signed, RSA) == [True]


def test_the_signed_fields_are_the_recommended_ones_present_and_from_is_over_signed() -> None:
    signed = dkim.sign(MULTIPART, [RSA])
    h = dkimpy.DKIM(signed)
    h.verify(dnsfunc=lambda name, timeout=5: RSA.record().encode())
    assert h.include_headers == (
        b"from", b"to", b"subject", b"mime-version", b"content-type", b"list-unsubscribe", b"from"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new"),
    [(b"Subject: Hello", b"Subject: Hellp"), (b"see you.", b"see you!"), (b"To: someone", b"To: someonf")],
)
def test_tampering_breaks_the_signature(old: bytes, new: bytes) -> None:
    signed = dkim.sign(PLAIN, [RSA])
    assert verify(signed.replace(old, new), RSA) == [False]


def test_a_from_added_later_breaks_the_signature() -> None:
    signed = dkim.sign(PLAIN, [RSA])
    assert verify(signed.replace(b"To: ", b"From: evil@example.org\r\nTo: ", 1), RSA) == [False]


def test_the_from_domain() -> None:
    assert dkim.from_domain(PLAIN) == "example.com"
    assert dkim.from_domain(b"From: x@Sub.Example.ORG\r\n\r\n") == "sub.example.org"
    assert dkim.from_domain(b"Subject: none\r\n\r\n") is None
    assert dkim.from_domain(b"To: a@b.example\r\nfrom: Shop\r\n <news@Shop.example> \r\n\r\nFrom: x@y.example\r\n") == (
        "shop.example"  # folded, any case, the header's only
    )


def test_bad_names_are_refused() -> None:
    with pytest.raises(Exception, match="is not a domain name"):
        dkim.generate("not a domain", "s1", Algorithm.RSA2048)


@pytest.mark.parametrize(
    "body",
    [b"", b"\r\n", b"a  b\t\tc \r\n\r\n\r\n", b"x\r\n \r\n", b"  lead\r\nend  ", b"a\r\n\r\n b \t\r\n",
     b"\t\r\n\t", b"abc", b"a \r\n \r\n", b"caf\xc3\xa9 \t \xe2\x82\xac\r\n"],
)  # fmt: skip
def test_the_relaxed_body_equals_dkimpys(body: bytes) -> None:
    assert dkim.relaxed_body(body) == RELAXED.canonicalize_body(body)


def test_a_long_list_of_signed_fields_folds_between_names() -> None:
    many = b"".join(b"%s: x\r\n" % name for name in dkim.SIGNED) + b"\r\nbody\r\n"
    signed = dkim.sign(many, [RSA])
    assert verify(signed, RSA) == [True]
    field = signed[: len(signed) - len(many)]
    assert all(len(line) <= 78 for line in field.split(b"\r\n"))


def test_the_fields_are_selected_as_dkimpy_selects_them() -> None:
    fields = [(b"From", b"a"), (b"Subject", b"1"), (b"from", b"b"), (b"To", b"x"), (b"Subject", b"2")]
    names = [b"from", b"subject", b"to", b"from", b"subject", b"from", b"cc"]
    assert dkim._select(fields, names) == dkimpy.select_headers(fields, names)


def test_a_free_selector_for_a_second_key_in_a_month() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    assert dkim.free_selector(Algorithm.RSA2048, now, set()) == "mtad-202611"
    assert dkim.free_selector(Algorithm.RSA2048, now, {"mtad-202611", "mtad-202611-2"}) == "mtad-202611-3"
    assert dkim.free_selector(Algorithm.ED25519, now, {"mtad-202611"}) == "mtad-202611-ed"
