"""Outbound SMTP sessions: a pool per (address, port, source address), reused
across messages. With smtp_wire (the commands on the wire), the only module that
imports aiosmtplib.

`Pool.deliver()` sends one transaction (a message to some recipients at one
domain) through the first mail exchanger that takes a connection, in the order
given, and returns a `Result`: a reply per recipient, or a local failure, with
where it went, over which TLS version and cipher, and where the time went
(opening sessions, STARTTLS, the transaction: time.monotonic(), read only at
those points). aiosmtplib's exceptions are translated here, once, into `Reply`
values and `outcomes.Failure`.

A session carries up to `max_messages` transactions, is closed after
`idle_timeout` unused, and at most `max_per_host` are open to one address.
STARTTLS is used whenever offered (with one shared client context: building
one per connection cost 10x); with `tls_required`, a receiver that does not
offer it is not sent to. A target under a domain's TLS policy (`policies.Verify`)
must offer STARTTLS and show a certificate valid for its name (MTA-STS, against
the trust store) or matching its TLSA records (DANE); otherwise it is refused
with a failure that says why (`Result.tls_error`), except under an MTA-STS policy
in testing mode, where the failure is only noted and the session goes on as it
would without the policy. A session is reused only for a target held to the same
policy (`Verify.proves`: the same for every domain an MX host serves), and
`max_per_host` counts the sessions of every policy.

Relay through a sending mailbox: with a `Login`, the session goes to the
account's smarthost over TLS whose certificate is verified (STARTTLS, required,
or implicit TLS on 465; against the login's context, its pool's CA file, when it
has one) and authenticates (PLAIN, LOGIN or XOAUTH2) before its
first transaction. Sessions are pooled per account too, never shared between
two accounts. A refused login is the transaction's reply for every recipient
(535 classes as account_auth); the secret is never in a reply, a log or a repr.
"""

from __future__ import annotations

import _ssl
import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace

import aiosmtplib
import aiosmtplib.protocol
import aiosmtplib.smtp

from mtad.base import metrics
from mtad.base.replies import Reply
from mtad.outbound import dane, settings, smtp_wire
from mtad.outbound.outcomes import Failure
from mtad.outbound.policies import Failed, Kind, Verify

_DER = _ssl.ENCODING_DER
_NAMES = {Kind.DANE: "DANE", Kind.MTA_STS: "MTA-STS"}
# What OpenSSL's verify code says, as TLS reporting's result types (RFC 8460 4.3.2)
_CERTIFICATE_RESULTS = {62: "certificate-host-mismatch", 10: "certificate-expired"}


# Declared in settings.py: the configuration builds it without loading this module.
Settings = settings.SessionSettings


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
    commands: dict[str, str] = field(default_factory=dict)  # per recipient replied to: MAIL, RCPT or DATA
    failure: Failure | None = None  # for every recipient without a reply
    host: str = ""  # the MX host name
    address: str = ""  # the address connected to
    source: str | None = None
    tls: str | None = None  # "TLSv1.3", or None in clear
    cipher: str | None = None  # "TLS_AES_256_GCM_SHA384", or None in clear
    tls_policy: Kind | None = None  # the policy the session was held to
    tls_error: Failed | None = None  # why it failed that policy (refused, or noted under MTA-STS testing)
    data_sent: bool = False  # the message went out: an unknown outcome may be a delivery
    reused: bool = False  # over a session opened for an earlier transaction
    # Seconds spent opening sessions (TCP, greeting, EHLO, AUTH; every host tried), in
    # STARTTLS (the command and its handshake), and in the transaction (MAIL to the
    # reply to the end of DATA). Over a reused session the first two are 0.
    connect_time: float = 0.0
    tls_time: float = 0.0
    transfer_time: float = 0.0

    @property
    def maybe_sent(self) -> bool:
        """The data went out and no reply to it came: it may have been delivered."""
        return self.data_sent and self.failure is not None


@dataclass(frozen=True, slots=True)
class Login:
    """A sending mailbox's account at its smarthost."""

    account: str  # the account's name: sessions are pooled per account
    username: str
    mechanism: str  # "plain", "login" or "xoauth2"
    secret: str = field(repr=False)  # the password, or a current OAuth2 access token (the caller refreshes it)
    implicit_tls: bool = False  # TLS from the first byte (port 465); else STARTTLS, required
    # The smarthost's certificate is verified against this (made once per CA file and
    # shared); None: against the pool's relay context (the system's trust store).
    tls: ssl.SSLContext | None = field(default=None, repr=False, compare=False)


