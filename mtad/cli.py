"""The command line: `mtad run`, `migrate`, `check-config`, `tenants`, `queue`, `dkim`,
`buckets`, `accounts`, `bounces`, `sink`.

Every command but `sink`, `accounts key` and `bounces explain` (which reads one
only when given) takes --config PATH (default:
conf/mtad.toml when present, else /etc/mtad/mtad.toml) and works while the daemon
runs, the embedded PostgreSQL included: a command attaches to the daemon's server
(waiting at most [database] wait while the daemon starts it again), or with no
daemon starts it and stops it again when it is done. A command imports what it
needs when it runs. Exit status: 0 done, 1 failed, 2 bad usage or config.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mtad import __version__
from mtad.base import errors
from mtad.base.lifecycle import State

if TYPE_CHECKING:  # each command imports what it needs when it runs: `mtad --help` imports none
    from contextlib import AbstractAsyncContextManager

    from mtad import config, db
    from mtad.admin import names
    from mtad.base import vault
    from mtad.db import opening
    from mtad.feedback import explain, reports
    from mtad.outbound import routing
    from mtad.signing import dkim
    from mtad.spool import controls

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# The parser's choices, spelled here so that parsing imports no domain module
# (tests/unit/test_cli_imports.py holds them equal to the enums).
ALGORITHMS = ("rsa2048", "ed25519")  # dkim.Algorithm
TLS_MODES = ("starttls", "implicit")  # accounts.Tls
MECHANISMS = ("plain", "login", "xoauth2")  # accounts.Mechanism
REASONS = ("hard_bounce", "soft_bounce", "complaint", "unsubscribe", "manual")  # suppression.Reason
# A provider group, as suspend and queue reroute take it (mtad.admin.names.group).
GROUP_HELP = "a provider group configured (google, relay:HOST:PORT, accounts:POOL) or routed to (mx:HOST,...) only"
EVENT_KINDS = (
    "received", "delivered", "deferred", "bounced", "failed", "cancelled", "requeued", "unknown", "account_state",
    "account_failure", "account_bounce", "account_pool", "dkim_key", "complained", "auth_failure", "unsubscribed",
    "replied", "auto_replied", "tenant_paused", "tenant_resumed", "tenant_graduated",
)  # events.Kind  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    command: Callable[..., Any] | None = getattr(args, "command", None)
    if command is None:
        parser.print_help()
        return EXIT_USAGE
    if command is accounts_key:  # needs no configuration, nor a database
        return accounts_key(args)
    if command is sink_cmd:  # a development tool: no configuration, no database
        return sink_cmd(args)
    if command is bounces_explain and args.config is None:  # the shipped reply table, no spool
        return bounces_explain(args, None)
    try:
        settings = _load(args.config, whole=command in _WHOLE_CONFIG or _names_configured(command, args))
    except errors.ConfigError as exc:
        print(f"mtad: {args.config or 'configuration'}: {len(exc.problems)} problem(s)", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_USAGE
    if command in (check_config, run, bounces_explain):
        return int(command(args, settings))
    import asyncio

    from mtad.base import log

    log.configure("console", "warning", stream=sys.stderr)
    try:
        return int(asyncio.run(command(args, settings)))
    except errors.MtadError as exc:
        print(f"mtad: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED


def _load(path: Path | None, *, whole: bool) -> config.Settings | config.Basics:
    """The whole configuration (run, check-config and what uses delivery's settings), or
    the basics a tool needs: a tool still works while, say, a TLS file is missing."""
    from mtad import config

    if path is None:
        path = config.default_path()
        if path is None:
            candidates = " or ".join(map(str, config.DEFAULT_PATHS))
            raise errors.ConfigError([f"no configuration file: give --config PATH or create {candidates}"])
    return config.load(path) if whole else config.load_basics(path)


def _sealer(settings: config.Settings | config.Basics) -> vault.Vault:
    """The key that seals account secrets, DKIM keys and webhook secrets; on the embedded default mtad's
    own, made here when this is the first command to need it."""
    from mtad.base import vault

    keys = settings.accounts
    if keys.make and keys.key_file is not None and vault.make_key(keys.key_file):
        print(f"mtad: made the key that seals account secrets, DKIM keys and webhook secrets: {keys.key_file} "
              "(mode 0600; keep it with the database: without it they do not open)", file=sys.stderr)  # fmt: skip
    return vault.Vault.from_config(keys.key_file, keys.key_env)


def _spool(settings: config.Settings | config.Basics) -> AbstractAsyncContextManager[opening.Spool]:
    """The spool, for a tool: the daemon's embedded server attached to (waited for at
    most [database] wait while the daemon starts it again), or with no daemon started
    and stopped again; refused while the daemon of this file runs on another spool."""
    from mtad import config
    from mtad.db import opening

    base = settings.database
    return opening.open_spool(base.dsn, base.data_dir, pool_size=2, wait=base.wait, config=settings.source,
                              defaults=config.DEFAULT_PATHS)  # fmt: skip


def _names_configured(command: Callable[..., Any], args: argparse.Namespace) -> bool:
    """Whether the command checks a name the whole configuration makes (a source pool
    or address, an account pool, a provider group): it loads the whole of it then."""
    return command in (suspend_cmd, queue_reroute, queue_ls, accounts_ls) and any(
        getattr(args, key, None) is not None for key in ("provider", "pool", "source"))  # fmt: skip


def _configured(settings: config.Settings | config.Basics) -> names.Configured:
    """The names of the whole configuration (main loads it for the commands that need them)."""
    from mtad import config

    assert isinstance(settings, config.Settings), "_names_configured loads the whole configuration"
    return config.names(settings)


def _did_you_mean(word: str, options: Iterable[str]) -> str:
    from mtad.base import values

    return values.did_you_mean(word, options)


# --- commands -------------------------------------------------------------------


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
        return EXIT_FAILED
    except OSError as exc:
        logger.error("startup_failed", error=f"{exc.strerror or exc} ({exc.filename or 'listen address'})")
        return EXIT_FAILED
    return EXIT_OK


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


async def reload_cmd(args: argparse.Namespace, settings: config.Settings) -> int:
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
    async with _spool(settings) as opened:
        found = await nodes.reload_of(opened.database, node)
        if found is None or found["hostname"] != socket.gethostname():
            print(f"mtad: no node {node} has run on this host ({socket.gethostname()})", file=sys.stderr)
            return EXIT_FAILED
        before = found["reloaded_at"]
        try:
            os.kill(found["pid"], signal.SIGHUP)
        except ProcessLookupError:
            print(f"mtad: node {node} (pid {found['pid']}) is not running", file=sys.stderr)
            return EXIT_FAILED
        deadline = time.monotonic() + args.wait
        while (found := await nodes.reload_of(opened.database, node)) is not None and found["reloaded_at"] == before:
            if time.monotonic() > deadline:
                print(f"mtad: node {node} (pid {found['pid']}) did not say it reloaded within {args.wait:g} s",
                      file=sys.stderr)  # fmt: skip
                return EXIT_FAILED
            await asyncio.sleep(0.1)
    assert found is not None
    result = found["reload_result"] or {}
    if not result.get("ok"):
        print(f"mtad: node {node} refused the configuration; it runs with the one it had:", file=sys.stderr)
        for problem in result.get("problems", []):
            print(f"  {problem}", file=sys.stderr)
        return EXIT_FAILED
    print(f"node {node} (pid {found['pid']}) reloaded its configuration")
    for key in result.get("restart", []):
        print(f"  changed, but taken up only at a restart: {key}")
    return EXIT_OK


def check_config(args: argparse.Namespace, settings: config.Settings) -> int:
    """Say the configuration is fine (main() has printed every problem otherwise)."""
    db_desc = "dsn" if settings.database.dsn else f"embedded PostgreSQL in {settings.database.data_dir}"
    listen = ", ".join(str(a) for a in settings.submission.listen)
    print(f"{settings.source}: ok (database: {db_desc}; submission: {listen})")
    return EXIT_OK


def sink_cmd(args: argparse.Namespace) -> int:
    """Run the development SMTP sink until SIGINT or SIGTERM."""
    from mtad import sink

    try:
        chosen = sink.options(args.listen or sink.DEFAULT_LISTEN, args.reply or [], args.dir)
    except errors.ConfigError as exc:
        for problem in exc.problems:
            print(f"mtad sink: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        sink.run(chosen)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""  # the directory; a bind error names its address
        print(f"mtad sink: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


async def migrate_cmd(args: argparse.Namespace, settings: config.Basics) -> int:
    """Apply pending schema migrations (open_spool applies them) and list the schema version."""
    from mtad.db import migrate

    async with _spool(settings):
        versions = migrate.available()
    print(f"schema at version {versions[-1].version} ({versions[-1].name})")
    return EXIT_OK


async def tenants_add(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import tenants

    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("mtad: give the password on standard input (one line)", file=sys.stderr)
        return EXIT_USAGE
    probation = settings.tenants.probation_default if args.probation is None else args.probation
    async with _spool(settings) as opened:
        await tenants.add(opened.database, args.name, password, replace=args.replace)
        if probation and not args.replace:
            await tenants.set_probation(opened.database, args.name, True, datetime.now(UTC))
    print(f"tenant {args.name} {'updated' if args.replace else 'added'}" + (", on probation" if probation else ""))
    return EXIT_OK


def _tenant_name(text: str) -> str:
    from mtad.spool import tenants

    try:
        return tenants.check_name(text)
    except errors.MtadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def tls_show(args: argparse.Namespace, settings: config.Basics) -> int:
    """A recipient domain's MTA-STS policy as kept in the spool, with its last failure."""
    from mtad.outbound import policies

    async with _spool(settings) as opened:
        kept = await policies.cached(opened.database, args.domain)
    now = datetime.now(UTC)
    shown = (kept or policies.Cached(args.domain, None, None, None, None)).describe(now)
    if args.json:
        print(_json(shown))
        return EXIT_OK
    print(f"domain        {args.domain}")
    if shown["mode"] is None:
        print("policy        none cached (mtad fetches one when it delivers to the domain and it publishes one)")
    else:
        state = "expired" if shown["expired"] else "in force"
        print(f"policy        MTA-STS, id {shown['policy_id']}, {state}")
        print(f"mode          {shown['mode']}")
        print(f"mx            {', '.join(shown['mx']) or '-'}")
        print(f"max_age       {shown['max_age']} s")
        print(f"fetched       {shown['fetched_at']}")
        print(f"expires       {shown['expires_at']}")
    failure = f"{shown['failed_at']}: {shown['last_failure']}" if shown["last_failure"] else "none"
    print(f"last failure  {failure}")
    return EXIT_OK


