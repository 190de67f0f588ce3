"""Outbound SMTP sessions: a pool per (address, port, source address), reused
across messages. The only module that imports aiosmtplib.

`Pool.deliver()` sends one transaction (a message to some recipients at one
domain) through the first mail exchanger that takes a connection, in the order
given, and returns a `Result`: a reply per recipient, or a local failure, with
where it went and over which TLS version. aiosmtplib's exceptions are
translated here, once, into `Reply` values and `outcomes.Failure`.

A session carries up to `max_messages` transactions, is closed after
`idle_timeout` unused, and at most `max_per_host` are open to one address.
STARTTLS is used whenever offered (with one shared client context: building
one per connection cost 10x); with `tls_required`, a receiver that does not
offer it is not sent to.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiosmtplib

from mtad import metrics
from mtad.outcomes import Failure
from mtad.replies import Reply

_ENHANCED = re.compile(r"^([245]\.\d{1,3}\.\d{1,3})\s*")


@dataclass(frozen=True, slots=True)
class Settings:
    port: int = 25
    ehlo_hostname: str = "localhost"
    source_address: str | None = None
    tls_required: bool = False
    connect_timeout: float = 30.0
    command_timeout: float = 300.0
    max_messages: int = 100  # per session
    max_per_host: int = 20  # open sessions to one address
    idle_timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class Transaction:
    sender: str
    recipients: tuple[str, ...]
    body: bytes
    smtputf8: bool = False


@dataclass(slots=True)
class Result:
    """What happened to one transaction."""

    replies: dict[str, Reply] = field(default_factory=dict)  # per recipient, when the receiver answered
    failure: Failure | None = None  # for every recipient without a reply
    host: str = ""  # the MX host name
    address: str = ""  # the address connected to
    source: str | None = None
    tls: str | None = None  # "TLSv1.3", or None in clear
    data_sent: bool = False  # the message went out: an unknown outcome may be a delivery
    reused: bool = False  # over a session opened for an earlier transaction


@dataclass(frozen=True, slots=True)
class Target:
    host: str  # MX host name (for logs and events)
    address: str
    port: int


def reply_of(code: int, message: str) -> Reply:
    """aiosmtplib's (code, message) as a Reply, its enhanced code split off."""
    text = " ".join(message.split("\n"))
    match = _ENHANCED.match(text)
    enhanced = match.group(1) if match and match.group(1)[0] == str(code)[0] else ""
    if not 200 <= code <= 599:
        return Reply(451, "4.5.0", f"invalid reply code {code}: {text}"[:400])
    return Reply(code, enhanced, (text[match.end() :] if enhanced and match else text)[:1000])


class _Session:
    def __init__(self, client: aiosmtplib.SMTP, target: Target, tls: str | None, now: float, label: str) -> None:
        self.client = client
        self.label = label  # the provider group it was opened for (for metrics)
        self.target = target
        self.tls = tls
        self.messages = 0
        self.last_used = now
        self.smtputf8 = client.supports_extension("smtputf8")

    @property
    def alive(self) -> bool:
        return self.client.is_connected

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.client.quit()
        self.client.close()


class _HostPool:
    """Sessions to one (address, port, source): idle ones, and a cap on open ones."""

    def __init__(self, cap: int) -> None:
        self.idle: list[_Session] = []
        self.open = 0
        self.freed = asyncio.Condition()
        self.cap = cap


@dataclass(slots=True)
class PoolStats:
    opened: int = 0
    reused: int = 0
    closed: int = 0
    open: int = 0
    connect_failures: int = 0


