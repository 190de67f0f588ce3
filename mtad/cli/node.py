"""The node's commands: `mtad run`, `migrate`, `check-config`, `reload`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config

# reload looks for the node's answer every SOON seconds for its first SOON_FOR seconds (a
# node answers within a few tens of milliseconds), then every LATER seconds.
SOON, SOON_FOR, LATER = 0.01, 0.25, 0.1


def register(commands: common.Commands) -> None:
    def add(name: str, command: common.Command, help: str) -> argparse.ArgumentParser:
        return commands.add(name, command, help=help, description=help)

    add("run", common.Command(run, common.Config.WHOLE, sync=True),
        "Run the daemon in the foreground until SIGTERM or SIGINT.")  # fmt: skip
    add("migrate", common.Command(migrate), "Apply pending schema migrations (mtad run does this at start too).")
    add("check-config", common.Command(check_config, common.Config.WHOLE, sync=True),
        "Check the configuration and print every problem at once.")  # fmt: skip
    reloading = add("reload", common.Command(reload, common.Config.WHOLE), "Have the node running here read its "
                    "configuration again (SIGHUP), after checking it: limits, pools, routes, tenants, account pools. "
                    "Sessions, leases and the buckets' rates stay; what needs a restart is named.")  # fmt: skip
    reloading.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                           help="how long to wait for the node to say it reloaded (default 30)")  # fmt: skip


def run(args: argparse.Namespace, settings: config.Settings) -> int:
    """Run the daemon in the foreground until SIGTERM or SIGINT."""
    import structlog
    import uvloop

    from mtad import daemon
    from mtad.base import log

    log.configure(settings.log.format, settings.log.level)
    logger = structlog.get_logger("mtad.cli")
    try:
        try:
            uvloop.run(daemon.Daemon(settings).run())
        except BaseExceptionGroup as group:  # raised inside the daemon's TaskGroup: what it holds
            raise _alone(group) from None
    except errors.MtadError as exc:
        logger.error("startup_failed", error=str(exc))
        return common.EXIT_FAILED
    except OSError as exc:
        logger.error("startup_failed", error=f"{exc.strerror or exc} ({exc.filename or 'listen address'})")
        return common.EXIT_FAILED
    return common.EXIT_OK


def _alone(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one mtad or OS error a group holds (nested or not), else the group itself."""
    found = group.subgroup(lambda exc: isinstance(exc, (errors.MtadError, OSError)))
    leaves: list[BaseException] = []
    pending: list[BaseException] = [found] if found is not None else []
    while pending:
        exc = pending.pop()
        if isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        else:
            leaves.append(exc)
    return leaves[0] if len(leaves) == 1 else group


async def reload(args: argparse.Namespace, settings: config.Settings) -> int:
    """Signal the node running here with this configuration to read it again (it was
    checked here first: a bad file is refused before any node sees it), and say what
    the node made of it."""
    import asyncio
    import os
    import signal
    import socket
    import time

    from mtad.spool import nodes

    node = settings.node.id
    async with common.spool(settings) as opened:
        found = await nodes.reload_of(opened.database, node)
        if found is None or found["hostname"] != socket.gethostname():
            print(f"mtad: no node {node} has run on this host ({socket.gethostname()})", file=sys.stderr)
            return common.EXIT_FAILED
        before = found["reloaded_at"]
        try:
            os.kill(found["pid"], signal.SIGHUP)
        except ProcessLookupError:
            print(f"mtad: node {node} (pid {found['pid']}) is not running", file=sys.stderr)
            return common.EXIT_FAILED
        signalled = time.monotonic()
        deadline = signalled + args.wait
        while (found := await nodes.reload_of(opened.database, node)) is not None and found["reloaded_at"] == before:
            if time.monotonic() > deadline:
                print(f"mtad: node {node} (pid {found['pid']}) did not say it reloaded within {args.wait:g} s",
                      file=sys.stderr)  # fmt: skip
                return common.EXIT_FAILED
            await asyncio.sleep(SOON if time.monotonic() - signalled < SOON_FOR else LATER)
    assert found is not None
    result = found["reload_result"] or {}
    if not result.get("ok"):
        print(f"mtad: node {node} refused the configuration; it runs with the one it had:", file=sys.stderr)
        for problem in result.get("problems", []):
            print(f"  {problem}", file=sys.stderr)
        return common.EXIT_FAILED
    print(f"node {node} (pid {found['pid']}) reloaded its configuration")
    for key in result.get("restart", []):
        print(f"  changed, but taken up only at a restart: {key}")
    return common.EXIT_OK


def check_config(args: argparse.Namespace, settings: config.Settings) -> int:
    """Say the configuration is fine (main() has printed every problem otherwise)."""
    db_desc = "dsn" if settings.database.dsn else f"embedded PostgreSQL in {settings.database.data_dir}"
    listen = ", ".join(str(a) for a in settings.submission.listen)
    print(f"{settings.source}: ok (database: {db_desc}; submission: {listen})")
    return common.EXIT_OK


async def migrate(args: argparse.Namespace, settings: config.Basics) -> int:
    """Apply pending schema migrations (open_spool applies them) and list the schema version."""
    from mtad.db import migrate as migrations

    async with common.spool(settings):
        versions = migrations.available()
    print(f"schema at version {versions[-1].version} ({versions[-1].name})")
    return common.EXIT_OK
