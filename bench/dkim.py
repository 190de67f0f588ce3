"""DKIM signing per message: mtad.signing.dkim against plain dkimpy, in the same run.

Messages of 2 KB and 50 KB (a dozen header fields, a text body), each signed
N times in a row by `mtad.dkim.sign` with a key parsed once, and by
`dkim.sign` (dkimpy) given the same key as PEM, as a caller that keeps no parsed
key must. RSA-2048 and Ed25519 (dkimpy signs Ed25519 with PyNaCl). Every
signature made is checked once by dkimpy's verifier before the timing. Time per
message: the wall time of the N signatures / N (after 20 not timed), min / median / max
over the runs; the two signers alternate run by run.

mtad signs that way (`dkim.sign`, one signature after another on one thread) only
with `[dkim] processes = 0`. The daemon signs as delivery does, through `Signer.sign`
with PROCESSES worker processes: the RSA operation runs in them while the event
loop goes on. That is measured too: on uvloop, IN_FLIGHT
sends each signing its share of the N messages one after another, time per message
= wall time / N. This is the CPU the machine spends per message when delivery signs
many messages at once, not the time one signature takes (the first column).
Goal (issue 6): mtad under 0.5 ms per 2 KB message and under 1.5 ms per 50 KB
message with RSA-2048.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import dkim as dkimpy
import uvloop
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

from bench import report
from mtad.signing import dkim

ERRORS = (dkimpy.DKIMException, ValueError)
SIZES = (2_000, 50_000)
SIGNATURES, QUICK_SIGNATURES = 300, 50
RUNS, QUICK_RUNS = 5, 1
WARM_UP = 20  # signatures before each timed run, not counted
GOALS = {2_000: 0.5, 50_000: 1.5}  # ms per message, RSA-2048
PROCESSES = 1  # [dkim] processes: "auto" on 2 cores
IN_FLIGHT = 32  # sends signing at once on the event loop


@dataclass
class Cell:
    size: int
    algorithm: dkim.Algorithm
    signer: str  # "mtad", "mtad-processes" or "dkimpy"
    ms: list[float] = field(default_factory=list)


def message(size: int) -> bytes:
    head = (
        b"From: Shop <news@example.com>\r\nTo: someone@example.net\r\nSubject: Your order has shipped\r\n"
        b"Date: Mon, 30 Nov 2026 02:00:00 +0000\r\nMessage-ID: <1@example.com>\r\nMIME-Version: 1.0\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n"
        b"List-Unsubscribe: <https://example.com/u/1>\r\nX-Campaign: 42\r\n\r\n"
    )
    line = b"Thank you for your order.  It is on its way and should arrive soon.\r\n"
    return head + line * max(1, (size - len(head)) // len(line))


def dkimpy_key(key: dkim.Key) -> bytes:
    if key.algorithm is dkim.Algorithm.RSA2048:
        return key.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    raw = key.private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                    serialization.NoEncryption())  # fmt: skip
    return base64.b64encode(raw)


def check(signed: bytes, key: dkim.Key) -> None:
    records = {f"{key.name}.".encode(): key.record().encode()}
    if not dkimpy.DKIM(signed).verify(dnsfunc=lambda name, timeout=5: records.get(name, b"")):
        raise ValueError(f"a {key.algorithm.value} signature did not verify")


def measure(cells: list[Cell], keys: list[dkim.Key], count: int, runs: int) -> None:
    for key in keys:
        pem = dkimpy_key(key)
        algorithm = b"rsa-sha256" if key.algorithm is dkim.Algorithm.RSA2048 else b"ed25519-sha256"
        for size in SIZES:
            body = message(size)
            check(dkim.sign(body, [key]), key)
            field = dkimpy.sign(body, key.selector.encode(), key.domain.encode(), pem,
                                canonicalize=(b"relaxed", b"relaxed"), signature_algorithm=algorithm)  # fmt: skip
            check(field + body, key)  # dkimpy returns the field alone
            mine, theirs = Cell(size, key.algorithm, "mtad"), Cell(size, key.algorithm, "dkimpy")
            threaded = Cell(size, key.algorithm, "mtad-processes")
            for _ in range(runs):
                for _ in range(WARM_UP):  # after dkimpy's loop (big-integer arithmetic): caches warm again
                    dkim.sign(body, [key])
                started = time.perf_counter()
                for _ in range(count):
                    dkim.sign(body, [key])
                mine.ms.append((time.perf_counter() - started) / count * 1000)
                threaded.ms.append(uvloop.run(in_processes(body, key, count)))
                started = time.perf_counter()
                for _ in range(max(1, count // 10)):  # dkimpy's RSA is slow: a tenth as many
                    dkimpy.sign(body, key.selector.encode(), key.domain.encode(), pem,
                                canonicalize=(b"relaxed", b"relaxed"), signature_algorithm=algorithm)  # fmt: skip
                theirs.ms.append((time.perf_counter() - started) / max(1, count // 10) * 1000)
            cells += [mine, threaded, theirs]
            print(f"  {key.algorithm.value:8} {report.size_label(size):>6}  mtad {statistics.median(mine.ms):.3f} ms"
                  f"  in processes {statistics.median(threaded.ms):.3f} ms"
                  f"  dkimpy {statistics.median(theirs.ms):.3f} ms", flush=True)  # fmt: skip


async def in_processes(body: bytes, key: dkim.Key, count: int) -> float:
    """ms per message through Signer.sign with PROCESSES processes, IN_FLIGHT sends at once."""
    signer = dkim.Signer(processes=PROCESSES)

    async def send(share: int) -> None:
        for _ in range(share):
            await signer.sign(body, [key])

    try:
        await asyncio.gather(*(send(2) for _ in range(PROCESSES)))  # the processes started
        started = time.perf_counter()
        await asyncio.gather(*(send(count // IN_FLIGHT + (i < count % IN_FLIGHT)) for i in range(IN_FLIGHT)))
        return (time.perf_counter() - started) / count * 1000
    finally:
        await signer.close()


def private_op(key: dkim.Key, count: int, runs: int) -> list[float]:
    """The RSA-2048 private-key operation alone (the floor of a signature), ms each."""
    digest = hashlib.sha256(b"x").digest()
    assert isinstance(key.private, rsa.RSAPrivateKey)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for _ in range(count):
            key.private.sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))
        times.append((time.perf_counter() - started) / count * 1000)
    return times


def table(cells: list[Cell]) -> str:
    rows = []
    for mine, threaded, theirs in zip(cells[::3], cells[1::3], cells[2::3], strict=True):
        faster = statistics.median(theirs.ms) / statistics.median(mine.ms)
        rows.append([mine.algorithm.value, report.size_label(mine.size), spread(mine), spread(threaded),
                     spread(theirs), f"{faster:.1f}x"])  # fmt: skip
    return report.markdown_table(
        ["key", "message", "mtad, one after another: ms min / median / max",
         f"mtad, delivery's way ({PROCESSES} process(es), {IN_FLIGHT} in flight): ms per message",
         "dkimpy ms min / median / max", "mtad (one after another) faster"], rows,
    )  # fmt: skip


def spread(cell: Cell) -> str:
    return " / ".join(f"{v:.3f}" for v in (min(cell.ms), statistics.median(cell.ms), max(cell.ms)))


def goals(cells: list[Cell]) -> tuple[str, bool]:
    """The goal per way of signing (medians), RSA-2048."""
    sentences, met = [], True
    for signer, how in (("mtad-processes", "as the daemon signs"), ("mtad", "one signature after another")):
        lines = []
        for cell in cells:
            if cell.signer == signer and cell.algorithm is dkim.Algorithm.RSA2048:
                median = statistics.median(cell.ms)
                ok = median < GOALS[cell.size]
                met &= ok
                lines.append(f"{report.size_label(cell.size)}: {median:.3f} ms against under {GOALS[cell.size]} ms "
                             f"({'met' if ok else 'not met'})")  # fmt: skip
        sentences.append(f"Goal, RSA-2048 per message, {how}: " + "; ".join(lines) + ".")
    return " ".join(sentences), met


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    count = QUICK_SIGNATURES if args.quick else SIGNATURES
    runs = args.runs or (QUICK_RUNS if args.quick else RUNS)
    versions["dkimpy"] = getattr(dkimpy, "__version__", "?")
    keys = [dkim.generate("example.com", "bench", dkim.Algorithm.RSA2048),
            dkim.generate("example.com", "bench-ed", dkim.Algorithm.ED25519)]  # fmt: skip
    cells: list[Cell] = []
    print(f"{runs} runs of {count} signatures per cell (dkimpy: {max(1, count // 10)})", flush=True)
    measure(cells, keys, count, runs)
    floor = private_op(keys[0], count, runs)
    summary, _ = goals(cells)
    summary += (f" The RSA-2048 private-key operation alone (cryptography, OpenSSL) takes "
                f"{min(floor):.3f} / {statistics.median(floor):.3f} / {max(floor):.3f} ms here (min / median / max): "
                f"the floor of any RSA signature on this machine.")  # fmt: skip
    md = table(cells)
    print(md)
    print(summary)
    method = (__doc__ or "").split("\n\n", 1)[1].strip().replace(" N ", f" {count} ")
    body = f"### Method\n\n{method}\n\n{runs} runs per cell, one process, keys generated for the run.\n\n"
    body += f"### Results\n\n{md}\n\n{summary}"
    return body, [], True
