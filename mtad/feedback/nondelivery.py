"""Non-delivery reports: the envelope sender hears that its mail did not arrive.

The `nondelivery` event consumer answers each delivery that bounced (in the SMTP
session, or a failure reported after the 250, not a delay notice) and each that
failed (its retries ran out) with a DSN (RFC 3464: multipart/report with a human part, the
message/delivery-status part and the original's headers) from MAILER-DAEMON at
the node's hostname to the original's envelope sender, with a null envelope sender
so that it can never bounce back. It is spooled in the consumer's transaction, so
each is written once; it goes out like any mail. The recipients of one message that
end in the same batch (those of one attempt, typically) share one report. None is
sent for mail with a null
sender (never a DSN about a DSN), nor for a tenant that set `dsn = false` (it hears
by webhook instead). With `[reports] delayed_after`, a delivery still deferred that
long after its message came gets its sender one notice (Action: delayed).
"""

from __future__ import annotations

import email.utils
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import Message
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.policy import SMTP

import structlog

from mtad import db
from mtad.base import envelope, events
from mtad.feedback import consumers, signals
from mtad.spool import commit

log = structlog.get_logger("mtad.nondelivery")

HEADERS = 64 * 1024  # octets of the original returned at most (its headers only)
_STATUS = re.compile(r"\b([245]\.\d{1,3}\.\d{1,3})\b")
EXPIRED = "5.4.7"  # RFC 3463: delivery time expired
KEYS_KEPT = timedelta(days=30)  # longer than any delivery is retried


@dataclass(frozen=True, slots=True)
class Failed:
    """One recipient of a report: its address, status and the last reply."""

    recipient: str
    status: str
    reply: str


@dataclass(frozen=True, slots=True)
class Original:
    id: uuid.UUID
    tenant: str
    sender: str
    message_id: str
    received_at: datetime
    headers: bytes


class Reporter:
    """The event consumer that writes the non-delivery reports."""

    name = "nondelivery"

    def __init__(
        self,
        hostname: str,
        reports: Callable[[str], bool] = lambda tenant: True,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        delayed_after: float | None = None,
    ) -> None:
        self._hostname = hostname
        self._reports = reports  # whether a tenant's senders get reports ([tenants."T"] dsn)
        self._now = now
        self._delayed_after = timedelta(seconds=delayed_after) if delayed_after is not None else None
        wanted = {events.Kind.BOUNCED, events.Kind.FAILED} | ({events.Kind.DEFERRED} if delayed_after else set())
        self.kinds: frozenset[str] | None = frozenset(kind.value for kind in wanted)

    async def handle(self, conn: db.Connection, batch: Sequence[consumers.Stored]) -> None:
        due = [event for event in batch if self._due(event)]
        if not due:
            return
        messages: list[commit.NewMessage] = []
        originals: dict[uuid.UUID, Original | None] = {}
        failures: dict[uuid.UUID, list[tuple[consumers.Stored, Failed]]] = {}  # by message, in event order
        for event in due:
            assert event.message is not None
            if event.message not in originals:
                originals[event.message] = await _original(conn, event.message)
            original = originals[event.message]
            if original is None or not original.sender or not self._reports(original.tenant):
                continue  # gone, a null sender (a DSN itself), or the tenant hears by webhook
            delayed = event.kind == events.Kind.DEFERRED.value
            if delayed and not self._late(event, original):
                continue
            ended = await conn.fetchrow("feedback/outcome", event.delivery) if event.delivery else None
            failed = _failed(event, ended)
            if delayed:  # one notice per delivery: its key outlives the retries
                messages.append(self._report([failed], original, event.at, f"delayed:{event.delivery}", True))
            else:
                failures.setdefault(event.message, []).append((event, failed))
        for message, found in failures.items():
            original = originals[message]
            assert original is not None
            first = found[0][0]  # the report's key: its first event's
            messages.append(self._report([f for _, f in found], original, first.at, f"ndr:{first.id}", False))
        if messages:
            now = self._now()
            keys_until = now + KEYS_KEPT  # a delay notice's key holds while its delivery is retried
            await conn.fetchrow("spool/accept", *commit.accept_arguments(messages, now, keys_until, None, None))
            log.info("nondelivery_reports", count=len(messages))

    def _late(self, event: consumers.Stored, original: Original) -> bool:
        """A deferral long enough after the message came for a delay notice."""
        return self._delayed_after is not None and event.at - original.received_at >= self._delayed_after

    def _due(self, event: consumers.Stored) -> bool:
        if event.message is None or not event.data.get("recipient"):
            return False
        if event.kind == events.Kind.DEFERRED.value:
            return self._delayed_after is not None
        if event.kind == events.Kind.BOUNCED.value and event.data.get("async"):
            if "action" in event.data:  # a delay notice that came back is no failure
                return bool(event.data["action"] != signals.DELAYED)
            return event.data.get("hard", True) is not False  # recorded before bounces had an action
        return True

    def _report(self, failed: Sequence[Failed], original: Original, at: datetime, key: str,
                delayed: bool) -> commit.NewMessage:  # fmt: skip
        queue_id = commit.new_queue_id()
        message_id = f"<{queue_id.hex}@{self._hostname}>"
        body = build(self._hostname, original, failed, at, message_id, delayed=delayed)
        return commit.NewMessage(
            id=queue_id, tenant=original.tenant, sender="", recipients=(envelope.parse_mailbox(original.sender),),
            message_id=message_id, idempotency_key=key, body=body, client_address="127.0.0.1", received_at=self._now(),
        )  # fmt: skip


