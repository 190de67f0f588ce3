"""The command line: `mtad run` and the tools (`mtad --help` lists them).

Every command but `sink`, `blast`, `accounts key` and `bounces explain` (which
reads one only when given) takes --config PATH (default:
conf/mtad.toml when present, else /etc/mtad/mtad.toml) and works while the daemon
runs, the embedded PostgreSQL included: a command attaches to the daemon's server
(waiting at most [database] wait while the daemon starts it again), or with no
daemon starts it and stops it again when it is done. A command imports what it
needs when it runs. Exit status: 0 done, 1 failed, 2 bad usage or config.

One module per command group adds its subcommands beside their handlers
(`register`), each a `common.Command` that says what it is given; `common` holds
what the groups share; this module builds the parser from them and runs the
command parsed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mtad import __version__
from mtad.base import errors
from mtad.cli import (
    accounts,
    blast,
    bounces,
    buckets,
    campaigns,
    common,
    dkim,
    events,
    node,
    queue,
    reputation,
    sendmail,
    sink,
    suppress,
    suspensions,
    tenants,
    tls,
    webhooks,
)

# The command groups, in the order `mtad --help` lists their commands, each with the
# commands it adds at the top: main() builds the parser of the command given alone.
GROUPS = {
    node: ("run", "migrate", "check-config", "reload"), sendmail: ("sendmail",), sink: ("sink",),
    blast: ("blast",), suspensions: ("suspend", "resume", "suspensions"), tenants: ("tenants",),
    campaigns: ("campaigns",), tls: ("tls",), reputation: ("reputation",), queue: ("queue",),
    suppress: ("suppress",), webhooks: ("webhooks",), events: ("events",), bounces: ("bounces",),
    dkim: ("dkim",), buckets: ("buckets",), accounts: ("accounts",),
}  # fmt: skip


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line: the top-level options, and each group's commands (only the
    group of `command` when it names one: building every group's parsers takes 10 ms)."""
    top = argparse.ArgumentParser(
        prog="mtad", description="mtad: a mail transfer agent that keeps its spool in PostgreSQL."
    )
    top.add_argument("--config", type=Path, metavar="PATH", help=common.CONFIG_HELP)
    top.add_argument("--version", action="version", version=f"mtad {__version__}")
    commands = common.Commands(top.add_subparsers(title="commands", metavar="COMMAND"), common.config_option())
    wanted = [group for group, names in GROUPS.items() if command in names] or list(GROUPS)
    for group in wanted:
        group.register(commands)
    return top


def _command(given: Sequence[str]) -> str | None:
    """The command named in the arguments: the first word that is not an option (nor
    --config's value)."""
    words = iter(given)
    for word in words:
        if word == "--config":
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, load what the command needs and run it; its exit status.
    What a command raises is said here, once: `mtad: ...` on stderr, exit 2 for a
    UsageError, 1 for any other mtad error."""
    given = list(sys.argv[1:] if argv is None else argv)
    handed = sendmail.arguments(given)
    if handed is not None:  # sendmail's options, not argparse's
        return sendmail.handed(handed)
    top = parser(_command(given))
    args = top.parse_args(given)
    command: common.Command | None = getattr(args, "command", None)
    if command is None:
        top.print_help()
        return common.EXIT_USAGE
    try:
        return _call(command, args)
    except errors.UsageError as exc:
        print(f"mtad: {exc}", file=sys.stderr)
        return common.EXIT_USAGE
    except errors.MtadError as exc:
        print(f"mtad: {exc}", file=sys.stderr)
        return common.EXIT_FAILED
    except KeyboardInterrupt:
        return common.EXIT_FAILED


def _call(command: common.Command, args: argparse.Namespace) -> int:
    """The command called with what it is given: async ones in their own loop."""
    if command.config is common.Config.NONE:  # needs no configuration, nor a database
        return int(command.run(args))
    if command.config is common.Config.OPTIONAL and args.config is None:
        return int(command.run(args, None))
    try:
        settings = common.load(args.config, whole=command.whole(args))
    except errors.ConfigError as exc:
        print(f"mtad: {args.config or 'configuration'}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return common.EXIT_USAGE
    if command.sync:
        return int(command.run(args, settings))
    import asyncio

    from mtad.base import log

    log.configure("console", "warning", stream=sys.stderr)
    return int(asyncio.run(command.run(args, settings)))


def entry_point() -> None:
    sys.exit(main())