MECHANISMS = ("plain", "login", "xoauth2")


@dataclass(frozen=True, slots=True)
class Target:
    host: str  # MX host name (for logs and events)
    address: str
    port: int
    verify: Verify | None = None  # the domain's TLS policy for this host; None: opportunistic


@dataclass(slots=True)
class _Spent:
    """Seconds one transaction spent opening sessions, and of those in STARTTLS."""

    opening: float = 0.0
    tls: float = 0.0


class _Session:
    def __init__(
        self,
        client: aiosmtplib.SMTP,
        target: Target,
        tls: tuple[str | None, str | None],
        now: float,
        label: str,
        noted: Failed | None,
    ) -> None:
        self.client = client
        self.label = label  # the provider group it was opened for (for metrics)
        self.target = target
        self.tls, self.cipher = tls  # version and cipher, None in clear
        self.noted = noted  # a policy failure let through (MTA-STS testing)
        self.messages = 0
        self.last_used = now
        self.smtputf8 = client.supports_extension("smtputf8")
        self.pipelining = client.supports_extension("pipelining")
        self.key: _Key = (target.address, target.port, None, None)  # its pool
        self.policy: Hashable = None  # what it proved of its TLS (Verify.proves), None: nothing

    @property
    def alive(self) -> bool:
        return self.client.is_connected

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await self.client.quit()
        self.client.close()


_Key = tuple[str, int, str | None, str | None]  # address, port, source, account


class _HostPool:
    """Sessions to one (address, port, source, account): idle ones, and a cap on open
    ones. A session is reused only for a target held to the same TLS policy; the cap
    counts the sessions of every policy."""

    def __init__(self, cap: int) -> None:
        self.idle: list[_Session] = []
        self.open = 0
        self.freed = asyncio.Condition()
        self.cap = cap

    def take(self, policy: Hashable) -> _Session | None:
        """The most recently used idle session that proved `policy`, out of the pool."""
        for index in range(len(self.idle) - 1, -1, -1):
            if self.idle[index].policy == policy:
                return self.idle.pop(index)
        return None


@dataclass(slots=True)
class PoolStats:
    opened: int = 0
    reused: int = 0
    closed: int = 0
    open: int = 0
    connect_failures: int = 0


