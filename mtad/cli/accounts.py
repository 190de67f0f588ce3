"""`mtad accounts`: the sending accounts (mailboxes mail is relayed through), their key,
limits, inboxes and state, and a login to try one."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config
    from mtad.base import vault

# The parser's choices, spelled here so that parsing imports no domain module
# (tests/unit/test_cli_imports.py holds them equal to the enums).
TLS_MODES = ("starttls", "implicit")  # accounts.Tls
MECHANISMS = ("plain", "login", "xoauth2")  # accounts.Mechanism
_COLUMNS = [
    "name", "pool", "address", "smarthost", "state", "until", "today", "daily_cap", "last_send", "sending", "health",
    "inbox",
]  # fmt: skip
_T = TypeVar("_T")


def register(commands: common.Commands) -> None:
    accounts = commands.group(
        "accounts", "Manage the sending accounts (mailboxes mail is relayed through).",
        title="account commands", metavar="COMMAND", required=True,
    )  # fmt: skip
    accounts.add("key", common.Command(key, common.Config.NONE), help="Print a new key for [accounts] key_file.")
    _register_add(accounts)
    ainbox = accounts.add(
        "inbox", common.Command(inbox), help="Read an account's inbox at an IMAP server (none: stop reading it)."
    )
    ainbox.add_argument("name")
    _imap_arguments(ainbox, "the IMAP server of its inbox (implicit TLS), or none", required=True)
    als = accounts.add(
        "ls", common.Command(ls, names=True), help="List the accounts with today's recipients, last send and state."
    )
    als.add_argument("--pool", help="only this account pool")
    als.add_argument("--json", action="store_true", help="one JSON object per account and line")
    ashow = accounts.add("show", common.Command(show), help="Show one account (never its secret).")
    ashow.add_argument("name")
    ashow.add_argument("--json", action="store_true", help="one JSON object")
    for name, text in (("enable", "Make an account active again."), ("disable", "Stop an account until enabled.")):
        change = accounts.add(name, common.Command(state), help=text)
        change.add_argument("name")
        change.add_argument("--reason", help="recorded with the state")
        change.set_defaults(command_name=name)
    atest = accounts.add(
        "test", common.Command(test, common.Config.WHOLE),
        help="Log in to the account's smarthost without sending anything.",
    )  # fmt: skip
    atest.add_argument("name")


def _register_add(accounts: common.Commands) -> None:
    aadd = accounts.add(
        "add",
        common.Command(add, common.Config.WHOLE),
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


def key(args: argparse.Namespace) -> int:
    """A new key for [accounts] key_file (printed; put it in a file only mtad reads)."""
    from mtad.base import vault

    print(vault.Vault.new_key().decode())
    return common.EXIT_OK


async def add(args: argparse.Namespace, settings: config.Settings) -> int:
    """Add an account; what its pool's [account_pools] table gives fills the limits not given."""
    from mtad.base import vault
    from mtad.mailboxes import accounts, inboxes

    secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise errors.UsageError("give the account's password or token on standard input (one line)")
    sealer = common.sealer(settings)
    pools = settings.delivery.relay.pools
    pool = pools.get(args.pool)
    if pool is None:
        known = ", ".join(sorted(pools)) or "none"
        raise errors.UsageError(f"--pool: no account pool named {args.pool!r} (configured: {known})"
                                f"{_did_you_mean(args.pool, pools)}; add an [account_pools.{args.pool}] table "
                                "to the configuration")  # fmt: skip
    jitter = pool.defaults.jitter
    if args.jitter:
        low, _, high = args.jitter.partition(":")
        try:
            jitter = (float(low), float(high or low))
        except ValueError:
            raise errors.UsageError(f"--jitter: expected LOW:HIGH seconds, got {args.jitter!r}") from None
    oauth_client = None
    if args.mechanism == accounts.Mechanism.XOAUTH2.value:
        oauth_client = _oauth_client(args, sealer)
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
    async with common.spool(settings) as opened:
        stored = await accounts.add(opened.database, account)
        await accounts.set_secret(opened.database, stored.name, sealer.seal(vault.Secret(secret)))
        if oauth_client is not None:
            await accounts.set_oauth(opened.database, stored.name, *oauth_client)
        if imap_host is not None:
            await inboxes.configure(opened.database, stored.id, imap_host, args.imap_port)
    inbox = f"; its inbox is read at {imap_host}:{args.imap_port}" if imap_host else ""
    print(f"account {stored.name} added to pool {stored.pool}{inbox}")
    return common.EXIT_OK


