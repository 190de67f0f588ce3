"""What the command groups share: how a command is registered and what it is given,
the configuration and the spool opened for a tool, an operator's change held on every
node, the printing of rows, and the argument types of times and durations.

Imports no domain module at load: each helper imports what it needs when called.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtad.base import errors

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from mtad import config, db
    from mtad.admin import names
    from mtad.base import vault
    from mtad.db import opening
    from mtad.spool import controls

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CONFIG_HELP = "configuration file (default: conf/mtad.toml when present, else /etc/mtad/mtad.toml)"
# A provider group, as suspend and queue reroute take it (mtad.admin.names.group).
GROUP_HELP = "a provider group configured (google, relay:HOST:PORT, accounts:POOL) or routed to (mx:HOST,...) only"
# The parser's choices, spelled here so that parsing imports no domain module
# (tests/unit/test_cli_imports.py holds them equal to the enum).
EVENT_KINDS = (
    "received", "delivered", "deferred", "bounced", "failed", "cancelled", "requeued", "unknown", "held",
    "account_state", "account_failure", "account_bounce", "account_pool", "dkim_key", "complained", "auth_failure",
    "unsubscribed", "replied", "auto_replied", "opened", "clicked", "tenant_paused", "tenant_resumed",
    "tenant_graduated", "campaign_paused", "campaign_resumed", "campaign_cancelled",
)  # events.Kind  # fmt: skip


# --- registration -----------------------------------------------------------------


class Config(enum.Enum):
    """What a command is given besides its arguments."""

    NONE = "none"  # nothing: called as run(args)
    OPTIONAL = "optional"  # the whole configuration when --config is given, else None
    BASICS = "basics"  # the basics a tool needs (config.load_basics): it works while, say, a TLS file is missing
    WHOLE = "whole"  # the whole configuration (config.load)


# The options that name what only the whole configuration makes (a source pool or address,
# an account pool, a provider group).
CONFIGURED_NAMES = ("provider", "pool", "source")


@dataclass(frozen=True)
class Command:
    """A subcommand's handler and how main() calls it: with its configuration, in
    asyncio.run unless `sync` (it runs its own loop, or none)."""

    run: Callable[..., Any]
    config: Config = Config.BASICS
    sync: bool = False
    names: bool = False  # loads the whole configuration when one of CONFIGURED_NAMES is given

    def whole(self, args: argparse.Namespace) -> bool:
        """Whether main() loads the whole configuration for these arguments."""
        if self.config in (Config.WHOLE, Config.OPTIONAL):
            return True
        return self.names and any(getattr(args, key, None) is not None for key in CONFIGURED_NAMES)


class Commands:
    """The subcommands of one parser; each takes --config after its name too."""

    def __init__(self, action: argparse._SubParsersAction[argparse.ArgumentParser], option: argparse.ArgumentParser):
        self._action = action
        self._option = option  # the parent parser that adds --config

    def add(self, name: str, command: Command | None, /, *, config: bool = True, **kw: Any) -> argparse.ArgumentParser:
        """A subcommand (argparse's add_parser keywords); without `config`, it takes no --config."""
        sub = self._action.add_parser(name, parents=[self._option] if config else [], **kw)
        if command is not None:
            sub.set_defaults(command=command)
        return sub

    def group(self, name: str, help: str, **subparsers: Any) -> Commands:
        """A command of subcommands; `subparsers` are add_subparsers' keywords."""
        parser = self.add(name, None, help=help)
        return Commands(parser.add_subparsers(**subparsers), self._option)


def config_option() -> argparse.ArgumentParser:
    """The parent parser of every subcommand: --config after the command too; SUPPRESS
    keeps a value given before it."""
    option = argparse.ArgumentParser(add_help=False)
    option.add_argument("--config", type=Path, metavar="PATH", help=CONFIG_HELP, default=argparse.SUPPRESS)
    return option


# --- the configuration and the spool -----------------------------------------------


def load(path: Path | None, *, whole: bool) -> config.Settings | config.Basics:
    """The whole configuration (run, check-config and what uses delivery's settings), or
    the basics a tool needs: a tool still works while, say, a TLS file is missing."""
    from mtad import config

    if path is None:
        path = config.default_path()
        if path is None:
            candidates = " or ".join(map(str, config.DEFAULT_PATHS))
            raise errors.ConfigError([f"no configuration file: give --config PATH or create {candidates}"])
    return config.load(path) if whole else config.load_basics(path)


def sealer(settings: config.Settings | config.Basics) -> vault.Vault:
    """The key that seals account secrets, DKIM keys and webhook secrets; on the embedded default mtad's
    own, made here when this is the first command to need it."""
    from mtad.base import vault

    keys = settings.accounts
    if keys.make and keys.key_file is not None and vault.make_key(keys.key_file):
        print(f"mtad: made the key that seals account secrets, DKIM keys and webhook secrets: {keys.key_file} "
              "(mode 0600; keep it with the database: without it they do not open)", file=sys.stderr)  # fmt: skip
    return vault.Vault.from_config(keys.key_file, keys.key_env)


def spool(settings: config.Settings | config.Basics) -> AbstractAsyncContextManager[opening.Spool]:
    """The spool, for a tool: the daemon's embedded server attached to (waited for at
    most [database] wait while the daemon starts it again), or with no daemon started
    and stopped again; refused while the daemon of this file runs on another spool."""
    from mtad import config
    from mtad.db import opening

    base = settings.database
    return opening.open_spool(base.dsn, base.data_dir, pool_size=2, wait=base.wait, config=settings.source,
                              defaults=config.DEFAULT_PATHS)  # fmt: skip


def configured(settings: config.Settings | config.Basics) -> names.Configured:
    """The names of the whole configuration (main loads it for a Command with `names`
    given one of CONFIGURED_NAMES)."""
    from mtad import config

    assert isinstance(settings, config.Settings), "Command.whole loads the whole configuration"
    return config.names(settings)


# --- an operator's change, held on every node ---------------------------------------


async def held(database: db.Database, settings: config.Basics) -> controls.Acks:
    """Once an operator's change is committed: until every live node has applied it
    (a few seconds at most)."""
    from mtad.admin import control

    return await control.held(database, 3 * settings.node.heartbeat_interval)


def told(acks: controls.Acks) -> None:
    """The acknowledgements on stdout; a warning on stderr for each live node that did
    not apply the change in time (the command still succeeds: the change is committed)."""
    from mtad.spool import controls

    print(acks.said())
    for line in acks.warnings(controls.WITHIN, datetime.now(UTC)):
        print(f"mtad: warning: {line}", file=sys.stderr)


# --- output ---------------------------------------------------------------------------


def json_line(value: dict[str, Any]) -> str:
    """One JSON object on one line; times in ISO 8601, UUIDs as text."""
    return json.dumps(value, default=text, ensure_ascii=False, separators=(",", ":"))


def text(value: Any) -> str:
    """A value as a table cell: times in ISO 8601, None as '-'."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if value is None:
        return "-"
    return str(value)


def table(rows: list[dict[str, Any]], columns: list[str], *, indent: str = "") -> None:
    """Print rows under their upper-cased column names, each column as wide as its widest cell."""
    cells = [[text(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print(indent + "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        print(indent + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    if not rows:
        print(f"{indent}(none)")


def print_rows(found: list[dict[str, Any]], as_json: bool, columns: list[str]) -> None:
    """One JSON object per row and line, or a table of `columns`."""
    if as_json:
        for row in found:
            print(json_line(row))
    else:
        table(found, columns)


# --- argument types (argparse exits 2 on a bad value) ------------------------------------


def duration(text: str) -> float:
    """--for: a positive duration ("2h")."""
    from mtad.base import values

    try:
        return values.positive_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def after(text: str) -> datetime:
    """--until, --overlap: an ISO date or time, or a duration from now."""
    from mtad.spool import retention

    now = datetime.now(UTC)
    try:
        moment = retention.moment(text, now)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return moment if moment >= now else now + (now - moment)  # a duration means that long from now


def before(text: str) -> datetime:
    """--before, --since: an ISO date or time, or a duration meaning that long ago."""
    from mtad.spool import retention

    try:
        return retention.moment(text, datetime.now(UTC))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