class Pool:
    def __init__(
        self,
        settings: Settings,
        *,
        now: Callable[[], float] = time.monotonic,
        relay_tls: ssl.SSLContext | None = None,
        verified_tls: ssl.SSLContext | None = None,
    ) -> None:
        self.settings = settings
        self._now = now
        self._hosts: dict[_Key, _HostPool] = {}
        # Smarthosts are verified (a login must not go to whoever answers); tests give
        # a context that trusts their own CA.
        self._relay_tls = relay_tls or ssl.create_default_context()
        self._tls = ssl.create_default_context()
        # Opportunistic TLS between MTAs does not verify the receiver's certificate
        # (RFC 7435), nor does DANE through the trust store (its records decide).
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE
        self._verified = verified_tls or ssl.create_default_context()  # MTA-STS: the MX host's name
        self._stats = PoolStats()

    def statistics(self) -> PoolStats:
        self._stats.open = sum(h.open for h in self._hosts.values())
        return self._stats

    async def deliver(
        self,
        targets: Sequence[Target],
        tx: Transaction,
        source: str | None = None,
        *,
        label: str = "-",
        ehlo: str | None = None,
        login: Login | None = None,
    ) -> Result:
        """Send tx through the first target that takes it; a reply or a failure per recipient.

        `source` binds the connection (default: settings.source_address); `ehlo` is the
        name a new session gives for it (default: settings.ehlo_hostname; it should match
        the source address's reverse DNS). `label` (the provider group) names the sessions
        this opens in the metrics. With `login`, the targets are the account's smarthost."""
        source = source if source is not None else self.settings.source_address
        last = Result(failure=Failure.CONNECT_FAILED, source=source)
        spent = _Spent()
        for target in targets:
            try:
                session, reused = await self._acquire(target, source, label, ehlo, login, spent)
            except _Refused as refused:
                last = Result(
                    replies=dict.fromkeys(tx.recipients, refused.reply) if refused.reply else {},
                    failure=None if refused.reply else refused.failure,
                    host=target.host,
                    address=target.address,
                    source=source,
                    tls_policy=target.verify.kind if target.verify is not None else None,
                    tls_error=refused.why,
                    connect_time=spent.opening - spent.tls,
                    tls_time=spent.tls,
                )
                continue  # RFC 5321 5.1: try the next mail exchanger
            began = time.monotonic()
            result = await self._transact(session, tx)
            result.transfer_time = time.monotonic() - began
            result.host, result.address, result.source, result.reused = target.host, target.address, source, reused
            result.connect_time, result.tls_time = spent.opening - spent.tls, spent.tls
            if target.verify is not None:
                result.tls_policy, result.tls_error = target.verify.kind, session.noted
            await self._release(session, keep=result.failure is None)
            return result
        return last

    async def _transact(self, session: _Session, tx: Transaction) -> Result:
        client, timeout = session.client, self.settings.command_timeout
        result = Result(tls=session.tls, cipher=session.cipher)
        options = b" SMTPUTF8" if tx.smtputf8 and session.smtputf8 else b""
        commands = [b"MAIL FROM:<" + smtp_wire.address(tx.sender) + b">" + options]
        commands += [b"RCPT TO:<" + smtp_wire.address(rcpt) + b">" for rcpt in tx.recipients]
        commands.append(b"DATA")
        try:
            if session.pipelining:  # RFC 2920: the envelope in one write, the replies in order
                responses = await smtp_wire.pipelined(client, commands, timeout)
            else:
                responses = await smtp_wire.one_by_one(client, commands, timeout)
            mail, rcpts = responses[0], responses[1 : len(tx.recipients) + 1]
            data = responses[-1] if len(responses) == len(commands) else None
            if mail.code != 250:
                result.replies = dict.fromkeys(tx.recipients, smtp_wire.reply_of(mail.code, mail.message))
                result.commands = dict.fromkeys(tx.recipients, "MAIL")
            else:
                accepted = []
                for rcpt, response in zip(tx.recipients, rcpts, strict=True):
                    if response.code in (250, 251):
                        accepted.append(rcpt)
                    else:
                        result.replies[rcpt] = smtp_wire.reply_of(response.code, response.message)
                        result.commands[rcpt] = "RCPT"
                if accepted and data is not None and data.code == 354:
                    result.data_sent = True
                    reply = await smtp_wire.send_body(client, tx.body, timeout)
                    for rcpt in accepted:
                        result.replies[rcpt] = reply
                        result.commands[rcpt] = "DATA"
                    session.messages += 1
                    return result
                if accepted and data is not None:  # DATA refused although recipients were taken
                    for rcpt in accepted:
                        result.replies[rcpt] = smtp_wire.reply_of(data.code, data.message)
                        result.commands[rcpt] = "DATA"
            if data is not None and data.code == 354:  # a server that took DATA with no recipient
                await smtp_wire.send_body(client, b"", timeout)
            else:
                await client.execute_command(b"RSET", timeout=timeout)
        except aiosmtplib.SMTPTimeoutError:
            result.failure = Failure.TIMEOUT
        except (aiosmtplib.SMTPServerDisconnected, ConnectionError):
            result.failure = Failure.DISCONNECTED_IN_DATA if result.data_sent else Failure.DISCONNECTED
        except (aiosmtplib.SMTPException, ValueError, UnicodeError):  # e.g. a control character in an address
            result.failure = Failure.INTERNAL
            result.replies.clear()
            result.commands.clear()
        return result

    async def _acquire(
        self, target: Target, source: str | None, label: str, ehlo: str | None, login: Login | None, spent: _Spent
    ) -> tuple[_Session, bool]:
        key = (target.address, target.port, source, login.account if login else None)
        policy = target.verify.proves if target.verify is not None else None
        pool = self._hosts.get(key)
        if pool is None:
            pool = self._hosts[key] = _HostPool(self.settings.max_per_host)
        async with pool.freed:
            while True:
                while (session := pool.take(policy)) is not None:
                    if session.alive and self._now() - session.last_used < self.settings.idle_timeout:
                        self._stats.reused += 1
                        return session, True
                    await self._drop(pool, session)
                if pool.open < pool.cap:
                    pool.open += 1
                    break
                if pool.idle:  # full, with an idle session held to another policy: it makes room
                    await self._drop(pool, pool.idle.pop(0))
                    continue
                await pool.freed.wait()
        began = time.monotonic()
        try:
            session = await self._open(target, source, label, ehlo, login, spent)
        except BaseException:
            async with pool.freed:
                pool.open -= 1
                pool.freed.notify()
            raise
        finally:
            spent.opening += time.monotonic() - began
        self._stats.opened += 1
        metrics.OUTBOUND_SESSIONS.labels(group=label).inc()
        session.key, session.policy = key, policy
        return session, False

    async def _drop(self, pool: _HostPool, session: _Session) -> None:
        """Close an idle session taken out of its pool (under the pool's lock)."""
        pool.open -= 1
        self._stats.closed += 1
        metrics.OUTBOUND_SESSIONS.labels(group=session.label).dec()
        await session.close()

    async def _release(self, session: _Session, *, keep: bool) -> None:
        pool = self._hosts[session.key]
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

    async def _open(
        self, target: Target, source: str | None, label: str, ehlo: str | None, login: Login | None, spent: _Spent
    ) -> _Session:
        """A new session, secured and logged in; the time of its STARTTLS added to `spent`
        (implicit TLS's handshake is part of its connect)."""
        settings = self.settings
        implicit = login is not None and login.implicit_tls
        context = (login.tls or self._relay_tls) if login is not None else self._tls
        client: aiosmtplib.SMTP | None = None
        sock: socket.socket | None = None
        try:
            if implicit:
                # TLS from the first byte, verified against the smarthost's name: aiosmtplib
                # checks the name it connects to, so it gets a socket connected to the address.
                async with asyncio.timeout(settings.connect_timeout):
                    sock = await _connected(target, source)
                client = aiosmtplib.SMTP(hostname=target.host, sock=sock, use_tls=True, start_tls=False,
                                         tls_context=context, local_hostname=ehlo or settings.ehlo_hostname,
                                         timeout=settings.command_timeout)  # fmt: skip
            else:
                client = aiosmtplib.SMTP(hostname=target.address, port=target.port, use_tls=False, start_tls=False,
                                         source_address=(source, 0) if source else None, tls_context=context,
                                         local_hostname=ehlo or settings.ehlo_hostname,
                                         timeout=settings.command_timeout)  # fmt: skip
            try:
                await client.connect(timeout=settings.connect_timeout)
            except ssl.SSLError as exc:
                raise _Refused(None, Failure.TLS_FAILED) from exc
            await client.ehlo()
            tls: tuple[str | None, str | None] = (None, None)
            verify, noted = target.verify, None
            if implicit:
                tls = _tls_of(client)
            elif client.supports_extension("starttls"):
                if verify is not None and verify.kind is Kind.MTA_STS:
                    context = self._verified
                try:
                    handshake = time.monotonic()
                    try:
                        await client.starttls(tls_context=context, server_hostname=target.host)
                    finally:
                        spent.tls += time.monotonic() - handshake
                except ssl.SSLCertVerificationError as exc:
                    if verify is None:  # a smarthost's (a login's context verifies too)
                        raise _Refused(None, Failure.TLS_FAILED) from exc
                    why = Failed(
                        _CERTIFICATE_RESULTS.get(exc.verify_code, "certificate-not-trusted"),
                        f"MTA-STS: the certificate of {target.host} is not valid for it: {exc.verify_message}",
                    )
                    if verify.enforce:
                        raise _Refused(None, Failure.TLS_POLICY, why) from exc
                    return await self._unverified(target, source, label, ehlo, why, spent)
                except (ssl.SSLError, aiosmtplib.SMTPException, OSError) as exc:
                    failed = None
                    if verify is not None:
                        failed = Failed("validation-failure", f"{_NAMES[verify.kind]}: STARTTLS with {target.host} "
                                                              f"failed: {exc}")  # fmt: skip
                    raise _Refused(None, Failure.TLS_FAILED, failed) from exc
                tls = _tls_of(client)
                if verify is not None and verify.kind is Kind.DANE and verify.tlsa:
                    mismatch = dane.check(verify.tlsa, _chain(client), verify.names)
                    if mismatch is not None:
                        raise _Refused(
                            None, Failure.TLS_POLICY, Failed("validation-failure", f"DANE: {target.host}: {mismatch}")
                        )
                await client.ehlo()
            elif verify is not None:
                why = Failed("starttls-not-supported", f"{_NAMES[verify.kind]}: {target.host} offers no STARTTLS, "
                                                       f"which {verify.domain}'s policy needs")  # fmt: skip
                if verify.enforce:
                    raise _Refused(None, Failure.TLS_POLICY, why)
                noted = why
            elif settings.tls_required or login is not None:  # a login never goes in clear
                raise _Refused(None, Failure.TLS_REQUIRED)
            if login is not None:
                await _authenticate(client, login)
        except BaseException as exc:
            if client is not None:
                client.close()
            if sock is not None:
                sock.close()  # aiosmtplib leaves a socket it was given open
            self._stats.connect_failures += 1
            if isinstance(exc, (aiosmtplib.SMTPConnectResponseError, aiosmtplib.SMTPHeloError)):
                raise _Refused(smtp_wire.reply_of(exc.code, exc.message), Failure.CONNECT_FAILED) from exc
            if isinstance(exc, (aiosmtplib.SMTPException, OSError, TimeoutError)):
                raise _Refused(None, Failure.CONNECT_FAILED) from exc
            raise  # _Refused already, or a cancellation
        return _Session(client, target, tls, self._now(), label, noted)

    async def _unverified(
        self, target: Target, source: str | None, label: str, ehlo: str | None, why: Failed, spent: _Spent
    ) -> _Session:
        """A session as if the host had no policy, noting why the policy failed (MTA-STS
        testing: the handshake that failed verification cannot go on)."""
        session = await self._open(replace(target, verify=None), source, label, ehlo, None, spent)
        session.noted = why
        return session

    async def check_login(self, target: Target, login: Login) -> Result:
        """Connect to the smarthost, secure the connection, log in, send nothing and
        quit (`mtad accounts test`): the TLS version, or the refusal (its reply under
        the key "", or a failure)."""
        try:
            session = await self._open(target, None, "-", None, login, _Spent())
        except _Refused as refused:
            return Result(
                replies={"": refused.reply} if refused.reply else {},
                failure=None if refused.reply else refused.failure,
                host=target.host,
                address=target.address,
            )
        await session.close()
        return Result(host=target.host, address=target.address, tls=session.tls, cipher=session.cipher)

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


