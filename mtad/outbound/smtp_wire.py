"""SMTP commands on the wire over aiosmtplib's protocol: pipelined (RFC 2920) or one
by one, the body dot-stuffed, replies made `Reply` values. Used by sessions only;
it leans on aiosmtplib's internals (the version is pinned)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import aiosmtplib
import aiosmtplib.protocol
import aiosmtplib.smtp

from mtad.base.replies import Reply

_ENHANCED = re.compile(r"^([245]\.\d{1,3}\.\d{1,3})\s*")


class PipeliningProtocol(aiosmtplib.protocol.SMTPProtocol):
    """aiosmtplib's protocol, keeping replies that arrive while an earlier one waits.

    aiosmtplib expects one reply per command it writes: data arriving while a
    parsed reply waits to be picked up is dropped. With pipelined commands
    (RFC 2920) the next replies can arrive exactly then; they are kept in the
    buffer, where `pipelined()` reads them. Data nobody asked for is still
    dropped, as aiosmtplib intends.
    """

    def data_received(self, data: bytes) -> None:
        waiter = self._response_waiter
        if waiter is not None and self._response_pending and waiter.done():
            self._buffer.extend(data)
            return
        super().data_received(data)


# aiosmtplib makes its protocol by this module-level name (pinned version).
setattr(aiosmtplib.smtp, "SMTPProtocol", PipeliningProtocol)  # noqa: B010


def reply_of(code: int, message: str) -> Reply:
    """aiosmtplib's (code, message) as a Reply, its enhanced code split off."""
    text = " ".join(message.split("\n"))
    match = _ENHANCED.match(text)
    enhanced = match.group(1) if match and match.group(1)[0] == str(code)[0] else ""
    if not 200 <= code <= 599:
        return Reply(451, "4.5.0", f"invalid reply code {code}: {text}"[:400])
    return Reply(code, enhanced, (text[match.end() :] if enhanced and match else text)[:1000])


async def one_by_one(
    client: aiosmtplib.SMTP, commands: Sequence[bytes], reply_timeout: float
) -> list[aiosmtplib.SMTPResponse]:
    """Each command and its reply in turn; stops after a refused MAIL (no RCPT, no DATA)
    and before DATA when no recipient was taken."""
    responses = [await client.execute_command(commands[0], timeout=reply_timeout)]
    if responses[0].code != 250:
        return responses
    for command in commands[1:-1]:
        responses.append(await client.execute_command(command, timeout=reply_timeout))
    if any(r.code in (250, 251) for r in responses[1:]):
        responses.append(await client.execute_command(commands[-1], timeout=reply_timeout))
    return responses


async def pipelined(
    client: aiosmtplib.SMTP, commands: Sequence[bytes], reply_timeout: float
) -> list[aiosmtplib.SMTPResponse]:
    """Write the commands at once and read their replies in order (RFC 2920).

    aiosmtplib reads one reply per command it writes; here several replies can
    arrive in one read, so the rest are taken from its buffer (see
    PipeliningProtocol). This leans on its protocol's internals (the version
    is pinned). No other coroutine reads in between: the command lock is held.
    """
    protocol = client.protocol
    if protocol is None or protocol._command_lock is None:
        raise aiosmtplib.SMTPServerDisconnected("Connection lost")
    responses: list[aiosmtplib.SMTPResponse] = []
    async with protocol._command_lock:
        protocol._response_pending = True
        protocol.write(b"\r\n".join(commands) + b"\r\n")
        while len(responses) < len(commands):
            buffered = protocol._read_response_from_buffer()
            if buffered is not None:
                responses.append(buffered)
                continue
            responses.append(await read_reply(client, protocol, reply_timeout))
    return responses


async def send_body(client: aiosmtplib.SMTP, body: bytes, reply_timeout: float) -> Reply:
    """After 354: the message, dot-stuffed (RFC 5321 4.5.2), then the reply to it.

    The body is CRLF-terminated already (submission refuses bare CR and LF)."""
    protocol = client.protocol
    if protocol is None or protocol._command_lock is None:
        raise aiosmtplib.SMTPServerDisconnected("Connection lost")
    # Only up to the last dot (a reverse memchr: often in the header, base64 has none)
    # can a line start with one; the search for CRLF "." is slower than a copy. One
    # join makes what goes on the wire: the rest of the body is copied once.
    last = body.rfind(b".") + 1
    stuffed = b"".join((
        b"." if body.startswith(b".") else b"",
        body[:last].replace(b"\r\n.", b"\r\n.."),
        memoryview(body)[last:],
        b".\r\n" if not body or body.endswith(b"\r\n") else b"\r\n.\r\n",
    ))  # fmt: skip
    async with protocol._command_lock:
        protocol._response_pending = True
        protocol.write(stuffed)
        response = await read_reply(client, protocol, reply_timeout)
    return reply_of(response.code, response.message)


async def read_reply(
    client: aiosmtplib.SMTP, protocol: aiosmtplib.protocol.SMTPProtocol, reply_timeout: float
) -> aiosmtplib.SMTPResponse:
    """The next reply; on a timeout or a lost connection the session is closed, as
    aiosmtplib's own commands close it."""
    try:
        return await protocol.read_response(timeout=reply_timeout)
    except aiosmtplib.SMTPReadTimeoutError as exc:
        client.close()
        raise aiosmtplib.SMTPTimeoutError(str(exc)) from exc
    except aiosmtplib.SMTPServerDisconnected:
        client.close()
        raise


def address(address: str) -> bytes:
    """An address as sent: UTF-8 (RFC 6531) when it is not ASCII."""
    return address.encode("utf-8")
