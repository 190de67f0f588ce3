"""Reading SMTP DATA in chunks rather than aiosmtpd's line at a time (~3 us a line,
most of the cost of a large message): the submission port's and the inbound
listener's. Only CRLF.CRLF ends the data; it comes back dot-unstuffed."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable

CRLF = b"\r\n"
END_OF_DATA = b"\r\n.\r\n"
DOT_LINE = b"\r\n."
DATA_CHUNK = 64 * 1024
MAX_LINE = 1001  # RFC 5321 4.5.3.1.6: 1000 octets with CRLF, plus a transparency dot


class Refused(enum.Enum):
    """Why the data was read to its end but not kept."""

    TOO_BIG = "too_big"  # over the size limit
    LINE_TOO_LONG = "line_too_long"  # a line over MAX_LINE


def has_long_line(data: bytes | bytearray) -> bool:
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


async def read(
    reader: asyncio.StreamReader, limit: int, touch: Callable[[], None], *, long_lines: bool = False
) -> bytes | Refused:
    """The message up to CRLF.CRLF, dot-unstuffed, or why it is refused (limit 0: no
    size limit; `long_lines`: a line over MAX_LINE is taken); `touch` is called at
    each chunk (the session's idle timer).
    ConnectionResetError when the client goes before the end of data.

    One scan for CRLF "." finds both the end of data (CRLF "." CRLF) and any
    dot-stuffed line on the way.
    """
    buf = bytearray(CRLF)  # the CRLF before the first line, so that ".\r\n" ends an empty message
    at = 0  # where the scan for CRLF "." goes on
    stuffed = too_big = False
    while True:
        # A search for "." first (a memchr) skips to where CRLF "." can start: a large
        # message is mostly base64, which has no dot, and a search for three octets is slower.
        dot = buf.find(b".", at)
        found = -1 if dot < 0 else buf.find(DOT_LINE, max(at, dot - len(CRLF)))
        if found >= 0 and found + len(END_OF_DATA) <= len(buf):
            if buf[found + len(DOT_LINE) : found + len(END_OF_DATA)] == CRLF:
                end = found
                break
            stuffed = True
            at = found + len(DOT_LINE)
            continue
        at = found if found >= 0 else max(len(buf) - len(CRLF), 0)
        if too_big or (limit and at - len(CRLF) > limit):
            too_big = True  # read on to the end of data, keeping only what is not searched yet
            del buf[:at]
            at = 0
        chunk = await reader.read(DATA_CHUNK)
        if not chunk:
            raise ConnectionResetError("connection closed during DATA")
        touch()
        buf += chunk
    if end + len(END_OF_DATA) < len(buf):
        # Pipelined commands after the data go back to the reader; aiosmtpd
        # itself reaches into the StreamReader's buffer the same way.
        reader._buffer[0:0] = buf[end + len(END_OF_DATA) :]  # type: ignore[attr-defined]
    if too_big or (limit and end - len(CRLF) > limit):
        return Refused.TOO_BIG
    del buf[end + len(CRLF) :]
    if not long_lines and has_long_line(buf):
        return Refused.LINE_TOO_LONG
    if stuffed:
        buf = buf.replace(DOT_LINE, CRLF)  # RFC 5321 4.5.2: drop the transparency dot
    return bytes(memoryview(buf)[len(CRLF) :])  # one copy, where a slice of a bytearray makes two