async def _connected(target: Target, source: str | None) -> socket.socket:
    """A TCP socket connected to the target's address, bound to the source address
    (the caller bounds the wait)."""
    sock = socket.socket(socket.AF_INET6 if ":" in target.address else socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        if source:
            sock.bind((source, 0))
        await asyncio.get_running_loop().sock_connect(sock, (target.address, target.port))
    except BaseException:
        sock.close()
        raise
    return sock


def _chain(client: aiosmtplib.SMTP) -> list[bytes]:
    """The certificates the receiver sent, leaf first (DER). Python 3.11 has the
    call under a private name (public from 3.13 as get_unverified_chain)."""
    ssl_object = client.get_transport_info("ssl_object")
    if ssl_object is None:
        return []
    chain = ssl_object._sslobj.get_unverified_chain() or []
    return [certificate.public_bytes(_DER) for certificate in chain]


def _tls_of(client: aiosmtplib.SMTP) -> tuple[str | None, str | None]:
    """The session's TLS version and cipher; (None, None) in clear."""
    ssl_object = client.get_transport_info("ssl_object")
    if ssl_object is None:
        return None, None
    cipher = ssl_object.cipher()
    return ssl_object.version(), cipher[0] if cipher is not None else None


async def _authenticate(client: aiosmtplib.SMTP, login: Login) -> None:
    """AUTH with the account's mechanism; a refusal is raised as _Refused with its reply."""
    authenticate = {"plain": client.auth_plain, "login": client.auth_login, "xoauth2": client.auth_xoauth2}
    try:
        await authenticate[login.mechanism](login.username, login.secret)
    except aiosmtplib.SMTPAuthenticationError as exc:
        raise _Refused(smtp_wire.reply_of(exc.code, exc.message), Failure.CONNECT_FAILED) from exc


class _Refused(Exception):
    """A target that took no transaction: the greeting's or EHLO's reply, or a failure
    (and why, when a TLS policy refused it)."""

    def __init__(self, reply: Reply | None, failure: Failure, why: Failed | None = None) -> None:
        super().__init__(reply.line() if reply else why.text if why else failure.value)
        self.reply = reply
        self.failure = failure
        self.why = why