def _failed(event: consumers.Stored, ended: db.Row | None) -> Failed:
    """What a report says of the recipient of an event (and of its delivery's end)."""
    reply = str(event.data.get("reply") or "")
    status = event.data.get("status") or _status(reply)
    delayed = event.kind == events.Kind.DEFERRED.value
    gave_up = event.kind == events.Kind.FAILED.value or (ended is not None and ended["reason"] == "expired")
    if ended is not None and not reply and ended["last_code"] is not None and not delayed:
        reply = f"{ended['last_code']} {ended['last_enhanced'] or ''} {ended['last_text'] or ''}".replace("  ", " ")
        status = status or ended["last_enhanced"]
    if gave_up:  # retried until the end: a permanent failure now, with the last temporary reason
        status = "5" + status[1:] if status and status[0] in "45" else EXPIRED
    return Failed(str(event.data["recipient"]), status or ("4.0.0" if delayed else "5.0.0"), reply)


def build(
    hostname: str,
    original: Original,
    failed: Sequence[Failed],
    at: datetime,
    message_id: str,
    *,
    delayed: bool = False,
) -> bytes:
    """The DSN of some recipients of one message (RFC 3464), as sent: a failure, or
    (delayed) a notice that the message is still being retried."""
    listed = "".join(f"\n<{f.recipient}>:\n    {f.reply or ('no answer' if delayed else 'delivery failed')}\n"
                     for f in failed)  # fmt: skip
    if delayed:
        said = (f"This is the mail system at host {hostname}.\n\nYour message {original.message_id} has not been "
                f"delivered yet; it is still being retried:\n{listed}\nYou need not send it again.\n")  # fmt: skip
    else:
        said = (f"This is the mail system at host {hostname}.\n\nYour message {original.message_id} could not be "
                f"delivered to {'this recipient' if len(failed) == 1 else 'these recipients'}:\n{listed}")  # fmt: skip
    text = MIMEText(said, "plain", "us-ascii" if said.isascii() else "utf-8")
    per_message = Message()
    per_message["Reporting-MTA"] = f"dns; {hostname}"
    per_message["Arrival-Date"] = email.utils.format_datetime(original.received_at)
    groups: list[Message | str] = [per_message]
    for f in failed:
        per_recipient = Message()
        per_recipient["Final-Recipient"] = f"rfc822; {f.recipient}"
        per_recipient["Action"] = "delayed" if delayed else "failed"
        per_recipient["Status"] = f.status
        if f.reply:  # a field of ASCII (RFC 3464): what is not is shown as "?"; the text part has it whole
            per_recipient["Diagnostic-Code"] = f"smtp; {f.reply.encode('ascii', 'replace').decode()}"
        groups.append(per_recipient)
    status_part = Message()
    status_part["Content-Type"] = "message/delivery-status"
    status_part.set_payload(groups)
    headers = MIMEText("", "rfc822-headers")
    headers.set_payload(original.headers.decode("utf-8", "replace"))
    del headers["Content-Transfer-Encoding"]
    report = MIMEMultipart("report", report_type="delivery-status")
    report["From"] = f"Mail Delivery System <MAILER-DAEMON@{hostname}>"
    report["To"] = original.sender
    report["Subject"] = "Delayed Mail (still being retried)" if delayed else "Undelivered Mail Returned to Sender"
    report["Date"] = email.utils.format_datetime(at)
    report["Message-ID"] = message_id
    report["Auto-Submitted"] = "auto-replied"
    report["In-Reply-To"] = original.message_id
    report["References"] = original.message_id
    for part in (text, status_part, headers):
        report.attach(part)
    return report.as_bytes(policy=SMTP)


async def _original(conn: db.Connection, message: uuid.UUID) -> Original | None:
    row = await conn.fetchrow("spool/get_message", message, HEADERS)
    if row is None:
        return None
    head = bytes(row["head"])
    end = head.find(b"\r\n\r\n")
    return Original(row["id"], row["tenant"], row["sender"], row["message_id"], row["received_at"],
                    head[: end + 2] if end >= 0 else head)  # fmt: skip


def _status(reply: str) -> str | None:
    found = _STATUS.search(reply)
    return found.group(1) if found else None
