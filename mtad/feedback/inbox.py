"""Reading the sending mailboxes' inboxes: bounces and replies of relayed mail.

Mail relayed through a mailbox comes back to the mailbox, not to a VERP address:
its bounces (DSNs, which quote the original's headers), the recipients' replies
and their automatic replies. For each account whose inbox is read
(mtad.mailboxes.inboxes), one node of the cluster holds a lease and a `Reader`
keeps an IMAP session to it (implicit TLS, verified against the account pool's
CA file; the account's own login, XOAUTH2 included), waits in IDLE when the server
offers it (else polls), and reads each new message by UID:

| what the message is         | matched by                                 | recorded          |
|-----------------------------|--------------------------------------------|-------------------|
| a bounce (DSN or not)       | the quoted original Message-ID, recipient  | bounced, async    |
| a complaint (ARF)           | the original Message-ID, recipient         | by its type (1)   |
| an automatic reply          | In-Reply-To, References, and its sender    | auto_replied      |
| a reply                     | the first Message-ID mtad sent, its sender | replied           |
| anything else, or unmatched | -                                          | nothing           |

(1) Each report of a message on its own, as mtad.feedback.signals.complaint_kind
says: complained, auth_failure, unsubscribed, or nothing (not-spam).

A bounce of an address that is gone (a hard bounce) also lowers the mailbox's
health score (it sent to an address that takes no mail), and the suppression
consumer suppresses the address; an automatic reply suppresses nothing.

Nothing the user can see is changed: the messages are fetched with BODY.PEEK,
never flagged or deleted, unless `mark_seen` asks for the reports read to be
marked \\Seen. The position (UIDVALIDITY, last UID) is written after each message,
so a restart neither misses nor repeats one; a first read, or a mailbox whose
UIDVALIDITY changed, starts at the mail of the day the account was added (or of
the last full read). Only the first `max_message_size` octets of a message are
fetched: a report's own parts come first.

The reader of an account also settles the sends through it whose outcome is
unknown (mtad.spool.unknowns: the connection was lost after the data, or the
sending node died before the outcome was written). In a session of its own it
looks for each one's Message-ID in the account's Sent folder (Gmail's `[Gmail]/Sent
Mail`, Microsoft's `Sent Items`, else the folder flagged `\\Sent`, RFC 6154): found,
it is delivered, and its event says so; not found once its wait is over
(`[account_pools.NAME] sent_check_after`), it is sent again. A send is looked for
when it is held, then every `poll` seconds, and once more when its wait is over.

`Inboxes` is the one task that owns the readers of a node: every lease/3 seconds
it renews their leases, stops those whose lease or configuration went, and takes
the inboxes no live node reads; as often, it looks for the sends held unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import aioimaplib
import structlog

from mtad import db
from mtad.base import errors, metrics
from mtad.feedback import reports, settings, signals
from mtad.mailboxes import accounts, inboxes, relay
from mtad.mailboxes.accounts import Account
from mtad.mailboxes.inboxes import Inbox
from mtad.outbound import outcomes
from mtad.spool import unknowns

log = structlog.get_logger("mtad.inbox")

MIB = 2**20
MAX_BACKOFF = 300.0  # seconds between attempts to read an inbox that keeps failing, at most
_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]", re.IGNORECASE)
_UIDNEXT = re.compile(rb"\[UIDNEXT (\d+)\]", re.IGNORECASE)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# The Sent folders by name, before the one flagged \Sent: Gmail's (Google Mail's in
# Germany and the UK), Microsoft's.
SENT_NAMES = ("[Gmail]/Sent Mail", "[Google Mail]/Sent Mail", "Sent Items")
# A LIST reply: (flags) "delimiter"|NIL name, the name quoted or an atom.
_LISTED = re.compile(rb'^\((?P<flags>[^)]*)\) (?:"(?:[^"\\]|\\.)*"|NIL) (?P<name>"(?:[^"\\]|\\.)*"|[^\s"]+)$',
                     re.IGNORECASE)  # fmt: skip
_SEARCHABLE = re.compile(r"[\x21-\x7e]+")  # a Message-ID IMAP can quote: printable ASCII, no space


Settings = settings.Inbox  # [inbox]


class Refused(errors.RemoteError):
    """The IMAP server answered NO or BAD."""


class _Lost(Exception):
    """Another node reads the inbox now."""


@dataclass(frozen=True, slots=True)
class Looked:
    """What a look in an account's Sent folder found."""

    folder: str | None  # the folder looked in (None: the account has no Sent folder it could tell)
    found: frozenset[str]  # the Message-IDs it holds
    unsearchable: frozenset[str] = frozenset()  # Message-IDs IMAP cannot search for (not looked for)


