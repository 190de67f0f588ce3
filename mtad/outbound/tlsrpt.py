"""SMTP TLS reporting (RFC 8460): what became of the sessions made under recipient
domains' TLS policies, reported to them once a day.

Delivery counts each new session under a policy (`count()`, one row written per
session, beside the send) into the day's rows (`tls_report_counts`).
`Reporter.run()` looks every `every` seconds: for each UTC day before today with
sessions counted and no report yet, it claims the report (`tls_reports`: one per domain and
day for the whole cluster), looks up the domain's `_smtp._tls` TXT record
(`v=TLSRPTv1; rua=...`) and sends the JSON report, gzipped: by mail through
mtad's own spool for `mailto:` (RFC 8460 5.3, with an idempotency key, so a
report is spooled once), and by HTTPS POST for `https:` (5.4). A domain with
no such record gets no report; its counts are kept `keep_days` all the same.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import ssl
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Any

import structlog

from mtad import db
from mtad.base import envelope, errors, metrics
from mtad.outbound import http_client, mtasts, policies, routing, settings
from mtad.spool import commit

log = structlog.get_logger("mtad.tlsrpt")

MEDIA_TYPE = "application/tlsrpt+gzip"
_POLICY_TYPES = {policies.Kind.MTA_STS: "sts", policies.Kind.DANE: "tlsa"}
_VERSION = re.compile(r"^v=TLSRPTv1[ \t]*;")


# Declared in settings.py: the configuration builds it without loading this module.
Settings = settings.ReportSettings


def rua(values: Sequence[str]) -> list[str]:
    """The report URIs of a domain's `_smtp._tls` TXT records (RFC 8460 3): none
    unless exactly one record starts with "v=TLSRPTv1"; mailto: and https: only."""
    records = [text for text in map(routing.txt_text, values) if _VERSION.match(text)]
    if len(records) != 1:
        return []
    for part in records[0].split(";"):
        key, equals, value = part.strip().partition("=")
        if equals and key.strip() == "rua":
            uris = [uri.strip() for uri in value.split(",")]
            return [u for u in uris if u.lower().startswith(("mailto:", "https://"))]
    return []


async def count(
    database: db.Database,
    at: datetime,
    domain: str,
    kind: policies.Kind,
    mx_host: str,
    receiving: str,
    sending: str | None,
    failed: policies.Failed | None,
) -> None:
    """Count one session opened under `domain`'s policy: a success, or a failure of its
    result type. One row written per new session (sessions carry many messages)."""
    policy_type = _POLICY_TYPES[kind]
    result = failed.result if failed is not None else "success"
    metrics.TLS_POLICY_SESSIONS.labels(policy=policy_type, result=result).inc()
    await database.execute("tls/count", [at.date()], [domain], [policy_type], [result], [mx_host], [receiving],
                           [sending or ""], [failed.text[:500] if failed else ""], [1])  # fmt: skip


def failures(database: db.Database) -> Callable[[str, str, policies.Failed], Awaitable[None]]:
    """What counts an MTA-STS failure that opened no session (policies.Policies'
    count_failure): a policy that could not be fetched, or no MX host it allows."""

    async def failed(domain: str, mx_host: str, why: policies.Failed) -> None:
        await count(database, datetime.now(UTC), domain, policies.Kind.MTA_STS, mx_host, "", None, why)

    return failed


def report(
    domain: str,
    day: date,
    rows: Sequence[db.Row],
    sts: policies.Cached | None,
    settings: Settings,
    report_id: str,
) -> dict[str, Any]:
    """The JSON report of one domain and day (RFC 8460 4)."""
    start = datetime.combine(day, time(0, 0), UTC)
    by_type: dict[str, list[db.Row]] = {}
    for row in rows:
        by_type.setdefault(row["policy_type"], []).append(row)
    entries = []
    for policy_type, typed in sorted(by_type.items()):
        policy: dict[str, Any] = {"policy-type": policy_type, "policy-domain": domain}
        if policy_type == "sts" and sts is not None and sts.policy is not None:
            policy["policy-string"] = _policy_lines(sts.policy)
            policy["mx-host"] = list(sts.policy.mx)
        else:
            policy["mx-host"] = sorted({r["mx_host"] for r in typed})
        ok = sum(r["sessions"] for r in typed if r["result"] == "success")
        failed = [r for r in typed if r["result"] != "success"]
        entry: dict[str, Any] = {
            "policy": policy,
            "summary": {
                "total-successful-session-count": ok,
                "total-failure-session-count": sum(r["sessions"] for r in failed),
            },
        }
        if failed:
            entry["failure-details"] = [_detail(r) for r in failed]
        entries.append(entry)
    return {
        "organization-name": settings.organization,
        "date-range": {
            "start-datetime": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end-datetime": (start + timedelta(days=1) - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "contact-info": settings.contact or settings.sender,
        "report-id": report_id,
        "policies": entries,
    }


def _policy_lines(policy: mtasts.Policy) -> list[str]:
    return ["version: STSv1", f"mode: {policy.mode.value}", *(f"mx: {mx}" for mx in policy.mx),
            f"max_age: {policy.max_age}"]  # fmt: skip


def _detail(row: db.Row) -> dict[str, Any]:
    detail: dict[str, Any] = {"result-type": row["result"], "failed-session-count": row["sessions"]}
    if row["mx_host"]:  # none for a policy that could not be fetched
        detail["receiving-mx-hostname"] = row["mx_host"]
    if row["sending_ip"]:
        detail["sending-mta-ip"] = row["sending_ip"]
    if row["receiving_ip"]:
        detail["receiving-ip"] = row["receiving_ip"]
    if row["detail"]:
        detail["additional-information"] = row["detail"]
    return detail


def mail(report_json: dict[str, Any], domain: str, to: str, settings: Settings, hostname: str) -> bytes:
    """The report as a message (RFC 8460 5.3): multipart/report of type tlsrpt, a
    note, then the gzipped JSON."""
    begin = report_json["date-range"]["start-datetime"]
    end = report_json["date-range"]["end-datetime"]
    report_id = report_json["report-id"]
    message = EmailMessage()
    message["From"] = settings.sender
    message["To"] = to
    message["Subject"] = f"Report Domain: {domain} Submitter: {settings.organization} Report-ID: <{report_id}>"
    message["Date"] = format_datetime(datetime.now(UTC))
    message["Message-ID"] = make_msgid(domain=hostname)
    message["TLS-Report-Domain"] = domain
    message["TLS-Report-Submitter"] = settings.organization
    message.set_content(f"The TLS report of {domain} for {begin} to {end}, from {settings.organization}.\n")
    name = f"{settings.organization}!{domain}!{_stamp(begin)}!{_stamp(end)}!{report_id}.json.gz"
    message.add_attachment(gzip.compress(json.dumps(report_json).encode()), maintype="application",
                           subtype="tlsrpt+gzip", filename=name)  # fmt: skip
    message.replace_header("Content-Type", 'multipart/report; report-type="tlsrpt"')
    message.set_boundary(f"tlsrpt-{uuid.uuid4().hex}")
    return message.as_bytes(policy=message.policy.clone(linesep="\r\n"))


def _stamp(iso: str) -> int:
    return int(datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())


class Reporter:
    """Flushes the counts and sends the reports of past days; owned by the daemon's
    TaskGroup (`run`), or driven by `report_due` (tests, tools)."""

    def __init__(
        self,
        database: db.Database,
        resolver: routing.Resolver,
        settings: Settings,
        hostname: str,
        *,
        https_tls: ssl.SSLContext | None = None,  # for https: report URIs (None: the system's trust store)
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._db = database
        self._resolver = resolver
        self.settings = settings
        self._hostname = hostname
        self._https_tls = https_tls
        self._now = now

    async def run(self) -> None:
        while self.settings.enabled:
            try:
                await self.report_due()
            except errors.SpoolError as exc:
                log.warning("tls_reports_waiting", error=str(exc))
            await asyncio.sleep(self.settings.every)

    async def report_due(self, day: date | None = None) -> list[tuple[date, str]]:
        """Send every report due now: of the days before today, or of `day` alone (today
        included: what was counted so far; a day's report is sent once). Returns the
        (day, domain) of those this node made."""
        first, last = (date.min, self._now().date()) if day is None else (day, day + timedelta(days=1))
        made = []
        for row in await self._db.fetch("tls/due", first, last):
            day, domain = row["day"], row["domain"]
            report_id = f"{day.isoformat()}.{domain}.{uuid.uuid4().hex[:12]}@{self._hostname}"
            if await self._db.fetchval("tls/claim", day, domain, report_id, self._now()) is None:
                continue  # another node's
            await self._send(day, domain, report_id)
            made.append((day, domain))
        return made

    async def _send(self, day: date, domain: str, report_id: str) -> None:
        rows = await self._db.fetch("tls/counts_of", day, domain)
        sts = await policies.cached(self._db, domain)
        report_json = report(domain, day, rows, sts, self.settings, report_id)
        try:
            answer = await self._resolver.lookup(f"_smtp._tls.{domain}", "TXT")
            uris = rua(answer.values)
        except errors.RouteTempFail as exc:
            uris, failures = [], [f"_smtp._tls.{domain}: {exc}"]
        else:
            failures = [] if uris else [f"_smtp._tls.{domain} names no report address"]
        sent = []
        for uri in uris:
            try:
                if uri.lower().startswith("mailto:"):
                    await self._mail(report_json, domain, uri[len("mailto:") :].split("?")[0], day)
                else:
                    await self._post(report_json, uri)
            except (errors.MtadError, ValueError) as exc:  # an HttpError's text names its cause
                failures.append(f"{uri}: {exc}" if isinstance(exc, errors.HttpError) else
                                f"{uri}: {type(exc).__name__}: {exc}")  # fmt: skip
                continue
            sent.append(uri)
        await self._db.execute("tls/reported", day, domain, sent, failures, self.settings.keep_days)
        log.info("tls_report", domain=domain, day=day.isoformat(), report_id=report_id, sent_to=sent,
                 failures=failures)  # fmt: skip

    async def _mail(self, report_json: dict[str, Any], domain: str, to: str, day: date) -> None:
        recipient = envelope.parse_mailbox(to)
        body = mail(report_json, domain, str(recipient), self.settings, self._hostname)
        queue_id = commit.new_queue_id()
        now = self._now()
        message = commit.NewMessage(
            id=queue_id, tenant=self.settings.tenant, sender="", recipients=(recipient,),
            message_id=f"<{queue_id.hex}@{self._hostname}>", idempotency_key=f"key:tlsrpt:{domain}:{day}:{recipient}",
            body=body, client_address="127.0.0.1", received_at=now,
        )  # fmt: skip
        await self._db.fetchrow("spool/accept", *commit.accept_arguments([message], now, now + timedelta(days=7),
                                                                         None, None))  # fmt: skip

    async def _post(self, report_json: dict[str, Any], uri: str) -> None:
        body = gzip.compress(json.dumps(report_json).encode())
        async with http_client.Client(resolver=self._resolver, tls=self._https_tls,
                                      timeout=self.settings.post_timeout) as client:  # fmt: skip
            answer = await client.request("POST", uri, body=body, headers={"Content-Type": MEDIA_TYPE})
        if not 200 <= answer.status < 300:
            raise ValueError(f"answered HTTP {answer.status}")