async def tls_report(args: argparse.Namespace, settings: config.Settings) -> int:
    """Send the TLS reports due now (the days before today), or those of one day."""
    from mtad.outbound import fetching, routing, tlsrpt

    out = settings.delivery
    resolver = routing.DnsResolver(out.nameservers, timeout=out.dns_timeout)
    day = datetime.now(UTC).date() if args.day == "today" else args.day
    async with _spool(settings) as opened:
        reporter = tlsrpt.Reporter(opened.database, resolver, out.tls_reports, settings.submission.hostname,
                                   https_tls=fetching.trust(out.tls.ca_file))  # fmt: skip
        made = await reporter.report_due(day)
        for day_of, domain in made:
            report = await opened.database.fetchrow("tls/report_of", day_of, domain)
            assert report is not None
            sent = ", ".join(report["sent_to"]) or "nowhere"
            failures = "; ".join(report["failures"])
            line = f"{day_of} {domain}: report {report['report_id']} sent to {sent}"
            print(line + (f" ({failures})" if failures else ""))
    if not made:
        print("no TLS report due")
    return EXIT_OK


def _day(text: str) -> date | str:
    if text == "today":
        return text
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a day (YYYY-MM-DD or today): {text!r}") from None


def _domain_name(text: str) -> str:
    from mtad.base import envelope

    domain = text.strip().rstrip(".").lower()
    try:
        return envelope.parse_mailbox(f"postmaster@{domain}").domain
    except errors.MtadError as exc:
        raise argparse.ArgumentTypeError(f"not a domain name: {text!r} ({exc})") from None