@dataclass(slots=True)
class SentChecks:
    """What looks in the Sent folders settled: sends found (delivered), sent again."""

    found: int = 0
    again: int = 0


@dataclass(frozen=True, slots=True)
class Reading:
    """What every reader of a node shares."""

    database: db.Database
    mailboxes: relay.Mailboxes  # the accounts' logins
    settings: Settings
    node: str
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    rules: outcomes.Rules | None = None  # the reply table (None: the shipped one)


class Reader:
    """One inbox, read while this node holds its lease."""

    def __init__(self, reading: Reading, inbox: Inbox, account: Account) -> None:
        self._db = reading.database
        self._rules = reading.rules
        self._mailboxes = reading.mailboxes
        self.inbox = inbox
        self._account = account
        self._settings = reading.settings
        self._node = reading.node
        self._now = reading.now
        self._uidvalidity = inbox.uidvalidity
        self._last = inbox.last_uid
        self._read_at = inbox.read_at
        self._progress = asyncio.Condition()  # notified after each read to the end, and each failure
        self.failures = 0  # sessions that failed

    async def reached(self, uid: int) -> None:
        """Until the inbox was read to its end with every message up to `uid` done."""
        async with self._progress:
            await self._progress.wait_for(lambda: self._read_at is not None and self._last >= uid)

    async def failed(self, times: int = 1) -> None:
        """Until `times` sessions have failed."""
        async with self._progress:
            await self._progress.wait_for(lambda: self.failures >= times)

    async def _notify(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    async def run(self) -> None:
        """Read until cancelled, or until another node holds the inbox; a failed session
        is logged, written on the inbox, and tried again after a growing pause."""
        backoff = 1.0
        while True:
            try:
                await self._session()
            except _Lost:
                log.info("inbox_lost", account=self._account.name, node=self._node)
                return
            except (OSError, TimeoutError, aioimaplib.AioImapException, Refused, relay.LoginFailed,
                    errors.SpoolError) as exc:  # fmt: skip
                why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, relay.LoginFailed) else exc.why
                log.warning("inbox_failed", account=self._account.name, host=self.inbox.host, error=why,
                            retry_in=backoff)  # fmt: skip
                metrics.INBOX_FAILURES.labels(account=self._account.name).inc()
                with contextlib.suppress(errors.SpoolError):
                    await inboxes.failed(self._db, self._account.id, self._node, why)
                self.failures += 1
                await self._notify()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = 1.0

    @property
    def account(self) -> Account:
        return self._account

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[aioimaplib.IMAP4_SSL]:
        """An IMAP session logged in as the account, logged out when the block ends."""
        login = await self._mailboxes.login(self._account)
        tls = login.tls if login.tls is not None else ssl.create_default_context()
        client = aioimaplib.IMAP4_SSL(self.inbox.host, self.inbox.port, ssl_context=tls,
                                      timeout=self._settings.timeout)  # fmt: skip
        try:
            await client.wait_hello_from_server()
            if login.mechanism == accounts.Mechanism.XOAUTH2.value:
                _ok(await client.xoauth2(login.username, login.secret), "AUTHENTICATE XOAUTH2")
            else:
                _ok(await client.login(login.username, login.secret), "LOGIN")
            yield client
        finally:
            with contextlib.suppress(Exception):  # the session is over either way
                if client.has_pending_idle():  # stopped while IDLE began
                    client.idle_done()
                await asyncio.wait_for(client.logout(), 5)
            if client.protocol.transport is not None:
                client.protocol.transport.close()

    async def look_in_sent(self, message_ids: Collection[str]) -> Looked:
        """Which of `message_ids` the account's Sent folder holds (Gmail's, Microsoft's,
        else the folder flagged \\Sent: RFC 6154), in a session of its own. Raises what
        a session raises (OSError, TimeoutError, aioimaplib's, Refused, LoginFailed)."""
        searchable = {m for m in message_ids if _SEARCHABLE.fullmatch(m)}
        async with self._open() as client:
            folder = sent_folder(_ok(await client.list('""', "*"), "LIST"))
            if folder is None:
                return Looked(None, frozenset(), frozenset(message_ids) - searchable)
            # SELECT, not EXAMINE: aioimaplib allows no SEARCH after EXAMINE. Nothing is changed.
            _ok(await client.select(_quoted(folder)), f"SELECT {folder}")
            found = {m for m in sorted(searchable) if await _search(client, "HEADER", "Message-ID", _quoted(m))}
        return Looked(folder, frozenset(found), frozenset(message_ids) - searchable)

    async def _session(self) -> None:
        async with self._open() as client:
            # SELECT, not EXAMINE (aioimaplib allows no FETCH after EXAMINE); BODY.PEEK keeps \Seen as it is.
            selected = _ok(await client.select("INBOX"), "SELECT INBOX")
            uidvalidity, uidnext = _number(_UIDVALIDITY, selected), _number(_UIDNEXT, selected)
            if uidvalidity is None:
                raise Refused("SELECT INBOX gave no UIDVALIDITY")
            log.info("inbox_reading", account=self._account.name, host=self.inbox.host, last_uid=self._last)
            idles = "IDLE" in client.protocol.capabilities
            while True:
                await self._read(client, uidvalidity, uidnext)
                uidnext = None
                if idles:
                    await self._idle(client)
                else:
                    await asyncio.sleep(self._settings.poll)
                    _ok(await client.noop(), "NOOP")  # the server looks at the mailbox anew

    async def _read(self, client: aioimaplib.IMAP4_SSL, uidvalidity: int, uidnext: int | None) -> None:
        """Every message after the position, in UID order; the position after each."""
        if self._uidvalidity != uidvalidity:  # never read, or the mailbox was made anew: from a day on
            day = self._read_at or self._account.created_at or self._now()
            new = sorted(await _search(client, "SINCE", f"{day.day}-{_MONTHS[day.month - 1]}-{day.year}"))
            self._last = 0
            floor = uidnext - 1 if uidnext is not None else 0  # the older messages are left as they are
        else:
            new = sorted(u for u in await _search(client, "UID", f"{self._last + 1}:*") if u > self._last)
            floor = self._last
        for uid in new:
            raw = await _fetch(client, uid, self._settings.max_message_size)
            if raw is not None:
                kind = await self._apply(raw)
                if self._settings.mark_seen and kind in ("bounce", "complaint", "auto_reply"):
                    _ok(await client.uid("store", str(uid), "+FLAGS", "(\\Seen)"), "STORE")
            self._last = max(self._last, uid)
            if not await inboxes.advance(self._db, self._account.id, self._node, uidvalidity, self._last):
                raise _Lost()
        self._last = max(self._last, floor)
        self._uidvalidity = uidvalidity
        self._read_at = self._now()
        if not await inboxes.advance(self._db, self._account.id, self._node, uidvalidity, self._last,
                                     read_at=self._read_at):  # fmt: skip
            raise _Lost()
        await self._notify()

    async def _idle(self, client: aioimaplib.IMAP4_SSL) -> None:
        """Wait in IDLE until the server says something (new mail, mostly) or `idle` passes."""
        idle = await client.idle_start(timeout=self._settings.idle)
        try:
            async with asyncio.TaskGroup() as waiting:  # until a push, or the end of the IDLE command
                pushed = waiting.create_task(self._pushed(client))
                idle.add_done_callback(lambda _: pushed.cancel())
        finally:
            if client.has_pending_idle():
                client.idle_done()
        _ok(await asyncio.wait_for(idle, self._settings.timeout), "IDLE")

    async def _pushed(self, client: aioimaplib.IMAP4_SSL) -> None:
        """Until the server says something in IDLE; a failure here is the IDLE command's,
        raised where it is awaited."""
        with contextlib.suppress(Exception):
            await client.wait_server_push(timeout=self._settings.idle + self._settings.timeout)

    async def _apply(self, raw: bytes) -> str:
        """Record what the message reports; returns its kind."""
        report = await asyncio.to_thread(reports.parse, raw, self._rules)  # CPU: a few ms, more on hostile input
        now = self._now()
        via = {"via": "inbox", "account": self._account.name}
        match report:
            case reports.Bounce():
                kind, recorded = "bounce", await signals.bounced_by_message_id(self._db, report, now, via)
                hard = [failed for failed, _ in recorded if failed.hard]
                if hard:  # the mailbox sent to addresses that do not take mail
                    await accounts.bounce(self._db, self._account, now, {**via, "recipients": len(hard),
                                                                           "status": hard[0].status})  # fmt: skip
                matched = bool(recorded)
            case reports.Complaints():
                kind, matched = "complaint", False
                for complaint in report.reports:  # each report its own complaint
                    as_kind = signals.complaint_kind(complaint.feedback_type)
                    if as_kind is None:  # not-spam: nothing to record
                        log.info("complaint_ignored", account=self._account.name,
                                 feedback_type=complaint.feedback_type)  # fmt: skip
                        continue
                    matched |= await self._answer(as_kind, complaint.recipient, (complaint.original_message_id,),
                                                  now, {**via, "feedback_type": complaint.feedback_type},
                                                  verp_sent=False)  # fmt: skip
            case reports.AutoReply():
                kind = "auto_reply"
                matched = await self._answer(signals.Kind.AUTO_REPLIED, report.sender,
                                             (report.original_message_id,), now, via)  # fmt: skip
            case reports.Reply():
                kind = "reply"
                matched = await self._answer(signals.Kind.REPLIED, report.sender, report.message_ids, now, via)
            case reports.Delivered():
                kind, matched = "delivered", False
            case reports.Unknown():
                kind, matched = "unknown", False
        outcome = "recorded" if matched else "unmatched" if kind not in ("unknown", "delivered") else "ignored"
        metrics.INBOX_MESSAGES.labels(kind=kind, outcome=outcome).inc()
        log.info("inbox_message", account=self._account.name, kind=kind, outcome=outcome)
        return kind

    async def _answer(
        self,
        kind: signals.Kind,
        sender: str | None,
        message_ids: tuple[str | None, ...],
        now: datetime,
        data: Mapping[str, object],
        *,
        verp_sent: bool = True,
    ) -> bool:
        """Record `kind` about the first of `message_ids` that mtad sent (and its
        delivery to `sender`, the original's recipient, when there is one); not
        about a delivery sent with VERP unless `verp_sent` (a complaint is not: its
        report goes to the VERP address, as a bounce's does)."""
        if sender is None:
            return False
        for message_id in message_ids:
            found = await signals.original(self._db, message_id, sender) if message_id else None
            if found is not None and (verp_sent or not found.verp):
                await signals.record(self._db, signals.Signal(kind, sender.lower(), now, message=found.message,
                                                              delivery=found.delivery, data=data))  # fmt: skip
                return True
        return False


