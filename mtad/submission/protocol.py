"""aiosmtpd's SMTP protocol, adapted to mtad at the edge.

It parses MAIL/RCPT paths with mtad.envelope (aiosmtpd's parser, the email
package's, was ~45 % of accept CPU), reads DATA in chunks rather than a line at
a time, gives every refusal of aiosmtpd's own an enhanced status code, decides
per connection whether AUTH needs TLS, keeps one idle timer per session, and
tells the server which sessions are in DATA. These override aiosmtpd
internals, which is why aiosmtpd is pinned to one version.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiosmtpd.smtp import SMTP, Envelope, Session, syntax

from mtad import envelope, metrics, replies
from mtad.replies import Reply
from mtad.submission.policy import Handler, SubmissionEnvelope, SubmissionSession, refuse

if TYPE_CHECKING:
    from mtad.submission.server import Server


CRLF = b"\r\n"
END_OF_DATA = b"\r\n.\r\n"
DOT_LINE = b"\r\n."
DATA_CHUNK = 64 * 1024
MAX_LINE = 1001  # RFC 5321 4.5.3.1.6: 1000 octets with CRLF, plus a transparency dot
WRITE_HIGH_WATER = 64 * 1024

# aiosmtpd's own replies that mtad words differently, with the metric reason.
_AIOSMTPD_REPLIES: dict[str, tuple[Reply, str]] = {
    "552 Error: message size exceeds fixed maximum message size": (replies.MESSAGE_TOO_BIG, "too_big"),
    "553 5.1.3 Error: malformed address": (Reply(553, "5.1.3", "Malformed address"), "bad_address"),
    "501 Syntax: MAIL FROM: <address> [SP <mail-parameters>]": (
        Reply(501, "5.5.4", "Syntax: MAIL FROM:<address> [parameters]; a sender address is required"),
        "syntax",
    ),
}


def has_long_line(data: bytearray) -> bool:
    """True when a line (CRLF-separated, data starting with CRLF) is longer than MAX_LINE
    with its CRLF. Steps from the last CRLF within reach of the previous one: a few
    C searches per message instead of a split into lines."""
    reach = MAX_LINE  # from the start of a line's CRLF: CRLF + up to MAX_LINE - 2 octets + CRLF
    at = 0
    while len(data) - at > reach + len(CRLF):
        last = data.rfind(CRLF, at + 1, at + reach + len(CRLF))
        if last < 0:
            return True
        at = last
    return False


class Protocol(SMTP):
    """aiosmtpd's SMTP protocol, adapted to mtad at the edge."""

    def __init__(self, server: Server, handler: Handler, **kwargs: Any) -> None:
        self._idle_deadline = 0.0
        super().__init__(handler, **kwargs)
        self._server = server
        self.in_data = False

    def _create_session(self) -> Session:
        return SubmissionSession(self.loop)

    def _create_envelope(self) -> Envelope:
        return SubmissionEnvelope()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        first = self.transport is None
        super().connection_made(transport)
        session: SubmissionSession = self.session  # type: ignore[assignment]
        peer = session.peer
        session.client = peer[0] if isinstance(peer, tuple) else str(peer or "")
        session.trusted = self._server.is_trusted(session.client)
        # AUTH without STARTTLS only for clients on trusted networks.
        self._auth_require_tls = not session.trusted
        if first:
            self._server.opened(self)

    def connection_lost(self, error: Exception | None) -> None:
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

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        parsed = envelope.parse_path(arg)
        if parsed is None:
            return None, None
        return parsed

    async def push(self, status: Any) -> None:
        """Write one reply. aiosmtpd's own refusals get mtad's wording or at least an
        enhanced code; the writer is drained only when its buffer is over the
        high-water mark (what drain() would check, without a coroutine per reply)."""
        if isinstance(status, str):
            translated = _AIOSMTPD_REPLIES.get(status)
            if translated is not None:
                status = refuse(*translated)
            elif status[:1] in ("4", "5"):
                worded = replies.with_enhanced_code(status)
                if worded != status:  # one of aiosmtpd's own refusals
                    metrics.REJECTED.labels(reason="protocol").inc()
                    status = worded
            status = status.encode()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(status + b"\r\n")  # type: ignore[attr-defined]
        if transport.get_write_buffer_size() > WRITE_HIGH_WATER:  # type: ignore[attr-defined]
            await self._writer.drain()

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
        """The message up to CRLF.CRLF, dot-unstuffed, or why it is refused.

        One scan for CRLF "." finds both the end of data (CRLF "." CRLF) and any
        dot-stuffed line on the way.
        """
        limit = self.data_size_limit or 0
        buf = bytearray(CRLF)  # the CRLF before the first line, so that ".\r\n" ends an empty message
        at = 0  # where the scan for CRLF "." goes on
        stuffed = too_big = False
        while True:
            found = buf.find(DOT_LINE, at)
            if found >= 0 and found + len(END_OF_DATA) <= len(buf):
                if buf[found + len(DOT_LINE) : found + len(END_OF_DATA)] == CRLF:
                    end = found
                    break
                stuffed = True
                at = found + len(DOT_LINE)
                continue
            at = found if found >= 0 else max(len(buf) - len(CRLF), 0)
            chunk = await self._reader.read(DATA_CHUNK)
            if not chunk:
                raise ConnectionResetError("connection closed during DATA")
            self._reset_timeout()
            buf += chunk
            if limit and len(buf) > limit + len(END_OF_DATA) + len(CRLF):
                too_big = True  # drain to the end of data, keeping only a possible partial terminator
                del buf[: len(buf) - len(END_OF_DATA)]
                at = 0
        if end + len(END_OF_DATA) < len(buf):
            # Pipelined commands after the data go back to the reader; aiosmtpd
            # itself reaches into the StreamReader's buffer the same way.
            self._reader._buffer[0:0] = buf[end + len(END_OF_DATA) :]  # type: ignore[attr-defined]
        if too_big:
            return b"", (replies.MESSAGE_TOO_BIG, "too_big")
        del buf[end + len(CRLF) :]
        if has_long_line(buf):
            return b"", (replies.LINE_TOO_LONG, "line_too_long")
        if stuffed:
            buf = buf.replace(DOT_LINE, CRLF)  # RFC 5321 4.5.2: drop the transparency dot
        return bytes(buf[len(CRLF) :]), None
