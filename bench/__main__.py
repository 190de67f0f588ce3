"""`python -m bench [--only PARTS] [--quick] ...`: mtad against Postfix, see bench/__init__.py.

The parts run one after the other, each with its own servers in a temp dir (started
and stopped by the part): accept, inject, delivery, sessions, memory, shaping, accounts,
relay, dkim, signed, retention, feedback, webhooks, bounces, cli, page, nodes. Each prints
its table, and bench/RESULTS.md gets one section per part (a part left out with --only keeps its old section). Exit
status: 0 when every measurement succeeded, 1 when one failed, 2 when the benchmark
cannot run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench import (
    accept,
    accounts,
    bounces,
    cli,
    client,
    delivery,
    dkim,
    feedback,
    inject,
    nodes,
    opendkim,
    outbound,
    page,
    postfix,
    relay,
    report,
    retention,
    shaping,
    signed,
    spool_memory,
    webhooks,
)

RESULTS = Path(__file__).parent / "RESULTS.md"

# key -> (title in RESULTS.md, run(args, root, versions) -> (body, notes, ok), its errors)
Run = Callable[[argparse.Namespace, Path, dict[str, str]], tuple[str, list[str], bool]]
PARTS: dict[str, tuple[str, Run, tuple[type[Exception], ...]]] = {
    "accept": ("Durable accept throughput: mtad and Postfix", accept.run, accept.ERRORS),
    "inject": ("HTTP injection beside SMTP submission: durable accept on one node", inject.run, inject.ERRORS),
    "delivery": ("Delivery end to end: mtad and Postfix to the same sink", delivery.run, delivery.ERRORS),
    "sessions": ("Outbound sessions held open by one process", outbound.run, outbound.ERRORS),
    "memory": ("Memory per queued delivery", spool_memory.run, spool_memory.ERRORS),
    "shaping": ("The cost of traffic shaping, and the release of a backlog", shaping.run, shaping.ERRORS),
    "accounts": ("Reserve before send: mailbox reservations per second", accounts.run, accounts.ERRORS),
    "relay": ("Relay through sending mailboxes: the cost of the mailbox layer", relay.run, relay.ERRORS),
    "dkim": ("DKIM signing per message: mtad and dkimpy", dkim.run, dkim.ERRORS),
    "signed": ("Delivery end to end, DKIM-signed: mtad and Postfix + OpenDKIM", signed.run, signed.ERRORS),
    "retention": ("Retention: messages pruned while accept goes on", retention.run, retention.ERRORS),
    "feedback": (
        "Feedback: bounces applied per second, and accept with a million suppressed",
        feedback.run,
        feedback.ERRORS,
    ),
    "webhooks": (
        "Webhooks: events delivered per second, and delivery with webhooks and windows on and off",
        webhooks.run,
        webhooks.ERRORS,
    ),
    "bounces": ("Reading real bounces: mtad's verdicts against Sisimai's", bounces.run, bounces.ERRORS),
    "cli": ("The command line: each command's time as a whole process", cli.run, cli.ERRORS),
    "page": ("The status page with a million queued and 100 campaigns", page.run, page.ERRORS),
    "nodes": ("The cost of scaling out: N nodes on one PostgreSQL", nodes.run, nodes.ERRORS),
}


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"values must be positive: {text!r}")
    return values


def _processes(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(","))
    if not values or not all(v == "auto" or v.isdigit() for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f'distinct values "auto" or whole numbers: {text!r}')
    return values


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(part.strip() for part in text.split(","))
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown parts {unknown}: choose from {', '.join(PARTS)}")
    return parts


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", type=_parts, default=tuple(PARTS), help=f"parts to run (default all: {','.join(PARTS)})"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke test: 3 runs, a fifth of the messages, ...")
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="runs per cell (default: accept 5, inject 5, delivery 3, shaping 5, accounts 3, relay 5, signed 3, "
        "nodes 3; --quick 3, those two 1)",
    )
    parser.add_argument("--skip-postfix", action="store_true", help="measure mtad alone (no ratio)")
    parser.add_argument("--tmpdir", type=Path, default=None, help="where the spools go (default: the system's)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="Markdown file to write (default %(default)s)")
    parser.add_argument("--no-results", action="store_true", help="print the tables only")
    group = parser.add_argument_group("accept")
    group.add_argument(
        "--sizes", type=_ints, default=accept.SIZES, help="message body sizes in octets (default 1024,20480,102400)"
    )
    group.add_argument("--sessions", type=_ints, default=accept.SESSIONS, help="concurrent sessions (default 1,10,50)")
    group.add_argument("--messages", type=int, default=None, help="messages per burst in every cell")
    group.add_argument(
        "--no-reference", action="store_true", help="leave out the bare-aiosmtpd reference (stores nothing)"
    )
    group = parser.add_argument_group("inject", "(it takes --sizes and --messages too)")
    group.add_argument(
        "--inject-concurrency",
        type=_ints,
        default=inject.CONCURRENCY,
        help="SMTP sessions and HTTP requests at once (default 10,50)",
    )
    group.add_argument(
        "--inject-processes",
        type=_processes,
        default=inject.PROCESSES,
        help="[submission] processes of each node measured, a node each (default auto,0)",
    )
    group = parser.add_argument_group("delivery")
    group.add_argument(
        "--recipients", type=_ints, default=delivery.RECIPIENTS, help="recipients per message (default 1,5)"
    )
    group.add_argument(
        "--delivery-messages",
        type=int,
        default=None,
        help=f"messages per run (default {delivery.MESSAGES:,}; relay {relay.MESSAGES:,})",
    )
    group.add_argument(
        "--concurrency",
        type=int,
        default=delivery.CONCURRENCY,
        help="outbound sessions to the sink, mtad and Postfix alike (default %(default)s)",
    )
    group = parser.add_argument_group("signed", "(it takes --recipients and --concurrency too)")
    group.add_argument(
        "--signed-messages",
        type=int,
        default=None,
        help="messages per run in every cell (default: "
        + ", ".join(f"{report.size_label(size)} {count:,}" for size, count in signed.MESSAGES.items())
        + "; --quick a fifth)",
    )
    group = parser.add_argument_group("sessions and memory")
    group.add_argument(
        "--outbound-sessions", type=int, default=None, help=f"sessions to hold open (default {outbound.TARGET:,})"
    )
    group.add_argument(
        "--spool-deliveries",
        type=int,
        default=None,
        help=f"deliveries in the spool (default {spool_memory.DELIVERIES:,})",
    )
    group = parser.add_argument_group("shaping", "(its end-to-end runs take --delivery-messages and --concurrency)")
    group.add_argument(
        "--decisions", type=int, default=None, help=f"take/done pairs per run (default {shaping.DECISIONS:,})"
    )
    group.add_argument(
        "--release-deliveries",
        type=int,
        default=None,
        help=f"deferred deliveries due at once (default {shaping.DELIVERIES:,})",
    )
    group.add_argument(
        "--release-seconds",
        type=int,
        default=None,
        help=f"how long the release is watched (default {shaping.SECONDS} s)",
    )
    group = parser.add_argument_group("retention")
    group.add_argument(
        "--retention-messages",
        type=int,
        default=None,
        help=f"messages through mtad, pruned as they pass the retention (default {retention.MESSAGES:,})",
    )
    group = parser.add_argument_group("feedback")
    group.add_argument("--dsns", type=int, default=None, help=f"bounce reports per run (default {feedback.DSNS:,})")
    group.add_argument(
        "--suppressed",
        type=int,
        default=None,
        help=f"suppressed addresses imported (default {feedback.SUPPRESSED:,})",
    )
    group = parser.add_argument_group("webhooks", "(its on/off runs take --delivery-messages)")
    group.add_argument(
        "--webhook-messages",
        type=int,
        default=None,
        help=f"messages whose events make a throughput run's backlog, 2 each (default {webhooks.MESSAGES:,})",
    )
    group.add_argument(
        "--batches", type=_ints, default=webhooks.BATCHES, help="the endpoint's batch, a cell each (default 1,100)"
    )
    bounces.add_arguments(parser)
    nodes.add_arguments(parser)
    args = parser.parse_args(argv)
    if "bounces" in args.only and (args.bounce_corpus is None or args.bounce_tables is None):
        if "--only" in " ".join(argv):
            parser.error("the bounces part needs --bounce-corpus DIR and --bounce-tables DIR (see bench/bounces.py)")
        args.only = tuple(part for part in args.only if part != "bounces")  # left out unless given its corpus
    names = ("runs", "messages", "delivery_messages", "outbound_sessions", "spool_deliveries", "decisions",
             "retention_messages", "dsns", "suppressed", "webhook_messages", "signed_messages", "nodes_messages",
             "idle_seconds")  # fmt: skip
    for name in (*names, "release_deliveries", "release_seconds"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.concurrency < 1:
        parser.error("--concurrency must be positive")
    return args


def cannot_run(args: argparse.Namespace) -> str | None:
    """Why the chosen parts cannot run here, or None."""
    needs_postfix = not args.skip_postfix and {"accept", "delivery", "signed"} & set(args.only)
    if client.smtp_source() is None and not set(args.only) <= {"bounces", "cli", "page"}:
        return (
            "smtp-source and smtp-sink are missing. They come with Debian's postfix package; `make bench` installs it\n"
            "when run as root, or: DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postfix"
        )
    why_not = postfix.missing() if needs_postfix else None
    if not why_not and not args.skip_postfix and "signed" in args.only:
        why_not = opendkim.missing()
    return f"{why_not} (or measure mtad alone with --skip-postfix)" if why_not else None


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    why_not = cannot_run(args)
    if why_not:
        print(f"bench: {why_not}", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so that every server is stopped and the temp dirs removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    command = shlex.join([_shown(sys.executable), "-m", "bench", *argv])
    root = Path(tempfile.mkdtemp(prefix="mtad-bench-", dir=args.tmpdir))
    root.chmod(0o755)  # Postfix's and PostgreSQL's own users work below it
    versions: dict[str, str] = {}
    sections: dict[str, str] = {}
    failed = False
    try:
        for key in (key for key in PARTS if key in args.only):
            title, run, errors = PARTS[key]
            print(f"\n== {key}: {title}", flush=True)
            part_started = time.monotonic()
            date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
            try:
                body, notes, ok = run(args, root / key, versions)
            except errors as exc:
                print(f"bench: {key}: {exc}", file=sys.stderr)
                body, notes, ok = f"Did not run to the end: {exc}", [], False
            failed |= not ok
            for note in notes:
                print(f"note: {note}")
            seconds = time.monotonic() - part_started
            print(f"{key} took {seconds / 60:.1f} min", flush=True)
            sections[key] = report.section_md(
                title, date=date, command=command, seconds=seconds, body=body, notes=notes
            )
        machine = report.machine(root, versions)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if root.exists():
            print(f"note: could not remove all of {root}", file=sys.stderr)
    print(f"\nall parts took {(time.monotonic() - started) / 60:.1f} min")
    if not args.no_results:
        report.write_results(args.results, machine, sections)
        print(f"wrote {args.results}")
    return 1 if failed else 0


def _shown(path: str) -> str:
    """The interpreter as typed from the repository root, when it is the project's venv."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