class Inboxes:
    """The readers of one node: the inboxes it holds, and taking the free ones."""

    def __init__(self, reading: Reading) -> None:
        self._reading = reading
        self._db = reading.database
        self._settings = reading.settings
        self._node = reading.node
        self._now = reading.now
        self.readers: dict[int, tuple[Reader, asyncio.Task[None]]] = {}  # by account: the inboxes it reads

    async def run(self) -> None:
        """Until cancelled; the inboxes it read are given back as it stops."""
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._look_for_sent(), name="sent-folders")
                while True:
                    try:
                        await self.look(tasks)
                    except errors.SpoolError as exc:  # the database is away: the leases run out by themselves
                        log.warning("inboxes_unavailable", error=str(exc))
                    await asyncio.sleep(self._settings.lease / 3)
        finally:
            held = list(self.readers)
            self.readers.clear()
            if held:
                with contextlib.suppress(errors.SpoolError):
                    await inboxes.release(self._db, self._node, held)

    async def _look_for_sent(self) -> None:
        """Every lease/3 seconds, the sends held unknown through the inboxes read here."""
        while True:
            await asyncio.sleep(self._settings.lease / 3)
            try:
                await self.check_sent()
            except errors.SpoolError as exc:  # the database is away: they wait, held
                log.warning("sent_check_failed", error=str(exc))

    async def check_sent(self) -> SentChecks:
        """Look for the sends held unknown through the accounts whose inbox this node
        reads, those due a look (mtad.spool.unknowns.due), in their Sent folders: found,
        delivered; not found once their wait is over, sent again. One session per
        account; an account whose Sent folder cannot be read keeps its sends held."""
        checks = SentChecks()
        readers = {account: reader for account, (reader, task) in self.readers.items() if not task.done()}
        if not readers:
            return checks
        now = self._now()
        by_account: dict[int, list[unknowns.Held]] = {}
        for held in await unknowns.due(self._db, list(readers), now, self._settings.poll):
            by_account.setdefault(held.account, []).append(held)
        for account, sends in by_account.items():
            name = readers[account].account.name
            try:
                looked = await readers[account].look_in_sent([s.message_id for s in sends])
            except (OSError, TimeoutError, aioimaplib.AioImapException, Refused, relay.LoginFailed) as exc:
                why = f"{type(exc).__name__}: {exc}" if not isinstance(exc, relay.LoginFailed) else exc.why
                log.warning("sent_folder_unread", account=name, held=len(sends), error=why)
                continue
            if looked.folder is None:
                log.warning("sent_folder_not_found", account=name, held=len(sends))
                continue
            if looked.unsearchable:
                log.warning("sent_not_searchable", account=name, message_ids=sorted(looked.unsearchable))
            said = {"account": name, "folder": looked.folder}
            missing = [s for s in sends if s.message_id not in looked.found | looked.unsearchable]
            hit = [s.delivery for s in sends if s.message_id in looked.found]
            late = [s.delivery for s in missing if s.until <= now]
            if hit:
                checks.found += len(await unknowns.found(self._db, hit, {**said, "how": "sent_folder"}, self._now()))
                log.info("found_sent", account=name, folder=looked.folder, deliveries=hit)
            if late:
                not_found = {**said, "reason": "not_in_sent_folder"}
                checks.again += len(await unknowns.again(self._db, late, not_found, self._now()))
                log.info("sent_again", account=name, folder=looked.folder, deliveries=late)
            waiting = [s.delivery for s in missing if s.until > now]
            if waiting:
                await unknowns.looked(self._db, waiting, looked.folder, self._now())
        return checks

    async def look(self, tasks: asyncio.TaskGroup) -> None:
        """Renew the held inboxes, stop the readers that lost theirs, start the free ones."""
        now = self._now()
        until = now + timedelta(seconds=self._settings.lease)
        running = [account for account, (_, task) in self.readers.items() if not task.done()]
        held = await inboxes.renew(self._db, self._node, running, until) if running else set()
        configured = {inbox.account: inbox for inbox in await inboxes.listing(self._db)}
        for account, (reader, task) in list(self.readers.items()):
            now_inbox = configured.get(account)
            if (task.done() or account not in held or now_inbox is None
                    or (now_inbox.host, now_inbox.port) != (reader.inbox.host, reader.inbox.port)):  # fmt: skip
                task.cancel()
                del self.readers[account]
        wanted = [i for i in configured.values() if i.account not in self.readers and _free(i, self._node, now)]
        if not wanted:
            return
        by_id = {a.id: a for a in await accounts.list_all(self._db)}
        for inbox in wanted:
            taken = await inboxes.take(self._db, inbox.account, self._node, now, until)
            if taken is None or inbox.account not in by_id:
                continue
            reader = Reader(self._reading, taken, by_id[inbox.account])
            self.readers[inbox.account] = (reader, tasks.create_task(reader.run(), name=f"inbox-{taken.name}"))