async def tenants_pause(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import tenants

    async with _spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        held = await tenants.pause(opened.database, args.name, args.reason, by="operator", now=datetime.now(UTC))
        if held is None:
            why = await tenants.state(opened.database, args.name)
            print(f"mtad: tenant {args.name} is paused already ({why['paused_by']}: {why['paused_reason']})",
                  file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        acks = await _held(opened.database, settings)
    print(f"tenant {args.name} paused; {held} deliveries wait")
    _told(acks)
    return EXIT_OK


async def tenants_resume(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import tenants

    async with _spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        released = await tenants.resume(opened.database, args.name, by="operator", now=datetime.now(UTC))
        if released is None:
            print(f"mtad: tenant {args.name} is not paused", file=sys.stderr)
            return EXIT_FAILED
        acks = await _held(opened.database, settings)
    print(f"tenant {args.name} resumed; {released} deliveries due now")
    _told(acks)
    return EXIT_OK


async def tenants_probation(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import tenants

    async with _spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        await tenants.set_probation(opened.database, args.name, args.state == "on", datetime.now(UTC))
    print(f"tenant {args.name} {'on' if args.state == 'on' else 'off'} probation")
    return EXIT_OK


async def tenants_show(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.feedback import reputation

    quota, guard = settings.tenants.of(args.name)
    async with _spool(settings) as opened:
        await names.tenant(opened.database, args.name, settings.default_tenant)
        shown = await views.tenant(opened.database, args.name, quota, guard, datetime.now(UTC))
    windows = shown["windows"]
    by = {"provider": shown["providers"], "source": shown["sources"]}
    if args.json:
        print(_json(shown))
        return EXIT_OK
    state_text = "active"
    if shown["paused"]:
        state_text = (
            f"paused by {shown['paused_by']} at {shown['paused_at']:%Y-%m-%d %H:%M:%S}: {shown['paused_reason']}"
        )
    print(f"tenant     {args.name}")
    print(f"state      {state_text}")
    if shown["probation"]:
        print(f"probation  since {shown['probation_since']:%Y-%m-%d %H:%M:%S}, "
              f"{shown['probation_sent']} of {guard.graduate_after} delivered")  # fmt: skip
    elif shown["graduated_at"] is not None:
        print(f"probation  graduated at {shown['graduated_at']:%Y-%m-%d %H:%M:%S}")
    q = shown["quotas"]
    print(f"quotas     {q['messages_this_hour']} this hour (max_per_hour {q['max_per_hour'] or 'none'}), "
          f"{q['messages_today']} today (max_per_day {q['max_per_day'] or 'none'}), "
          f"{q['queued_bytes']} octets queued (max_queued_bytes {q['max_queued_bytes'] or 'none'})")  # fmt: skip
    print(f"limits     max_complaint_rate {guard.max_complaint_rate}, max_bounce_rate {guard.max_bounce_rate}, "
          f"over at least {guard.min_volume} deliveries")  # fmt: skip
    rows = [{"by": "tenant", "key": args.name, "window": w, **windows[w]} for w in reputation.WINDOWS]
    rows += [{"by": scope, "key": key, "window": w, **found[w]}
             for scope in ("provider", "source") for key, found in by[scope].items()
             for w in reputation.WINDOWS]  # fmt: skip
    _table(rows, ["by", "key", "window", *reputation.OUTCOMES])
    return EXIT_OK


async def reputation_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.feedback import reputation

    async with _spool(settings) as opened:
        found = await reputation.windows(opened.database, args.scope)
    if args.json:
        for row in found:
            print(_json(row))
        return EXIT_OK
    rows = [{"scope": r["scope"], "key": r["key"], "window": w, **r[w]} for r in found for w in reputation.WINDOWS]
    _table(rows, ["scope", "key", "window", *reputation.OUTCOMES])
    return EXIT_OK


async def tenants_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import tenants

    async with _spool(settings) as opened:
        rows = await tenants.list_all(opened.database)
    if args.json:
        for row in rows:
            print(_json(row))
    else:
        _table(rows, ["name", "state", "has_password", "paused", "probation", "created_at"])
    return EXIT_OK


async def queue_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.spool import queue

    async with _spool(settings) as opened:
        if args.provider is not None:
            await names.group(opened.database, args.provider, _configured(settings))
        rows = queue.deliveries(opened.database, state=args.state, group=args.provider)
        if args.json:
            async for row in rows:
                print(_json(views.delivery(row)))
        else:
            _table([_delivery_text(r) async for r in rows], _DELIVERY_COLUMNS)
    return EXIT_OK


_BUCKET_COLUMNS = ["group", "source", "rate", "sessions", "nodes", "in_flight", "tokens", "decreases", "increases",
                   "changed_by", "changed_at", "suspended"]  # fmt: skip


# --- DKIM keys -------------------------------------------------------------------------------


async def dkim_keygen(args: argparse.Namespace, settings: config.Basics) -> int:
    """A new pending key for a domain; prints the TXT record to publish."""
    from mtad.signing import dkim

    sealer = _sealer(settings)
    algorithm = dkim.Algorithm(args.alg)
    async with _spool(settings) as opened:
        selector = args.selector
        if not selector:  # mtad-YYYYMM, or the next free one of the month
            domain = args.domain.lower().rstrip(".")
            taken = {k.selector for k in await dkim.list_all(opened.database) if k.domain == domain}
            selector = dkim.free_selector(algorithm, datetime.now(UTC), taken)
        stored = await dkim.add(opened.database, dkim.generate(args.domain, selector, algorithm), sealer)
    print(f"DKIM key {stored.selector} for {stored.domain} ({algorithm.value}) is pending; publish:")
    print(f'{stored.name}. IN TXT "{stored.record()}"')
    return EXIT_OK


async def dkim_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    """Every key, its state, and what DNS publishes for it now (through [dns])."""
    import asyncio

    from mtad.outbound import routing
    from mtad.signing import dkim

    async with _spool(settings) as opened:
        keys = await dkim.list_all(opened.database)
    resolver = routing.DnsResolver(settings.dns.nameservers, timeout=settings.dns.timeout)
    dns = await asyncio.gather(*(_published(resolver, k) for k in keys))
    rows = [{"domain": k.domain, "selector": k.selector, "algorithm": k.algorithm.value, "state": k.state.value,
             "dns": seen, "created": k.created_at, "changed": k.changed_at, "record": k.record}
            for k, seen in zip(keys, dns, strict=True)]  # fmt: skip
    if args.json:
        for row in rows:
            print(_json(row))
    else:
        _table(rows, ["domain", "selector", "algorithm", "state", "dns", "created", "changed"])
    return EXIT_OK


async def _published(resolver: routing.DnsResolver, key: dkim.Stored) -> str:
    """What DNS says of a key's record: published, another key, none, or why it could not tell."""
    from mtad.signing import dkim

    try:
        answer = await resolver.lookup(f"{key.selector}._domainkey.{key.domain}", "TXT")
    except errors.RouteTempFail as exc:
        return f"lookup failed: {exc}"
    if dkim.matches(answer.values, key.record):
        return "published"
    return "another record" if answer.values else "none"


async def dkim_state(args: argparse.Namespace, settings: config.Basics) -> int:
    """activate or revoke a key by hand (the DNS-driven rotation is not built yet)."""
    from mtad.signing import dkim

    state = dkim.KeyState.ACTIVE if args.command_name == "activate" else dkim.KeyState.REVOKED
    async with _spool(settings) as opened:
        key = await dkim.set_state(opened.database, args.domain, args.selector, state, datetime.now(UTC))
    print(f"DKIM key {key.selector} for {key.domain} is {key.state.value} (running nodes load it within a minute)")
    return EXIT_OK


async def buckets_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    """The shaping buckets: rate and session cap for all nodes (as the last checkpoint
    wrote them, every [delivery] checkpoint_interval), with what the live nodes are
    doing with them; with no node running, the checkpoint alone."""
    from mtad.deliver import shaping
    from mtad.outbound import limits
    from mtad.spool import suspensions

    now = datetime.now(UTC)
    live_since = now - timedelta(seconds=3 * settings.node.heartbeat_interval)
    async with _spool(settings) as opened:
        rows = await shaping.listing(opened.database, live_since)
        suspended, rerouted = await suspensions.listing(opened.database, now)
    held = {(s.kind, s.key): s for s in suspended}
    routed = {r.provider: r.pool for r in rerouted}
    for row in rows:
        row["group"] = row.pop("route_group")
        why = held.get(("provider", row["group"])) or held.get(("source", row["source"] or ""))
        row["suspended"] = f"{why.kind}: {why.reason}" if why else ("rerouted to " + routed[row["group"]]
                                                                    if row["group"] in routed else None)  # fmt: skip
    if args.json:
        for row in rows:
            print(_json({**row, "rate": None if math.isinf(row["rate"]) else row["rate"]}))
    else:
        for row in rows:
            row["source"] = row["source"] or "(default)"
            row["rate"] = limits.show_rate(row["rate"])
            row["tokens"] = f"{row['tokens']:.1f}"
            row["changed_by"] = row["changed_by"] if row["changed_at"] else "(configured)"
        _table(rows, _BUCKET_COLUMNS)
    return EXIT_OK


# --- accounts (sending mailboxes) -------------------------------------------------------

_ACCOUNT_COLUMNS = [
    "name", "pool", "address", "smarthost", "state", "until", "today", "daily_cap", "last_send", "sending", "health",
    "inbox",
]  # fmt: skip
_T = TypeVar("_T")


def accounts_key(args: argparse.Namespace) -> int:
    """A new key for [accounts] key_file (printed; put it in a file only mtad reads)."""
    from mtad.base import vault

    print(vault.Vault.new_key().decode())
    return EXIT_OK


async def accounts_add(args: argparse.Namespace, settings: config.Settings) -> int:
    """Add an account; what its pool's [account_pools] table gives fills the limits not given."""
    from mtad.base import vault
    from mtad.mailboxes import accounts, inboxes, oauth

    secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        print("mtad: give the account's password or token on standard input (one line)", file=sys.stderr)
        return EXIT_USAGE
    sealer = _sealer(settings)
    pools = settings.delivery.relay.pools
    pool = pools.get(args.pool)
    if pool is None:
        known = ", ".join(sorted(pools)) or "none"
        print(f"mtad: --pool: no account pool named {args.pool!r} (configured: {known})"
              f"{_did_you_mean(args.pool, pools)}; add an [account_pools.{args.pool}] table to the configuration",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    jitter = pool.defaults.jitter
    if args.jitter:
        low, _, high = args.jitter.partition(":")
        try:
            jitter = (float(low), float(high or low))
        except ValueError:
            print(f"mtad: --jitter: expected LOW:HIGH seconds, got {args.jitter!r}", file=sys.stderr)
            return EXIT_USAGE
    oauth_client = None
    if args.mechanism == accounts.Mechanism.XOAUTH2.value:
        if not args.token_url or not args.client_id:
            print("mtad: --mechanism xoauth2 needs --token-url (google, microsoft or a URL) and --client-id; "
                  "the secret is the refresh token", file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        client_secret = sys.stdin.readline().rstrip("\r\n")  # optional: a confidential client's secret
        token_urls = {"google": oauth.GOOGLE, "microsoft": oauth.MICROSOFT}
        oauth_client = (token_urls.get(args.token_url, args.token_url), args.client_id,
                        sealer.seal(vault.Secret(client_secret)) if client_secret else None, args.scope)  # fmt: skip
    given = pool.defaults
    account = accounts.Account(
        name=args.name, address=args.address, pool=args.pool, host=args.host, port=args.port, login=args.login,
        tls=accounts.Tls(args.tls), mechanism=accounts.Mechanism(args.mechanism),
        time_zone=args.time_zone or pool.time_zone,
        limits=accounts.Limits(
            _given(args.daily_cap, given.daily_cap), _given(args.min_gap, given.min_gap), jitter,
            _given(args.per_second, given.per_second), _given(args.per_minute, given.per_minute),
            _given(args.per_hour, given.per_hour),
        ),
    )  # fmt: skip
    imap_host = inboxes.provider_host(args.host) if args.imap_host is None else args.imap_host
    if imap_host == "none":
        imap_host = None
    async with _spool(settings) as opened:
        stored = await accounts.add(opened.database, account)
        await accounts.set_secret(opened.database, stored.name, sealer.seal(vault.Secret(secret)))
        if oauth_client is not None:
            await accounts.set_oauth(opened.database, stored.name, *oauth_client)
        if imap_host is not None:
            await inboxes.configure(opened.database, stored.id, imap_host, args.imap_port)
    inbox = f"; its inbox is read at {imap_host}:{args.imap_port}" if imap_host else ""
    print(f"account {stored.name} added to pool {stored.pool}{inbox}")
    return EXIT_OK


async def accounts_inbox(args: argparse.Namespace, settings: config.Basics) -> int:
    """Read an account's inbox at an IMAP server, or (none) stop reading it."""
    from mtad.admin import names
    from mtad.mailboxes import accounts, inboxes

    async with _spool(settings) as opened:
        await names.account(opened.database, args.name)
        account = await accounts.get(opened.database, args.name)
        if args.imap_host == "none":
            was = await inboxes.remove(opened.database, account.id)
            print(f"account {account.name}: its inbox is {'no longer' if was else 'not'} read")
            return EXIT_OK
        await inboxes.configure(opened.database, account.id, args.imap_host, args.imap_port)
    print(f"account {account.name}: its inbox is read at {args.imap_host}:{args.imap_port}")
    return EXIT_OK


def _given(value: _T | None, default: _T | None) -> _T | None:
    return default if value is None else value


async def accounts_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.mailboxes import accounts, inboxes

    now = datetime.now(UTC)
    if args.pool is not None:
        names.account_pool(args.pool, _configured(settings))
    async with _spool(settings) as opened:
        read = {i.account: i for i in await inboxes.listing(opened.database)}
        rows = [views.account(u, now, read.get(u.account.id)) for u in await accounts.usage(opened.database, now,
                                                                                              args.pool)]  # fmt: skip
    if args.json:
        for row in rows:
            print(_json(row))
    else:
        _table(rows, _ACCOUNT_COLUMNS)
    return EXIT_OK


async def accounts_show(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.mailboxes import accounts, inboxes

    now = datetime.now(UTC)
    async with _spool(settings) as opened:
        await names.account(opened.database, args.name)
        account = await accounts.get(opened.database, args.name)
        [use] = [u for u in await accounts.usage(opened.database, now, account.pool) if u.account.id == account.id]
        read = await inboxes.listing(opened.database, account.id)
    row = views.account(use, now, read[0] if read else None)
    if args.json:
        print(_json(row))
    else:
        for key, value in row.items():
            print(f"{key + ':':<14} {_text(value)}")
    return EXIT_OK


async def accounts_state(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import control, names
    from mtad.mailboxes import accounts

    now = datetime.now(UTC)
    released = None
    async with _spool(settings) as opened:
        await names.account(opened.database, args.name)
        if args.command_name == "enable":
            account, released = await control.enable(opened.database, args.name, args.reason, now)
        else:
            account = await accounts.disable(opened.database, args.name, args.reason, now)
        acks = await _held(opened.database, settings)
    print(f"account {account.name} is {account.state.value}"
          + (f"; {released} deliveries of pool {account.pool} due now" if released else ""))  # fmt: skip
    _told(acks)
    return EXIT_OK


async def accounts_test(args: argparse.Namespace, settings: config.Settings) -> int:
    """Log in to the account's smarthost without sending anything (an XOAUTH2 account
    first exchanges its refresh token for an access token)."""
    from mtad.admin import names
    from mtad.mailboxes import accounts, relay
    from mtad.outbound import sessions

    sealer = _sealer(settings)
    async with _spool(settings) as opened:
        await names.account(opened.database, args.name)
        account = await accounts.get(opened.database, args.name)
        mailboxes = relay.Mailboxes(opened.database, settings.delivery.relay, sealer)
        try:
            login = await mailboxes.login(account)
        except relay.LoginFailed as failed:
            print(f"account {account.name}: no login: {failed.why}")
            return EXIT_FAILED
    pool = sessions.Pool(sessions.Settings(ehlo_hostname=settings.submission.hostname))
    result = await pool.check_login(relay.target(account), login)
    if result.failure is None and not result.replies:
        print(f"account {account.name}: logged in to {account.host}:{account.port} over {result.tls}")
        return EXIT_OK
    why = result.replies[""].line() if result.replies else result.failure.value if result.failure else "?"
    print(f"account {account.name}: {account.host}:{account.port} refused: {why}")
    return EXIT_FAILED


async def queue_act(args: argparse.Namespace, settings: config.Basics) -> int:
    """retry, cancel or bounce: a delivery (by id) or every delivery of a message (by queue id)."""
    from mtad.spool import leases

    async with _spool(settings) as opened:
        changed, untouched = await leases.act(opened.database, args.action, args.id, datetime.now(UTC))
    done = {"retry": "queued for now", "cancel": "cancelled", "bounce": "bounced"}[args.action]
    for delivery in changed:
        print(f"delivery {delivery}: {done}")
    for row in untouched:
        why = {"leased": "in flight, try again shortly", "unknown": "its send may have gone out: retry or cancel it"}
        print(f"delivery {row['id']}: unchanged ({why.get(row['state'], 'already ' + row['state'])})", file=sys.stderr)
    return EXIT_OK if changed else EXIT_FAILED


async def queue_purge(args: argparse.Namespace, settings: config.Settings) -> int:
    """Delete now what was received before --before and is done with (every delivery final),
    and the events before it, whatever the [retention] windows; say what went and what stayed."""
    from mtad.spool import retention

    history = settings.delivery.relay.breaker.window
    async with _spool(settings) as opened:
        pruned = await retention.purge(opened.database, args.before, account_history=history,
                                       batch=settings.retention.batch,
                                       soft_window=settings.suppression.soft_window)  # fmt: skip
        print(f"purged before {args.before.isoformat()}: {pruned.messages} messages with {pruned.deliveries} "
              f"deliveries, {pruned.events} events")  # fmt: skip
        if pruned.kept:
            print(f"kept {pruned.kept} messages received before then: a delivery is not final yet")
        before, after = await retention.compact(opened.database, reindex=args.reindex)
    print(f"database size: {before / 2**20:,.1f} MiB before the VACUUM{' and REINDEX' if args.reindex else ''}, "
          f"{after / 2**20:,.1f} MiB after")  # fmt: skip
    return EXIT_OK


# --- suspensions and reroutes -------------------------------------------------------------


async def _held(database: db.Database, settings: config.Basics) -> controls.Acks:
    """Once an operator's change is committed: until every live node has applied it
    (a few seconds at most)."""
    from mtad.admin import control

    return await control.held(database, 3 * settings.node.heartbeat_interval)


def _told(acks: controls.Acks) -> None:
    """The acknowledgements on stdout; a warning on stderr for each live node that did
    not apply the change in time (the command still succeeds: the change is committed)."""
    from mtad.spool import controls

    print(acks.said())
    for line in acks.warnings(controls.WITHIN, datetime.now(UTC)):
        print(f"mtad: warning: {line}", file=sys.stderr)


def _suspended(args: argparse.Namespace) -> tuple[str, str]:
    """The (kind, key) of --provider, --tenant, --pool, --source or --account."""
    from mtad.spool import suspensions

    return next((kind, getattr(args, kind)) for kind in suspensions.KINDS if getattr(args, kind) is not None)


def _for(text: str) -> float:
    from mtad.base import values

    try:
        return values.positive_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def suspend_cmd(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import control, names

    kind, key = _suspended(args)
    now = datetime.now(UTC)
    until = now + timedelta(seconds=args.for_) if args.for_ is not None else None
    async with _spool(settings) as opened:
        await names.suspendable(opened.database, kind, key, lambda: _configured(settings), settings.default_tenant)
        done = await control.suspend(opened.database, kind, key, args.reason, until, now)
        acks = await _held(opened.database, settings)
    ends = f"until {done.until:%Y-%m-%d %H:%M:%S} UTC" if done.until else "until resumed"
    print(f"suspended {kind} {done.key} {ends}: its mail waits")
    _told(acks)
    return EXIT_OK


async def resume_cmd(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import control, names

    kind, key = _suspended(args)
    async with _spool(settings) as opened:
        await names.suspended(opened.database, kind, key, datetime.now(UTC))
        released = await control.resume(opened.database, kind, key, datetime.now(UTC))
        if released is None:
            print(f"mtad: {kind} {key} is not suspended", file=sys.stderr)
            return EXIT_FAILED
        acks = await _held(opened.database, settings)
    print(f"resumed {kind} {key}; {released} deliveries due now")
    _told(acks)
    return EXIT_OK


async def suspensions_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.spool import suspensions

    async with _spool(settings) as opened:
        suspended, rerouted = await suspensions.listing(opened.database, datetime.now(UTC))
    rows = [{"what": "suspended", "kind": s.kind, "key": s.key, "pool": None, "reason": s.reason,
             "since": s.created_at, "until": s.until} for s in suspended]  # fmt: skip
    rows += [{"what": "rerouted", "kind": "provider", "key": r.provider, "pool": r.pool, "reason": r.reason,
              "since": r.created_at, "until": r.until} for r in rerouted]  # fmt: skip
    if args.json:
        for row in rows:
            print(_json(row))
    else:
        _table(rows, ["what", "kind", "key", "pool", "reason", "since", "until"])
    return EXIT_OK


async def queue_reroute(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.spool import suspensions

    now = datetime.now(UTC)
    if not args.back and args.pool is None:
        print("mtad: give --pool POOL (or --back to end a reroute)", file=sys.stderr)
        return EXIT_USAGE
    async with _spool(settings) as opened:
        if args.back:
            await names.rerouted(opened.database, args.provider, now)
        else:
            await names.group(opened.database, args.provider, _configured(settings))
            names.pool(args.pool, _configured(settings))
        if args.back:
            ended = await suspensions.unroute(opened.database, args.provider)
            if ended is None:
                print(f"mtad: provider group {args.provider} is not rerouted", file=sys.stderr)
                return EXIT_FAILED
            acks = await _held(opened.database, settings)
            print(f"provider group {args.provider} leaves from its own pool again")
            _told(acks)
            return EXIT_OK
        until = now + timedelta(seconds=args.for_) if args.for_ is not None else None
        done = await suspensions.reroute(opened.database, args.provider, args.pool, args.reason, until, now)
        acks = await _held(opened.database, settings)
    ends = f"until {done.until:%Y-%m-%d %H:%M:%S} UTC" if done.until else "until --back"
    print(f"provider group {done.provider} leaves from pool {done.pool} {ends}")
    _told(acks)
    return EXIT_OK


def _after(text: str) -> datetime:
    """--until: an ISO date or time, or a duration from now (argparse exits 2 on a bad one)."""
    from mtad.spool import retention

    now = datetime.now(UTC)
    try:
        moment = retention.moment(text, now)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return moment if moment >= now else now + (now - moment)  # a duration means that long from now


def _before(text: str) -> datetime:
    """--before: an ISO date or time, or a duration meaning that long ago (argparse exits 2 on a bad one)."""
    from mtad.spool import retention

    try:
        return retention.moment(text, datetime.now(UTC))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def queue_show(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import views
    from mtad.spool import queue

    async with _spool(settings) as opened:
        view = await queue.show(opened.database, args.id)
    message = {k: v for k, v in view.message.items() if k != "head"}
    head = bytes(view.message["head"])
    header_block = head.split(b"\r\n\r\n", 1)[0].decode("utf-8", "replace")
    if args.json:
        print(_json(views.message(view)))
        return EXIT_OK
    for key, value in message.items():
        print(f"{'queue_id' if key == 'id' else key:>16}: {_text(value)}")
    print("\nheaders:")
    for line in header_block.splitlines():
        print(f"  {line}")
    print("\ndeliveries:")
    _table([_delivery_text(d) for d in view.deliveries], _SHOWN_COLUMNS, indent="  ")
    print("\nevents:")
    for event in view.events:
        print(f"  {_text(event['at'])}  {event['kind']:<10} delivery={_text(event['delivery'])}  {event['data']}")
    return EXIT_OK


# --- output ---------------------------------------------------------------------

_DELIVERY_COLUMNS = ["id", "queue_id", "state", "attempts", "next_attempt", "sender", "recipient", "last_reply"]
# A message's deliveries: why each was not delivered (its last reason and status) too.
_SHOWN_COLUMNS = [*_DELIVERY_COLUMNS[:-1], "reason", "status", "last_reply"]


def _next_attempt(row: dict[str, Any]) -> str:
    """When a delivery goes: a time; held (due at infinity) until a resume, or, one whose
    relayed send may have gone out (unknown), until `queue retry`; such a one looked for
    in its Sent folder goes at its time unless found there."""
    if row["next_attempt_at"].year == 9999:
        return "on retry" if row["state"] == "unknown" else "on resume"
    at = str(row["next_attempt_at"].strftime("%Y-%m-%d %H:%M:%S"))
    return f"{at} unless found sent" if row["state"] == "unknown" else at


def _delivery_text(row: dict[str, Any]) -> dict[str, Any]:
    reply = ""
    if row["last_code"] is not None:
        reply = f"{row['last_code']} {row['last_enhanced'] or ''} {row['last_text'] or ''}".strip()
    return {
        "id": row["id"],
        "queue_id": str(row["message"]),
        "state": row["state"],
        "attempts": row["attempts"],
        "next_attempt": _next_attempt(row),
        "sender": row["sender"] or "<>",  # the null reverse-path
        "recipient": row["recipient"],
        "reason": row.get("last_reason"),
        "status": row["last_enhanced"],
        "last_reply": reply[:60],
    }


# --- suppression and events --------------------------------------------------------------


async def suppress_add(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import suppression

    reason = suppression.Reason(args.reason)
    async with _spool(settings) as opened:
        if args.tenant:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        entry = await suppression.add(opened.database, args.address, reason, datetime.now(UTC),
                                      tenant=args.tenant, detail=args.note, expires_at=args.until)  # fmt: skip
        if entry is None:
            [kept] = [e for e in await suppression.entries(opened.database, args.tenant)
                      if e.address == args.address.strip().lower()]  # fmt: skip
            print(f"{kept.address} is already suppressed for {_list_name(args.tenant)} ({kept.reason.value}); kept")
            return EXIT_OK
    print(f"suppressed {entry.address} for {_list_name(args.tenant)} ({entry.reason.value})")
    return EXIT_OK


async def suppress_rm(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import suppression

    async with _spool(settings) as opened:
        if args.tenant:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        removed = await suppression.remove(opened.database, args.address, args.tenant)
    if not removed:
        print(f"mtad: {args.address} is not on {_list_name(args.tenant)}", file=sys.stderr)
        return EXIT_FAILED
    print(f"removed {args.address} from {_list_name(args.tenant)}")
    return EXIT_OK


async def suppress_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import suppression

    reason = suppression.Reason(args.reason) if args.reason else None
    async with _spool(settings) as opened:
        if args.tenant:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        found = await suppression.entries(opened.database, args.tenant, reason)
    rows = [{"address": e.address, "tenant": e.tenant, "reason": e.reason.value, "created": e.created_at,
             "expires": e.expires_at, "event": e.event, "delivery": e.delivery, "detail": e.detail}
            for e in found]  # fmt: skip
    if args.json:
        for row in rows:
            print(_json(row))
    else:
        _table([{**r, "tenant": r["tenant"] or "(global)"} for r in rows],
               ["address", "tenant", "reason", "created", "expires", "detail"])  # fmt: skip
    return EXIT_OK


# --- webhooks ----------------------------------------------------------------------------------------------------


async def webhooks_add(args: argparse.Namespace, settings: config.Basics) -> int:
    """Add a tenant's endpoint and print its secret, once."""
    from mtad.admin import names
    from mtad.feedback import webhooks

    kinds = [k.strip() for k in args.events.split(",") if k.strip()] if args.events else None
    sealer = _sealer(settings)
    async with _spool(settings) as opened:
        await names.tenant(opened.database, args.tenant, settings.default_tenant)
        endpoint, secret = await webhooks.add(opened.database, sealer, args.tenant, args.url, kinds, args.batch)
    batched = f" (up to {endpoint.batch} events a request, as a JSON array)" if endpoint.batch > 1 else ""
    print(f"webhook endpoint {endpoint.id} of tenant {endpoint.tenant}: {endpoint.url}{batched}")
    print(f"secret (shown once; verify the webhook-signature header with it): {secret}")
    return EXIT_OK


async def webhooks_ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import webhooks

    async with _spool(settings) as opened:
        if args.tenant is not None:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        found = await webhooks.listing(opened.database, args.tenant)
    rows = [{"id": e.id, "tenant": e.tenant, "url": e.url,
             "events": ",".join(sorted(e.events)) if e.events is not None else "all", "batch": e.batch,
             "previous_secret_until": e.previous_until, "created": e.created_at, "pending": e.pending,
             "delivered": e.delivered, "dead": e.dead} for e in found]  # fmt: skip
    if args.json:
        for row in rows:
            print(_json(row))
    else:
        _table(rows, ["id", "tenant", "url", "events", "batch", "pending", "delivered", "dead",
                      "previous_secret_until"])  # fmt: skip
    return EXIT_OK


async def webhooks_rm(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import webhooks

    async with _spool(settings) as opened:
        await names.webhook(opened.database, args.id)
        removed = await webhooks.remove(opened.database, args.id)
    if not removed:
        print(f"mtad: no webhook endpoint {args.id}", file=sys.stderr)
        return EXIT_FAILED
    print(f"removed webhook endpoint {args.id}")
    return EXIT_OK


async def webhooks_rotate(args: argparse.Namespace, settings: config.Basics) -> int:
    """A new secret for an endpoint; the old one signs too until the overlap ends."""
    from mtad.admin import names
    from mtad.feedback import webhooks

    sealer = _sealer(settings)
    async with _spool(settings) as opened:
        await names.webhook(opened.database, args.id)
        secret = await webhooks.rotate(opened.database, sealer, args.id, args.overlap)
    print(f"webhook endpoint {args.id}: new secret (shown once): {secret}")
    print(f"the previous secret signs too until {args.overlap.isoformat(timespec='seconds')}")
    return EXIT_OK


async def webhooks_test(args: argparse.Namespace, settings: config.Settings) -> int:
    """Send an endpoint a `test` event now and say how it answered."""
    from mtad.admin import names
    from mtad.feedback import webhook_sender, webhooks

    sealer = _sealer(settings)
    async with _spool(settings) as opened:
        await names.webhook(opened.database, args.id)
        found = [e for e in await webhooks.listing(opened.database) if e.id == args.id]
        if not found:
            print(f"mtad: no webhook endpoint {args.id}", file=sys.stderr)
            return EXIT_FAILED
        sender = webhook_sender.Sender(opened.database, sealer, settings.webhooks, settings.node.id)
        why = await sender.test(found[0])
    if why is not None:
        print(f"webhook endpoint {args.id} ({found[0].url}): {why}")
        return EXIT_FAILED
    print(f"webhook endpoint {args.id} ({found[0].url}) took the test event")
    return EXIT_OK


async def webhooks_replay(args: argparse.Namespace, settings: config.Basics) -> int:
    """Send a tenant's events since a time to its endpoints again."""
    from mtad.admin import names
    from mtad.feedback import webhook_outbox

    async with _spool(settings) as opened:
        await names.tenant(opened.database, args.tenant, settings.default_tenant)
        if args.endpoint is not None:
            await names.webhook(opened.database, args.endpoint, args.tenant)
        written = await webhook_outbox.replay(opened.database, args.tenant, args.since, args.endpoint)
    print(f"{written} webhook request(s) written for tenant {args.tenant}; the running nodes send them")
    return EXIT_OK


async def suppress_import(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.feedback import suppression

    source = sys.stdin.buffer if str(args.file) == "-" else args.file
    if source is not sys.stdin.buffer and not args.file.is_file():
        print(f"mtad: {args.file}: no such file", file=sys.stderr)
        return EXIT_USAGE
    async with _spool(settings) as opened:
        added = await suppression.import_csv(opened.database, source, datetime.now(UTC),
                                             default_tenant=settings.default_tenant)  # fmt: skip
    print(f"imported {added} new suppression(s) from {args.file}")
    return EXIT_OK


async def suppress_export(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.feedback import suppression

    output = sys.stdout.buffer if args.file is None or str(args.file) == "-" else args.file
    async with _spool(settings) as opened:
        await suppression.export_csv(opened.database, output)
    return EXIT_OK


def _list_name(tenant: str) -> str:
    return f"tenant {tenant}" if tenant else "the global list"


def bounces_explain(args: argparse.Namespace, settings: config.Settings | None) -> int:
    """Print how mtad reads a message: by the configured reply table and with the
    delivery it matches in the spool when a configuration is given."""
    from mtad.feedback import explain, reports

    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        print(f"mtad: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    report = reports.parse(raw, settings.delivery.rules if settings is not None else None)
    found = None
    if settings is not None:
        import asyncio

        from mtad.base import log

        log.configure("console", "warning", stream=sys.stderr)
        try:
            found = asyncio.run(_matches(settings, report, args.to))
        except errors.MtadError as exc:
            print(f"mtad: {exc}", file=sys.stderr)
            return EXIT_FAILED
    shown = explain.view(report, found)
    print(_json(shown) if args.json else "\n".join(explain.lines(shown)))
    return EXIT_OK


async def _matches(settings: config.Settings, report: reports.Report, to: str | None) -> list[explain.Match]:
    """The deliveries in the spool `report` is about (explain.matches)."""
    from mtad.feedback import explain, verp

    named = None
    bounces = settings.bounces
    if bounces.domain is not None and bounces.key_file is not None:
        try:  # no key yet: no VERP address was ever sent
            named = verp.Verp(bounces.domain, bounces.key_file.read_bytes().strip())
        except (OSError, ValueError):
            named = None
    async with _spool(settings) as opened:
        return await explain.matches(opened.database, report, verp=named, to=to)


async def events_tail(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names
    from mtad.feedback import tail

    where = tail.Filter(args.kind, args.tenant)
    shown: set[int] = set()
    async with _spool(settings) as opened:
        if args.tenant is not None:
            await names.tenant(opened.database, args.tenant, settings.default_tenant)
        start = await tail.horizon(opened.database)
        async for event in tail.listing(opened.database, where, args.since, args.lines):
            _print_event(event, args.json)
            if event.xid is not None and event.xid >= start:
                shown.add(event.id)  # following starts at `start`: not twice
        if args.follow:  # until interrupted
            async for event in tail.follow(opened.database, where, start, shown):
                _print_event(event, args.json)
    return EXIT_OK


def _print_event(event: Any, as_json: bool) -> None:
    if as_json:
        fields = {"id": event.id, "at": event.at, "kind": event.kind, "tenant": event.tenant,
                  "message": event.message, "delivery": event.delivery, "data": event.data}  # fmt: skip
        print(_json(fields), flush=True)
    else:
        where = " ".join(f"{k}={_text(v)}" for k, v in (("tenant", event.tenant), ("message", event.message),
                                                          ("delivery", event.delivery)) if v)  # fmt: skip
        print(f"{event.at.isoformat()} {event.kind} {where} {_json(event.data)}".replace("  ", " "), flush=True)


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, default=_text, ensure_ascii=False, separators=(",", ":"))


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if value is None:
        return "-"
    return str(value)


def _table(rows: list[dict[str, Any]], columns: list[str], *, indent: str = "") -> None:
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print(indent + "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for r in cells:
        print(indent + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    if not rows:
        print(f"{indent}(none)")


# --- argument parsing -----------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    config_help = "configuration file (default: conf/mtad.toml when present, else /etc/mtad/mtad.toml)"
    parser = argparse.ArgumentParser(
        prog="mtad", description="mtad: a mail transfer agent that keeps its spool in PostgreSQL."
    )
    parser.add_argument("--config", type=Path, metavar="PATH", help=config_help)
    # The same option after the command; SUPPRESS keeps a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, metavar="PATH", help=config_help, default=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version=f"mtad {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def add(name: str, func: Callable[..., Any], help: str, **kw: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help, description=help, **kw)
        sub.set_defaults(command=func)
        return sub

    add("run", run, "Run the daemon in the foreground until SIGTERM or SIGINT.")
    add("migrate", migrate_cmd, "Apply pending schema migrations (mtad run does this at start too).")
    add("check-config", check_config, "Check the configuration and print every problem at once.")
    reloading = add("reload", reload_cmd, "Have the node running here read its configuration again (SIGHUP), "
                    "after checking it: limits, pools, routes, tenants, account pools. Sessions, leases and the "
                    "buckets' rates stay; what needs a restart is named.")  # fmt: skip
    reloading.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                           help="how long to wait for the node to say it reloaded (default 30)")  # fmt: skip
    about = "Run a development SMTP sink: accept every message and print a line for it (needs no configuration)."
    sinking = commands.add_parser("sink", help=about, description=about)  # no --config: it reads none
    sinking.set_defaults(command=sink_cmd)
    sinking.add_argument("--listen", metavar="HOST:PORT", help="default 127.0.0.1:2526")
    sinking.add_argument("--dir", type=Path, help="also store each message there as a .eml file")
    sinking.add_argument("--reply", action="append", metavar="PATTERN=REPLY",
                      help="answer RCPT for recipients matching the glob, e.g. 'bounce*@*=550 5.1.1 No such user' "
                      "(repeatable; the first match counts; others get 250)")  # fmt: skip

    for name, text in (
        ("suspend", "Hold mail: a provider group's, a tenant's, a source pool's, a source address's, or stop an "
                    "account. It waits queued; nothing is failed. Every node heeds it within seconds. A name that "
                    "names nothing is refused with the one meant."),
        ("resume", "End a suspension: what it held is due now."),
    ):  # fmt: skip
        holding = commands.add_parser(name, parents=[common], help=text, description=text)
        which = holding.add_mutually_exclusive_group(required=True)
        which.add_argument("--provider", metavar="GROUP", help=GROUP_HELP)
        which.add_argument("--tenant", metavar="NAME", help="a tenant (`tenants add`, or [submission] default_tenant)")
        which.add_argument("--pool", metavar="POOL", help="a source IP pool ([pools])")
        which.add_argument("--source", metavar="ADDRESS", help="a source IP address of a pool")
        which.add_argument("--account", metavar="NAME", help="a sending account")
        if name == "suspend":
            holding.add_argument("--for", dest="for_", type=_for, metavar="DURATION",
                                 help='e.g. "2h": it ends by itself (default: until `mtad resume`)')  # fmt: skip
            holding.add_argument("--reason", default="suspended by an operator", help="said in suspensions ls and "
                                 "in the events of the mail it holds")  # fmt: skip
        holding.set_defaults(command=suspend_cmd if name == "suspend" else resume_cmd)
    slist = commands.add_parser("suspensions", parents=[common], help="The suspensions and reroutes in force.")
    scommands = slist.add_subparsers(title="suspensions commands", metavar="COMMAND", required=True)
    sls = scommands.add_parser("ls", parents=[common], help="The suspensions and reroutes in force.")
    sls.add_argument("--json", action="store_true", help="one JSON object per line")
    sls.set_defaults(command=suspensions_ls)

    tenant_parser = commands.add_parser("tenants", parents=[common], help="Manage the tenants that may submit mail.")
    tenant_commands = tenant_parser.add_subparsers(title="tenant commands", metavar="COMMAND", required=True)
    tadd = tenant_commands.add_parser(
        "add",
        parents=[common],
        help="Add a tenant; its password is read from standard input.",
        description="Add a tenant that authenticates with AUTH PLAIN or LOGIN. "
        "The password is the first line of standard input, e.g. `echo secret | mtad tenants add shop`.",
    )
    tadd.add_argument("name", help="tenant name: letters, digits, '.', '_', '-'")
    tadd.add_argument("--replace", action="store_true", help="set a new password if the tenant exists")
    tadd.add_argument("--probation", action=argparse.BooleanOptionalAction, default=None,
                      help="put the new tenant on probation (default: [tenants] probation_default)")  # fmt: skip
    tadd.set_defaults(command=tenants_add)
    tls = tenant_commands.add_parser("ls", parents=[common], help="List the tenants.")
    tls.add_argument("--json", action="store_true", help="one JSON object per line")
    tls.set_defaults(command=tenants_ls)
    tshow = tenant_commands.add_parser(
        "show", parents=[common], help="A tenant's state, probation, quotas and reputation windows (1h, 24h)."
    )
    tshow.add_argument("name", type=_tenant_name)
    tshow.add_argument("--json", action="store_true", help="one JSON object")
    tshow.set_defaults(command=tenants_show)
    tpause = tenant_commands.add_parser(
        "pause",
        parents=[common],
        help="Pause a tenant: its queued mail waits (nothing is failed), new mail gets 451 4.7.1.",
    )
    tpause.add_argument("name", type=_tenant_name)
    tpause.add_argument("--reason", default="paused by an operator", help="said in the 451 reply and the event")
    tpause.set_defaults(command=tenants_pause)
    tresume = tenant_commands.add_parser(
        "resume", parents=[common], help="Resume a paused tenant: its mail is due again at once."
    )
    tresume.add_argument("name", type=_tenant_name)
    tresume.set_defaults(command=tenants_resume)
    tprob = tenant_commands.add_parser(
        "probation",
        parents=[common],
        help="Put a tenant on probation (its mail leaves from [delivery] probation_pool) or take it off.",
    )
    tprob.add_argument("name", type=_tenant_name)
    tprob.add_argument("state", choices=["on", "off"])
    tprob.set_defaults(command=tenants_probation)

    tls_parser = commands.add_parser("tls", parents=[common], help="See the recipient domains' TLS policies.")
    tls_commands = tls_parser.add_subparsers(dest="tls_command", required=True)
    tlshow = tls_commands.add_parser(
        "show", parents=[common], help="A domain's MTA-STS policy as cached: mode, mx, fetched, expires, last failure."
    )
    tlshow.add_argument("domain", type=_domain_name)
    tlshow.add_argument("--json", action="store_true", help="one JSON object")
    tlshow.set_defaults(command=tls_show)
    tlreport = tls_commands.add_parser(
        "report", parents=[common],
        help="Send the TLS reports (RFC 8460) due now: of the days before today, or of --day (today: so far).",
    )  # fmt: skip
    tlreport.add_argument("--day", type=_day, default=None, help="YYYY-MM-DD or today")
    tlreport.set_defaults(command=tls_report)

    rep_parser = commands.add_parser(
        "reputation", parents=[common], help="The sliding windows of outcomes by tenant, provider group and source."
    )
    rep_commands = rep_parser.add_subparsers(title="reputation commands", metavar="COMMAND", required=True)
    rls = rep_commands.add_parser("ls", parents=[common], help="Every window with outcomes in the last 24 hours.")
    rls.add_argument("--scope", choices=["tenant", "provider", "source"], help="only this scope")
    rls.add_argument("--json", action="store_true", help="one JSON object per line")
    rls.set_defaults(command=reputation_ls)

    queue_parser = commands.add_parser("queue", parents=[common], help="See the messages and deliveries in the spool.")
    queue_commands = queue_parser.add_subparsers(title="queue commands", metavar="COMMAND", required=True)
    qls = queue_commands.add_parser(
        "ls",
        parents=[common],
        help="List deliveries (one per recipient), oldest first.",
        description="List deliveries, oldest first. With --json: one JSON object per delivery and line "
        "(id, queue_id, message_id, sender, recipient, state, attempts, next_attempt_at, last_reply, ...).",
    )
    qls.add_argument("--state", choices=[s.value for s in State], help="only deliveries in this state")
    qls.add_argument("--provider", metavar="GROUP", help="only deliveries routed to this provider group")
    qls.add_argument("--json", action="store_true", help="one JSON object per delivery and line")
    qls.set_defaults(command=queue_ls)
    for action, text in (
        ("retry", "Make deliveries due now (they keep their attempt count)."),
        ("cancel", "Cancel deliveries that are waiting: they will not be sent."),
        ("bounce", "Bounce deliveries that are waiting, as a permanent failure."),
    ):
        act = queue_commands.add_parser(
            action,
            parents=[common],
            help=text,
            description=f"{text} Deliveries in flight or already final are left as they are and reported.",
        )
        act.add_argument("id", help="a delivery id (number), or a queue id (UUID) for all of its deliveries")
        act.set_defaults(command=queue_act, action=action)
    qroute = queue_commands.add_parser(
        "reroute",
        parents=[common],
        help="Send a provider group's mail from another source pool for a while.",
        description="A provider group's mail leaves from POOL instead of its own (a route's, a tenant's, a "
        "message's or the default), on every node within seconds, until --for runs out or --back.",
    )
    qroute.add_argument("--provider", required=True, metavar="GROUP", help=GROUP_HELP)
    qroute.add_argument("--pool", metavar="POOL", help="the [pools] table its mail leaves from meanwhile")
    qroute.add_argument("--for", dest="for_", type=_for, metavar="DURATION", help='e.g. "2h" (default: until --back)')
    qroute.add_argument("--reason", default="rerouted by an operator", help="said in suspensions ls")
    qroute.add_argument("--back", action="store_true", help="end the reroute now")
    qroute.set_defaults(command=queue_reroute)
    qshow = queue_commands.add_parser(
        "show", parents=[common], help="Show a message with its headers, deliveries and events."
    )
    qshow.add_argument("id", help="a queue id (UUID) or a delivery id (number)")
    qshow.add_argument("--json", action="store_true", help="one JSON object")
    qshow.set_defaults(command=queue_show)
    qpurge = queue_commands.add_parser(
        "purge",
        parents=[common],
        help="Delete now the messages received before a time whose every delivery is final.",
        description="Delete now, whatever the [retention] windows, the messages received before TIME whose "
        "every delivery is final (with their deliveries) and the events before TIME; messages with a delivery "
        "still waiting or in flight are kept and counted. Works in batches while the daemon runs, then "
        "VACUUMs those tables, so that the empty pages at their ends go back to the file system.",
    )
    qpurge.add_argument("--before", required=True, type=_before, metavar="TIME",
                        help='an ISO date or time ("2026-11-01", "2026-11-01T12:00+01:00"; UTC unless it says), '
                             'or a duration meaning that long ago ("3d", "12h")')  # fmt: skip
    qpurge.add_argument("--reindex", action="store_true",
                        help="then rebuild the indexes of messages, deliveries and events (without blocking "
                             "writes): retention reuses their emptied pages but never gives them back")  # fmt: skip
    qpurge.set_defaults(command=queue_purge)

    suppress_parser = commands.add_parser(
        "suppress", parents=[common], help="Manage the suppression lists: addresses mail must not go to again."
    )
    suppress_commands = suppress_parser.add_subparsers(title="suppress commands", metavar="COMMAND", required=True)
    tenant_help = "the tenant's list (default: the global list, which every tenant's mail obeys)"
    sadd = suppress_commands.add_parser(
        "add", parents=[common], help="Suppress an address.",
        description="Suppress an address for a tenant, or for every tenant (the global list). An address already "
        "suppressed keeps its entry unless the new reason is stronger (a complaint or an unsubscribe).",
    )  # fmt: skip
    sadd.add_argument("address")
    sadd.add_argument("--tenant", default="", help=tenant_help)
    sadd.add_argument("--reason", choices=REASONS, default="manual")
    sadd.add_argument("--note", help="why, for whoever reads the list later")
    sadd.add_argument("--until", type=_after, metavar="TIME",
                      help='when it stops applying: an ISO date or time, or a duration from now ("30d")')  # fmt: skip
    sadd.set_defaults(command=suppress_add)
    srm = suppress_commands.add_parser("rm", parents=[common], help="Remove an address from a list.")
    srm.add_argument("address")
    srm.add_argument("--tenant", default="", help=tenant_help)
    srm.set_defaults(command=suppress_rm)
    sls = suppress_commands.add_parser("ls", parents=[common], help="List suppressed addresses.")
    sls.add_argument("--tenant", help="only this tenant's list ('' for the global one; default: every list)")
    sls.add_argument("--reason", choices=REASONS)
    sls.add_argument("--json", action="store_true", help="one JSON object per address and line")
    sls.set_defaults(command=suppress_ls)
    simport = suppress_commands.add_parser(
        "import", parents=[common], help="Add the addresses of a CSV file.",
        description="Add the addresses of a CSV file with a header line: address,tenant,reason,created (tenant "
        "empty: the global list; reason empty: manual; created empty: now). Addresses already on their list "
        "stay as they are. All or nothing: a bad row is refused with its line number.",
    )  # fmt: skip
    simport.add_argument("file", type=Path, help="the CSV file, or - for standard input")
    simport.set_defaults(command=suppress_import)
    sexport = suppress_commands.add_parser(
        "export", parents=[common], help="Write every suppressed address as CSV (address,tenant,reason,created)."
    )
    sexport.add_argument("file", type=Path, nargs="?", help="the file to write (default: standard output)")
    sexport.set_defaults(command=suppress_export)

    webhooks_parser = commands.add_parser(
        "webhooks", parents=[common], help="Manage the tenants' webhook endpoints (signed, Standard Webhooks)."
    )
    webhook_commands = webhooks_parser.add_subparsers(title="webhooks commands", metavar="COMMAND", required=True)
    wadd = webhook_commands.add_parser(
        "add", parents=[common], help="Add an endpoint of a tenant; prints its secret once.",
        description="Add a webhook endpoint of TENANT at URL (http or https). Its secret (whsec_...) is printed "
        "once and kept sealed with the [accounts] key; a receiver verifies each request's webhook-signature "
        "with it (the standardwebhooks package).",
    )  # fmt: skip
    wadd.add_argument("tenant")
    wadd.add_argument("url")
    wadd.add_argument("--events", metavar="KIND,...", help="only these event kinds (default: every kind): "
                      + ", ".join(EVENT_KINDS))  # fmt: skip
    wadd.add_argument("--batch", type=int, default=1, metavar="N",
                      help="up to N events a request, as a JSON array, signed once (default 1: one event a request, "
                      "its object alone; at most 1000)")  # fmt: skip
    wadd.set_defaults(command=webhooks_add)
    wls = webhook_commands.add_parser("ls", parents=[common], help="List the endpoints (never their secrets).")
    wls.add_argument("--tenant", help="only this tenant's")
    wls.add_argument("--json", action="store_true", help="one JSON object per endpoint and line")
    wls.set_defaults(command=webhooks_ls)
    wrm = webhook_commands.add_parser("rm", parents=[common], help="Remove an endpoint.")
    wrm.add_argument("id", type=int)
    wrm.set_defaults(command=webhooks_rm)
    wrotate = webhook_commands.add_parser(
        "rotate-secret", parents=[common], help="Give an endpoint a new secret; the old one signs too for a while."
    )
    wrotate.add_argument("id", type=int)
    overlap_help = "until when the old secret signs too: a duration from now or a time (default 24h)"
    wrotate.add_argument("--overlap", type=_after, default="24h", metavar="TIME", help=overlap_help)
    wrotate.set_defaults(command=webhooks_rotate)
    wtest = webhook_commands.add_parser("test", parents=[common], help="Send an endpoint a test event now.")
    wtest.add_argument("id", type=int)
    wtest.set_defaults(command=webhooks_test)
    wreplay = webhook_commands.add_parser(
        "replay", parents=[common], help="Send a tenant's events since a time to its endpoints again."
    )
    wreplay.add_argument("tenant")
    wreplay.add_argument("--since", type=_before, metavar="TIME", required=True,
                         help='an ISO date or time, or a duration meaning that long ago ("2h")')  # fmt: skip
    wreplay.add_argument("--endpoint", type=int, help="only this endpoint (default: each that wants the event)")
    wreplay.set_defaults(command=webhooks_replay)

    events_parser = commands.add_parser("events", parents=[common], help="Read the event log.")
    events_commands = events_parser.add_subparsers(title="events commands", metavar="COMMAND", required=True)
    etail = events_commands.add_parser(
        "tail", parents=[common], help="Print the last events, then (with --follow) each new one.",
        description="Print the last events (or every event since a time), oldest first; with --follow, then each "
        "new event as it is written, until interrupted. With --json: one JSON object per line (id, at, kind, "
        "tenant, message, delivery, data).",
    )  # fmt: skip
    etail.add_argument("--kind", choices=EVENT_KINDS, help="only events of this kind")
    etail.add_argument("--tenant", help="only events of this tenant")
    since_help = 'every event since then: an ISO date or time, or a duration meaning that long ago ("1h")'
    etail.add_argument("--since", type=_before, metavar="TIME", help=since_help)
    etail.add_argument("-n", "--lines", type=int, default=10, help="how many of the last events (default 10)")
    etail.add_argument("--follow", "-f", action="store_true", help="then print each new event as it is written")
    etail.add_argument("--json", action="store_true", help="one JSON object per event and line")
    etail.set_defaults(command=events_tail)

    bounces_parser = commands.add_parser("bounces", parents=[common], help="See how mtad reads what comes back.")
    bounces_commands = bounces_parser.add_subparsers(title="bounces commands", metavar="COMMAND", required=True)
    bexplain = bounces_commands.add_parser(
        "explain", parents=[common], help="Print how mtad reads a message: a bounce and what it does with each "
        "recipient, complaints, a reply. With --config: by the configured reply table, and the delivery it "
        "matches in the spool.")  # fmt: skip
    bexplain.add_argument("file", metavar="FILE", help="the message as received (- for stdin)")
    bexplain.add_argument("--to", metavar="ADDRESS", help="the address the message was sent to (a VERP bounce "
                          "address names its delivery; with --config)")  # fmt: skip
    bexplain.add_argument("--json", action="store_true", help="one JSON object")
    bexplain.set_defaults(command=bounces_explain)

    dkim_parser = commands.add_parser("dkim", parents=[common], help="Manage DKIM signing keys.")
    dkim_commands = dkim_parser.add_subparsers(title="dkim commands", metavar="COMMAND", required=True)
    dgen = dkim_commands.add_parser(
        "keygen", parents=[common], help="Make a pending key for a domain and print the DNS record to publish."
    )
    dgen.add_argument("domain")
    dgen.add_argument("--alg", choices=ALGORITHMS, default="rsa2048")
    dgen.add_argument("--selector", help="default mtad-YYYYMM (-ed for ed25519)")
    dgen.set_defaults(command=dkim_keygen)
    dls = dkim_commands.add_parser("ls", parents=[common], help="List the keys and their states.")
    dls.add_argument("--json", action="store_true", help="one JSON object per key and line (with its record)")
    dls.set_defaults(command=dkim_ls)
    for name, text in (("activate", "Make a key sign (after its record is published)."),
                       ("revoke", "Stop a key for good.")):  # fmt: skip
        change = dkim_commands.add_parser(name, parents=[common], help=text)
        change.add_argument("domain")
        change.add_argument("selector")
        change.set_defaults(command=dkim_state, command_name=name)

    bucket_parser = commands.add_parser("buckets", parents=[common], help="See the shaping buckets.")
    bucket_commands = bucket_parser.add_subparsers(title="bucket commands", metavar="COMMAND", required=True)
    bls = bucket_commands.add_parser(
        "ls",
        parents=[common],
        help="List the buckets (provider group, source address) with their rate and sessions.",
        description="List the shaping buckets: the rate and session cap of all nodes together, "
        "when and by which node feedback last changed them, and what the live nodes are doing with "
        "them (sessions in flight, tokens, decreases and increases since each started). With --json "
        "one object per bucket and line; an unlimited rate is null.",
    )
    bls.add_argument("--json", action="store_true", help="one JSON object per bucket and line")
    bls.set_defaults(command=buckets_ls)

    account_parser = commands.add_parser(
        "accounts", parents=[common], help="Manage the sending accounts (mailboxes mail is relayed through)."
    )
    account_commands = account_parser.add_subparsers(title="account commands", metavar="COMMAND", required=True)
    akey = account_commands.add_parser("key", parents=[common], help="Print a new key for [accounts] key_file.")
    akey.set_defaults(command=accounts_key)
    aadd = account_commands.add_parser(
        "add",
        parents=[common],
        help="Add an account; its password or token is read from standard input.",
        description="Add a sending account. The secret (password, or OAuth token for xoauth2) is the first "
        "line of standard input; it is stored sealed with the [accounts] key and never printed.",
    )
    aadd.add_argument("name", help="the account's name: letters, digits, '.', '_', '@', '+', '-'")
    aadd.add_argument("--address", required=True, help="the mailbox, local@domain")
    aadd.add_argument("--pool", required=True, help="the account pool it belongs to")
    aadd.add_argument("--host", required=True, help="the smarthost, e.g. smtp.gmail.com")
    aadd.add_argument("--port", type=int, default=587, help="587 (STARTTLS, the default) or 465 (implicit TLS)")
    aadd.add_argument("--tls", choices=TLS_MODES, default="starttls")
    aadd.add_argument("--login", required=True, help="the AUTH user name")
    aadd.add_argument("--mechanism", choices=MECHANISMS, default="plain")
    aadd.add_argument("--token-url", help="xoauth2: the token endpoint: google, microsoft, or an https URL")
    aadd.add_argument("--client-id", help="xoauth2: the OAuth client the refresh token was issued to (its secret, "
                      "if it has one, is the second line of standard input)")  # fmt: skip
    aadd.add_argument("--scope", help="xoauth2: the scope to ask for (Microsoft wants one)")
    pool_note = "; the pool's [account_pools] table gives what is not given, else no limit"
    aadd.add_argument("--daily-cap", type=int, help="recipients per day (reset at 00:00 in --time-zone)" + pool_note)
    aadd.add_argument("--min-gap", type=float, help="seconds from the answer to one send to the next send")
    aadd.add_argument("--jitter", metavar="LOW:HIGH", help="seconds drawn per send and added to --min-gap")
    aadd.add_argument("--per-second", type=int, help="recipients in any second")
    aadd.add_argument("--per-minute", type=int, help="recipients in any minute")
    aadd.add_argument("--per-hour", type=int, help="recipients in any hour")
    aadd.add_argument("--time-zone", help="an IANA time zone (default: the pool's, else UTC)")
    _imap_arguments(aadd, "the IMAP server of its inbox, read for bounces and replies (implicit TLS; default: "
                          "the provider's for Google and Microsoft smarthosts; none: not read)")  # fmt: skip
    aadd.set_defaults(command=accounts_add)
    ainbox = account_commands.add_parser(
        "inbox", parents=[common], help="Read an account's inbox at an IMAP server (none: stop reading it)."
    )
    ainbox.add_argument("name")
    _imap_arguments(ainbox, "the IMAP server of its inbox (implicit TLS), or none", required=True)
    ainbox.set_defaults(command=accounts_inbox)
    als = account_commands.add_parser(
        "ls", parents=[common], help="List the accounts with today's recipients, last send and state."
    )
    als.add_argument("--pool", help="only this account pool")
    als.add_argument("--json", action="store_true", help="one JSON object per account and line")
    als.set_defaults(command=accounts_ls)
    ashow = account_commands.add_parser("show", parents=[common], help="Show one account (never its secret).")
    ashow.add_argument("name")
    ashow.add_argument("--json", action="store_true", help="one JSON object")
    ashow.set_defaults(command=accounts_show)
    for name, text in (("enable", "Make an account active again."), ("disable", "Stop an account until enabled.")):
        change = account_commands.add_parser(name, parents=[common], help=text)
        change.add_argument("name")
        change.add_argument("--reason", help="recorded with the state")
        change.set_defaults(command=accounts_state, command_name=name)
    atest = account_commands.add_parser(
        "test", parents=[common], help="Log in to the account's smarthost without sending anything."
    )
    atest.add_argument("name")
    atest.set_defaults(command=accounts_test)
    return parser


# The commands that load the whole configuration; the others load its basics.
def _imap_arguments(parser: argparse.ArgumentParser, text: str, required: bool = False) -> None:
    parser.add_argument("--imap-host", required=required, help=text)
    parser.add_argument("--imap-port", type=_port, default=993, help="the IMAP server's port (default 993)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 1-65535, got {text!r}")
    return port


_WHOLE_CONFIG = (run, check_config, reload_cmd, accounts_add, accounts_test, queue_purge, webhooks_test, tls_report,
                 bounces_explain)  # fmt: skip


def entry_point() -> None:
    sys.exit(main())
