"""DATA read in chunks: the end of data and dot-stuffed lines found wherever the chunks split them."""

import asyncio

import pytest

from mtad.base import smtp_data

WIRE = b"Subject: x\r\n\r\n..leading dot\r\nmiddle. dot\r\n...\r\nQUJD\r\n.\r\nQUIT\r\n"
MESSAGE = b"Subject: x\r\n\r\n.leading dot\r\nmiddle. dot\r\n..\r\nQUJD\r\n"


async def read_split(wire: bytes, cut: int, limit: int = 0) -> tuple[bytes | smtp_data.Refused, bytes]:
    """What read() makes of `wire` arriving in two pieces cut at `cut`, and what it leaves."""
    reader = asyncio.StreamReader()
    reader.feed_data(wire[:cut])
    reading = asyncio.ensure_future(smtp_data.read(reader, limit, lambda: None))
    await asyncio.sleep(0)  # one turn of the loop: read() takes the first piece alone
    reader.feed_data(wire[cut:])
    reader.feed_eof()
    result = await reading
    return result, await reader.read()


@pytest.mark.parametrize("cut", range(1, len(WIRE)))
async def test_every_split_reads_the_same_message(cut: int) -> None:
    assert await read_split(WIRE, cut) == (MESSAGE, b"QUIT\r\n")


async def test_an_empty_message_and_a_dotless_body() -> None:
    assert await read_split(b".\r\n", 1) == (b"", b"")
    assert await read_split(b"QUJD\r\nREVG\r\n.\r\n", 7) == (b"QUJD\r\nREVG\r\n", b"")


async def test_too_big_is_read_to_its_end() -> None:
    assert await read_split(b"x" * 50 + b"\r\n.\r\nNOOP\r\n", 20, limit=10) == (smtp_data.Refused.TOO_BIG, b"NOOP\r\n")


@pytest.mark.parametrize("cut", [1, 11, 13, 14])
async def test_the_limit_counts_the_message_without_its_last_crlf(cut: int) -> None:
    assert await read_split(b"x" * 10 + b"\r\n.\r\n", cut, limit=10) == (b"x" * 10 + b"\r\n", b"")
    assert await read_split(b"x" * 11 + b"\r\n.\r\n", cut, limit=10) == (smtp_data.Refused.TOO_BIG, b"")