class Pool:
    def __init__(self, settings: Settings, *, now: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._now = now
        self._hosts: dict[tuple[str, int, str | None], _HostPool] = {}
        self._tls = ssl.create_default_context()
        # Opportunistic TLS between MTAs does not verify the receiver's certificate
        # (RFC 7435); a verified policy (MTA-STS, DANE) is a later stage.
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE
        self._stats = PoolStats()

    def statistics(self) -> PoolStats:
        self._stats.open = sum(h.open for h in self._hosts.values())
        return self._stats

    async def deliver(
        self, targets: Sequence[Target], tx: Transaction, source: str | None = None, *, label: str = "-"
    ) -> Result:
        """Send tx through the first target that takes it; a reply or a failure per recipient.

        `label` (the provider group) names the sessions this opens in the metrics."""
        source = source if source is not None else self.settings.source_address
        last = Result(failure=Failure.CONNECT_FAILED, source=source)
        for target in targets:
            try:
                session, reused = await self._acquire(target, source, label)
            except _Refused as refused:
                last = Result(
                    replies=dict.fromkeys(tx.recipients, refused.reply) if refused.reply else {},
                    failure=None if refused.reply else refused.failure,
                    host=target.host,
                    address=target.address,
                    source=source,
                )
                continue  # RFC 5321 5.1: try the next mail exchanger
            result = await self._transact(session, tx)
            result.host, result.address, result.source, result.reused = target.host, target.address, source, reused
            await self._release(session, source, keep=result.failure is None)
            return result
        return last

    async def _transact(self, session: _Session, tx: Transaction) -> Result:
        client, timeout = session.client, self.settings.command_timeout
        result = Result(tls=session.tls)
        try:
            options = [b"SMTPUTF8"] if tx.smtputf8 and session.smtputf8 else []
            response = await client.execute_command(b"MAIL", b"FROM:<" + _wire(tx.sender) + b">", *options,
                                                    timeout=timeout)  # fmt: skip
            if response.code != 250:
                reply = reply_of(response.code, response.message)
                result.replies = dict.fromkeys(tx.recipients, reply)
                await client.execute_command(b"RSET", timeout=timeout)
                return result
            accepted = []
            for rcpt in tx.recipients:
                response = await client.execute_command(b"RCPT", b"TO:<" + _wire(rcpt) + b">", timeout=timeout)
                if response.code in (250, 251):
                    accepted.append(rcpt)
                else:
                    result.replies[rcpt] = reply_of(response.code, response.message)
            if not accepted:
                await client.execute_command(b"RSET", timeout=timeout)
                return result
            result.data_sent = True
            try:
                response = await client.data(tx.body, timeout=timeout)
                reply = reply_of(response.code, response.message)
            except aiosmtplib.SMTPDataError as exc:  # DATA refused, or the message refused after it
                reply = reply_of(exc.code, exc.message)
            for rcpt in accepted:
                result.replies[rcpt] = reply
            session.messages += 1
        except aiosmtplib.SMTPTimeoutError:
            result.failure = Failure.TIMEOUT
        except (aiosmtplib.SMTPServerDisconnected, ConnectionError):
            result.failure = Failure.DISCONNECTED_IN_DATA if result.data_sent else Failure.DISCONNECTED
        except (aiosmtplib.SMTPException, ValueError, UnicodeError):  # e.g. a control character in an address
            result.failure = Failure.INTERNAL
            result.replies.clear()
        return result

    async def _acquire(self, target: Target, source: str | None, label: str) -> tuple[_Session, bool]:
        key = (target.address, target.port, source)
        pool = self._hosts.get(key)
        if pool is None:
            pool = self._hosts[key] = _HostPool(self.settings.max_per_host)
        async with pool.freed:
            while True:
                while pool.idle:
                    session = pool.idle.pop()
                    if session.alive and self._now() - session.last_used < self.settings.idle_timeout:
                        self._stats.reused += 1
                        return session, True
                    pool.open -= 1
                    self._stats.closed += 1
                    metrics.OUTBOUND_SESSIONS.labels(group=session.label).dec()
                    await session.close()
                if pool.open < pool.cap:
                    pool.open += 1
                    break
                await pool.freed.wait()
        try:
            session = await self._open(target, source, label)
        except BaseException:
            async with pool.freed:
                pool.open -= 1
                pool.freed.notify()
            raise
        self._stats.opened += 1
        metrics.OUTBOUND_SESSIONS.labels(group=label).inc()
        return session, False

    async def _release(self, session: _Session, source: str | None, *, keep: bool) -> None:
        pool = self._hosts[(session.target.address, session.target.port, source)]
        if keep and session.alive and session.messages < self.settings.max_messages:
            session.last_used = self._now()
            async with pool.freed:
                pool.idle.append(session)
                pool.freed.notify()
            return
        await session.close()
        self._stats.closed += 1
        metrics.OUTBOUND_SESSIONS.labels(group=session.label).dec()
        async with pool.freed:
            pool.open -= 1
            pool.freed.notify()

    async def _open(self, target: Target, source: str | None, label: str) -> _Session:
        settings = self.settings
        client = aiosmtplib.SMTP(
            hostname=target.address,
            port=target.port,
            local_hostname=settings.ehlo_hostname,
            source_address=(source, 0) if source else None,
            timeout=settings.command_timeout,
            start_tls=False,
            use_tls=False,
            tls_context=self._tls,
        )
        try:
            await client.connect(timeout=settings.connect_timeout)
            await client.ehlo()
            tls = None
            if client.supports_extension("starttls"):
                try:
                    await client.starttls(tls_context=self._tls, server_hostname=target.host)
                except (ssl.SSLError, aiosmtplib.SMTPException, OSError) as exc:
                    raise _Refused(None, Failure.TLS_FAILED) from exc
                ssl_object = client.get_transport_info("ssl_object")
                tls = ssl_object.version() if ssl_object is not None else None
                await client.ehlo()
            elif settings.tls_required:
                raise _Refused(None, Failure.TLS_REQUIRED)
        except _Refused:
            client.close()
            self._stats.connect_failures += 1
            raise
        except (aiosmtplib.SMTPConnectResponseError, aiosmtplib.SMTPHeloError) as exc:
            client.close()
            self._stats.connect_failures += 1
            raise _Refused(reply_of(exc.code, exc.message), Failure.CONNECT_FAILED) from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            client.close()
            self._stats.connect_failures += 1
            raise _Refused(None, Failure.CONNECT_FAILED) from exc
        return _Session(client, target, tls, self._now(), label)

    async def close_idle(self) -> int:
        """Close sessions idle longer than idle_timeout; returns how many."""
        closed = 0
        for pool in self._hosts.values():
            async with pool.freed:
                stale = [s for s in pool.idle if self._now() - s.last_used >= self.settings.idle_timeout]
                pool.idle = [s for s in pool.idle if s not in stale]
                pool.open -= len(stale)
                pool.freed.notify(len(stale))
            for session in stale:
                await session.close()
                metrics.OUTBOUND_SESSIONS.labels(group=session.label).dec()
            closed += len(stale)
        self._stats.closed += closed
        return closed

    async def close(self) -> None:
        """Close every idle session (at shutdown, after deliveries in flight are done)."""
        for pool in self._hosts.values():
            async with pool.freed:
                idle, pool.idle = pool.idle, []
                pool.open -= len(idle)
            await asyncio.gather(*(s.close() for s in idle))
            for session in idle:
                metrics.OUTBOUND_SESSIONS.labels(group=session.label).dec()
            self._stats.closed += len(idle)


class _Refused(Exception):
    """A target that took no transaction: the greeting's or EHLO's reply, or a failure."""

    def __init__(self, reply: Reply | None, failure: Failure) -> None:
        super().__init__(reply.line() if reply else failure.value)
        self.reply = reply
        self.failure = failure


def _wire(address: str) -> bytes:
    """An address as sent: UTF-8 (RFC 6531) when it is not ASCII."""
    return address.encode("utf-8")
