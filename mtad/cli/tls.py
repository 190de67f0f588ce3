"""`mtad tls`: the recipient domains' TLS policies as kept in the spool, and the TLS reports."""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from mtad.base import errors
from mtad.cli import common

if TYPE_CHECKING:
    from mtad import config


def register(commands: common.Commands) -> None:
    tls = commands.group("tls", "See the recipient domains' TLS policies.", dest="tls_command", required=True)
    tlshow = tls.add(
        "show", common.Command(show),
        help="A domain's MTA-STS policy as cached: mode, mx, fetched, expires, last failure.",
    )  # fmt: skip
    tlshow.add_argument("domain", type=_domain_name)
    tlshow.add_argument("--json", action="store_true", help="one JSON object")
    tlreport = tls.add(
        "report", common.Command(report, common.Config.WHOLE),
        help="Send the TLS reports (RFC 8460) due now: of the days before today, or of --day (today: so far).",
    )  # fmt: skip
    tlreport.add_argument("--day", type=_day, default=None, help="YYYY-MM-DD or today")


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


async def show(args: argparse.Namespace, settings: config.Basics) -> int:
    """A recipient domain's MTA-STS policy as kept in the spool, with its last failure."""
    from mtad.outbound import policies

    async with common.spool(settings) as opened:
        kept = await policies.cached(opened.database, args.domain)
    now = datetime.now(UTC)
    shown = (kept or policies.Cached(args.domain, None, None, None, None)).describe(now)
    if args.json:
        print(common.json_line(shown))
        return common.EXIT_OK
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
    return common.EXIT_OK


async def report(args: argparse.Namespace, settings: config.Settings) -> int:
    """Send the TLS reports due now (the days before today), or those of one day."""
    from mtad.outbound import fetching, routing, tlsrpt

    out = settings.delivery
    resolver = routing.DnsResolver(out.nameservers, timeout=out.dns_timeout)
    day = datetime.now(UTC).date() if args.day == "today" else args.day
    async with common.spool(settings) as opened:
        reporter = tlsrpt.Reporter(opened.database, resolver, out.tls_reports, settings.submission.hostname,
                                   https_tls=fetching.trust(out.tls.ca_file))  # fmt: skip
        made = await reporter.report_due(day)
        for day_of, domain in made:
            sent = await opened.database.fetchrow("tls/report_of", day_of, domain)
            assert sent is not None
            to = ", ".join(sent["sent_to"]) or "nowhere"
            failures = "; ".join(sent["failures"])
            line = f"{day_of} {domain}: report {sent['report_id']} sent to {to}"
            print(line + (f" ({failures})" if failures else ""))
    if not made:
        print("no TLS report due")
    return common.EXIT_OK