def _oauth_client(args: argparse.Namespace, sealer: vault.Vault) -> tuple[str, str, bytes | None, str | None]:
    """An xoauth2 account's token URL, client id, sealed client secret (the second line of
    standard input, if any) and scope; UsageError when --token-url or --client-id is missing."""
    from mtad.base import vault
    from mtad.mailboxes import oauth

    if not args.token_url or not args.client_id:
        raise errors.UsageError(
            "--mechanism xoauth2 needs --token-url (google, microsoft or a URL) and "
            "--client-id; the secret is the refresh token"
        )
    client_secret = sys.stdin.readline().rstrip("\r\n")  # optional: a confidential client's secret
    token_urls = {"google": oauth.GOOGLE, "microsoft": oauth.MICROSOFT}
    return (token_urls.get(args.token_url, args.token_url), args.client_id,
            sealer.seal(vault.Secret(client_secret)) if client_secret else None, args.scope)  # fmt: skip


def _given(value: _T | None, default: _T | None) -> _T | None:
    return default if value is None else value


def _did_you_mean(word: str, options: Iterable[str]) -> str:
    from mtad.base import values

    return values.did_you_mean(word, options)


async def inbox(args: argparse.Namespace, settings: config.Basics) -> int:
    """Read an account's inbox at an IMAP server, or (none) stop reading it."""
    from mtad.admin import names
    from mtad.mailboxes import accounts, inboxes

    async with common.spool(settings) as opened:
        await names.account(opened.database, args.name)
        account = await accounts.get(opened.database, args.name)
        if args.imap_host == "none":
            was = await inboxes.remove(opened.database, account.id)
            print(f"account {account.name}: its inbox is {'no longer' if was else 'not'} read")
            return common.EXIT_OK
        await inboxes.configure(opened.database, account.id, args.imap_host, args.imap_port)
    print(f"account {account.name}: its inbox is read at {args.imap_host}:{args.imap_port}")
    return common.EXIT_OK


async def ls(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.mailboxes import accounts, inboxes

    now = datetime.now(UTC)
    if args.pool is not None:
        names.account_pool(args.pool, common.configured(settings))
    async with common.spool(settings) as opened:
        read = {i.account: i for i in await inboxes.listing(opened.database)}
        rows = [views.account(u, now, read.get(u.account.id)) for u in await accounts.usage(opened.database, now,
                                                                                              args.pool)]  # fmt: skip
    common.print_rows(rows, args.json, _COLUMNS)
    return common.EXIT_OK


async def show(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import names, views
    from mtad.mailboxes import accounts, inboxes

    now = datetime.now(UTC)
    async with common.spool(settings) as opened:
        await names.account(opened.database, args.name)
        account = await accounts.get(opened.database, args.name)
        [use] = [u for u in await accounts.usage(opened.database, now, account.pool) if u.account.id == account.id]
        read = await inboxes.listing(opened.database, account.id)
    row = views.account(use, now, read[0] if read else None)
    if args.json:
        print(common.json_line(row))
    else:
        for field, value in row.items():
            print(f"{field + ':':<14} {common.text(value)}")
    return common.EXIT_OK


async def state(args: argparse.Namespace, settings: config.Basics) -> int:
    from mtad.admin import control, names
    from mtad.mailboxes import accounts

    now = datetime.now(UTC)
    released = None
    async with common.spool(settings) as opened:
        await names.account(opened.database, args.name)
        if args.command_name == "enable":
            account, released = await control.enable(opened.database, args.name, args.reason, now)
        else:
            account = await accounts.disable(opened.database, args.name, args.reason, now)
        acks = await common.held(opened.database, settings)
    print(f"account {account.name} is {account.state.value}"
          + (f"; {released} deliveries of pool {account.pool} due now" if released else ""))  # fmt: skip
    common.told(acks)
    return common.EXIT_OK


async def test(args: argparse.Namespace, settings: config.Settings) -> int:
    """Log in to the account's smarthost without sending anything (an XOAUTH2 account
    first exchanges its refresh token for an access token)."""
    from mtad.admin import names
    from mtad.mailboxes import accounts, relay
    from mtad.outbound import sessions

    sealer = common.sealer(settings)
    async with common.spool(settings) as opened:
        await names.account(opened.database, args.name)
        account = await accounts.get(opened.database, args.name)
        mailboxes = relay.Mailboxes(opened.database, settings.delivery.relay, sealer)
        try:
            login = await mailboxes.login(account)
        except relay.LoginFailed as failed:
            print(f"account {account.name}: no login: {failed.why}")
            return common.EXIT_FAILED
    pool = sessions.Pool(sessions.Settings(ehlo_hostname=settings.submission.hostname))
    result = await pool.check_login(relay.target(account), login)
    if result.failure is None and not result.replies:
        print(f"account {account.name}: logged in to {account.host}:{account.port} over {result.tls}")
        return common.EXIT_OK
    why = result.replies[""].line() if result.replies else result.failure.value if result.failure else "?"
    print(f"account {account.name}: {account.host}:{account.port} refused: {why}")
    return common.EXIT_FAILED
