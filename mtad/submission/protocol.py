"""aiosmtpd's SMTP protocol, adapted to mtad at the edge.

It refuses an EHLO/HELO name that is neither a domain nor an address literal,
parses MAIL/RCPT with mtad.base.envelope (aiosmtpd's parser, the email package's, was
~45 % of accept CPU) and takes the null reverse-path `<>`, reads DATA in chunks
rather than a line at a time, gives every refusal of aiosmtpd's own an enhanced
status code, decides per connection whether AUTH needs TLS, answers 421 to a
connection beyond the server's caps, keeps one idle timer per session, and
tells the server which sessions are in DATA. These override aiosmtpd
internals, which is why aiosmtpd is pinned to one version.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiosmtpd.smtp import SMTP, Envelope, Session, syntax

from mtad.base import envelope, metrics, replies, smtp_data
from mtad.base.replies import Reply
from mtad.submission.policy import Handler, SubmissionEnvelope, SubmissionSession, check_helo, refuse

if TYPE_CHECKING:
    from mtad.submission.server import Server


WRITE_HIGH_WATER = 64 * 1024
REFUSALS = {
    smtp_data.Refused.TOO_BIG: (replies.MESSAGE_TOO_BIG, "too_big"),
    smtp_data.Refused.LINE_TOO_LONG: (replies.LINE_TOO_LONG, "line_too_long"),
}


class Protocol(SMTP):
    """aiosmtpd's SMTP protocol, adapted to mtad at the edge."""

    def __init__(self, server: Server, handler: Handler, **kwargs: Any) -> None:
        self._idle_deadline = 0.0
        super().__init__(handler, **kwargs)
        self._server = server
        self.in_data = False
        self.client = ""  # the peer's IP address
        self._refused = False  # beyond the server's caps: answered 421, aiosmtpd never ran

    def _create_session(self) -> Session:
        return SubmissionSession(self.loop)

    def _create_envelope(self) -> Envelope:
        return SubmissionEnvelope()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is None:  # a new connection (STARTTLS calls this again)
            peer = transport.get_extra_info("peername")
            self.client = peer[0] if isinstance(peer, tuple) else str(peer or "")
            refusal = self._server.opened(self)
            if refusal is not None:
                self._refused = True
                transport.write(refuse(refusal, "too_many_connections").encode() + smtp_data.CRLF)  # type: ignore[attr-defined]
                transport.close()
                return
        super().connection_made(transport)
        session: SubmissionSession = self.session  # type: ignore[assignment]
        session.client = self.client
        session.trusted = self._server.is_trusted(session.client)
        # AUTH without STARTTLS only for clients on trusted networks.
        self._auth_require_tls = not session.trusted

    def connection_lost(self, error: Exception | None) -> None:
        if self._refused:
            return
        self._server.closed(self)
        super().connection_lost(error)

    def _reset_timeout(self, duration: float | None = None) -> None:
        """Push the idle deadline back. aiosmtpd cancels and re-creates a timer on
        every command; here one timer lives per idle period and re-arms itself."""
        deadline = self.loop.time() + (duration or self._timeout_duration)
        self._idle_deadline = deadline
        handle = self._timeout_handle
        if handle is None or handle.cancelled() or handle.when() > deadline:
            if handle is not None:
                handle.cancel()
            self._timeout_handle = self.loop.call_at(deadline, self._idle_check)

    def _idle_check(self) -> None:
        if self.loop.time() < self._idle_deadline:
            self._timeout_handle = self.loop.call_at(self._idle_deadline, self._idle_check)
        else:
            self._timeout_cb()  # type: ignore[no-untyped-call]

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:  # VRFY's; MAIL and RCPT use _path
        parsed = envelope.parse_path(arg)
        if parsed is None:
            return None, None
        return parsed

    async def push(self, status: Any) -> None:
        """Write one reply. aiosmtpd's own refusals get an enhanced code; a lone
        surrogate (an octet that was not UTF-8, echoed back) goes out as "?"; the
        writer is drained only when its buffer is over the high-water mark (what
        drain() would check, without a coroutine per reply)."""
        if isinstance(status, str):
            if status[:1] in ("4", "5"):
                worded = replies.with_enhanced_code(status)
                if worded != status:  # one of aiosmtpd's own refusals
                    metrics.REJECTED.labels(reason="protocol").inc()
                    status = worded
            status = status.encode(errors="replace")
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(status + b"\r\n")  # type: ignore[attr-defined]
        if transport.get_write_buffer_size() > WRITE_HIGH_WATER:  # type: ignore[attr-defined]
            await self._writer.drain()

    @syntax("EHLO hostname")
    async def smtp_EHLO(self, hostname: str) -> None:
        """aiosmtpd's EHLO, once the name is known to be safe to write into Received;
        a refused one leaves the session as it was (RFC 5321 4.1.4)."""
        if hostname and (refusal := check_helo(hostname)) is not None:
            await self.push(refuse(refusal, "bad_helo"))
            return
        await super().smtp_EHLO(hostname)

    @syntax("HELO hostname")
    async def smtp_HELO(self, hostname: str) -> None:
        if hostname and (refusal := check_helo(hostname)) is not None:
            await self.push(refuse(refusal, "bad_helo"))
            return
        await super().smtp_HELO(hostname)

    @syntax("MAIL FROM: <address>", extended=" [SP <mail-parameters>]")
    async def smtp_MAIL(self, arg: str | None) -> None:
        """aiosmtpd's MAIL, except that the null reverse-path `<>` is a sender (RFC 5321
        4.5.5: DSNs, auto-replies): "no MAIL yet" is a mail_from of None, not ""."""
        if await self.check_helo_needed() or await self.check_auth_needed("MAIL"):
            return
        assert self.envelope is not None
        found = self._path("FROM:", arg, replies.MAIL_SYNTAX, replies.BAD_SENDER_SYNTAX)
        if isinstance(found, str):
            await self.push(found)
            return
        address, options = found
        if self.envelope.mail_from is not None:
            await self.push(refuse(replies.NESTED_MAIL, "protocol"))
            return
        status = self._mail_parameters(self._getparams(options))
        if status is None:
            status = await self._call_handler_hook("MAIL", address, options)
        await self.push(status)

    def _mail_parameters(self, params: dict[str, str | bool] | None) -> str | None:
        """The refusal line of MAIL parameters other than BODY=7BIT|8BITMIME, SMTPUTF8 and
        SIZE=n (within the limit); else None, with SMTPUTF8 noted in the envelope."""
        assert self.envelope is not None
        if params is None:
            return refuse(replies.MAIL_SYNTAX, "syntax")
        size = params.pop("SIZE", "0")
        if not (isinstance(size, str) and size.isascii() and size.isdigit()):
            return refuse(replies.MAIL_SYNTAX, "syntax")
        if params.pop("BODY", "7BIT") not in ("7BIT", "8BITMIME"):
            return refuse(replies.BAD_BODY, "syntax")
        smtputf8 = params.pop("SMTPUTF8", False)
        if not isinstance(smtputf8, bool):
            return refuse(replies.SMTPUTF8_ARGUMENT, "syntax")
        if self.data_size_limit and int(size) > self.data_size_limit:
            return refuse(replies.MESSAGE_TOO_BIG, "too_big")
        if params:
            return refuse(replies.UNKNOWN_MAIL_PARAMETER, "syntax")
        self.envelope.smtp_utf8 = smtputf8
        return None

    @syntax("RCPT TO: <address>", extended=" [SP <mail-parameters>]")
    async def smtp_RCPT(self, arg: str | None) -> None:
        """aiosmtpd's RCPT, after a MAIL that may have been `MAIL FROM:<>`."""
        if await self.check_helo_needed() or await self.check_auth_needed("RCPT"):
            return
        assert self.envelope is not None
        if self.envelope.mail_from is None:
            await self.push(refuse(replies.NEED_MAIL, "protocol"))
            return
        found = self._path("TO:", arg, replies.RCPT_SYNTAX, replies.BAD_RECIPIENT_SYNTAX)
        if isinstance(found, str):
            await self.push(found)
            return
        address, options = found
        params = self._getparams(options)
        if not address or params is None:
            status = refuse(replies.RCPT_SYNTAX, "syntax")
        elif params:
            status = refuse(replies.UNKNOWN_RCPT_PARAMETER, "syntax")
        else:
            status = await self._call_handler_hook("RCPT", address, options)
        await self.push(status)

    def _path(
        self, keyword: str, arg: str | None, syntax_reply: Reply, malformed: Reply
    ) -> tuple[str, list[str]] | str:
        """The address ("" for `<>`) and upper-cased parameters of MAIL/RCPT, or the
        refusal line: `malformed` for a path that does not parse (501, RFC 5321 4.2.3)."""
        assert self.session is not None
        path = self._strip_command_keyword(keyword, arg or "")
        if not path:
            return refuse(syntax_reply, "syntax")
        parsed = envelope.parse_path(path)
        if parsed is None:
            return refuse(malformed, "bad_address")
        address, rest = parsed
        if rest and not self.session.extended_smtp:
            return refuse(syntax_reply, "syntax")
        return address, rest.upper().split()

    @syntax("DATA")
    async def smtp_DATA(self, arg: str) -> None:
        """DATA, read in chunks rather than aiosmtpd's line at a time (~3 us a line,
        most of the cost of a large message); only CRLF.CRLF ends the data."""
        if self._server.draining:
            await self.push(replies.SHUTTING_DOWN.line())
            if self.transport is not None:
                self.transport.close()
            return
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push(replies.NEED_RECIPIENT.line())
            return
        if arg:
            await self.push(replies.DATA_SYNTAX.line())
            return
        self.in_data = True
        try:
            await self.push("354 End data with <CR><LF>.<CR><LF>")
            content, refusal = await self._read_data()
            if refusal is not None:
                status = refuse(*refusal)
            else:
                self.envelope.content = self.envelope.original_content = content
                status = await self._call_handler_hook("DATA")
            self._set_post_data_state()  # type: ignore[no-untyped-call]
            await self.push(status)
        finally:
            self.in_data = False
            self._server.data_finished()

    async def _read_data(self) -> tuple[bytes, tuple[Reply, str] | None]:
        """The message up to CRLF.CRLF, dot-unstuffed, or why it is refused."""
        read = await smtp_data.read(self._reader, self.data_size_limit or 0, self._reset_timeout)
        return (b"", REFUSALS[read]) if isinstance(read, smtp_data.Refused) else (read, None)