def _free(inbox: Inbox, node: str, now: datetime) -> bool:
    return inbox.node in (None, node) or inbox.lease_until is None or inbox.lease_until <= now


def sent_folder(listed: list[bytes]) -> str | None:
    """The Sent folder among a LIST reply's lines: Gmail's or Microsoft's by name, else
    the one flagged \\Sent (RFC 6154); None: none. Names as the server spells them
    (modified UTF-7). Pure."""
    flagged: list[str] = []
    names: set[str] = set()
    for line in listed:
        found = _LISTED.match(line.strip())
        if found is None:
            continue
        name = found.group("name").decode("ascii", "replace")
        if name.startswith('"'):
            name = re.sub(r"\\(.)", r"\1", name[1:-1])
        names.add(name)
        if b"\\sent" in found.group("flags").lower().split():
            flagged.append(name)
    return next((n for n in SENT_NAMES if n in names), None) or next(iter(flagged), None)


def _quoted(text: str) -> str:
    """An IMAP quoted string (RFC 3501)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _ok(response: aioimaplib.Response, command: str) -> list[bytes]:
    if response.result != "OK":
        said = b" ".join(line for line in response.lines if isinstance(line, bytes))[:300]
        raise Refused(f"{command}: {response.result} {said.decode(errors='replace')}")
    return [line for line in response.lines if isinstance(line, bytes)]


def _number(pattern: re.Pattern[bytes], lines: list[bytes]) -> int | None:
    for line in lines:
        found = pattern.search(line)
        if found is not None:
            return int(found.group(1))
    return None


async def _search(client: aioimaplib.IMAP4_SSL, *criteria: str) -> list[int]:
    lines = _ok(await client.uid_search(*criteria, charset=None), "UID SEARCH")
    found = [line.split() for line in lines[:-1]]  # "* SEARCH 4 7" comes as b"4 7"; "* 3 EXISTS" may come too
    return [int(word) for words in found if all(w.isdigit() for w in words) for word in words]


async def _fetch(client: aioimaplib.IMAP4_SSL, uid: int, limit: int) -> bytes | None:
    """The first `limit` octets of message `uid` (None: it is gone)."""
    response = await client.uid("fetch", str(uid), f"(BODY.PEEK[]<0.{limit}>)")
    if response.result != "OK":
        raise Refused(f"UID FETCH: {response.result}")
    return next((bytes(line) for line in response.lines if isinstance(line, bytearray)), None)
