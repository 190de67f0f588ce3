"""The outbound session pool against a real SMTP sink on several loopback addresses."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosmtplib
import aiosmtplib.protocol
import pytest

from mtad.outbound import sessions, smtp_wire
from mtad.outbound.outcomes import Failure
from tests.sink import Sink

BODY = b"From: a@example.org\r\nSubject: hi\r\n\r\nHello.\r\n"


def pool(sink: Sink, **kw: object) -> sessions.Pool:
    return sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test", **kw))  # type: ignore[arg-type]


def target(sink: Sink, address: str = "127.0.0.2", host: str = "mx1.test") -> sessions.Target:
    return sessions.Target(host, address, sink.port)


def tx(*recipients: str) -> sessions.Transaction:
    return sessions.Transaction("app@example.org", recipients or ("a@example.com",), BODY)


@pytest.mark.parametrize("pipelining", [True, False])
async def test_each_recipient_gets_its_own_reply_and_sessions_are_reused(sink: Sink, pipelining: bool) -> None:
    sink.pipelining = pipelining
    p = pool(sink)
    result = await p.deliver([target(sink)], tx("ok@example.com", "reject-1@example.com", "tempfail-1@example.com"))
    assert result.failure is None
    assert {r: (reply.code, reply.enhanced) for r, reply in result.replies.items()} == {
        "ok@example.com": (250, "2.0.0"),
        "reject-1@example.com": (550, "5.1.1"),
        "tempfail-1@example.com": (451, "4.3.0"),
    }
    assert (result.host, result.address, result.tls, result.reused) == ("mx1.test", "127.0.0.2", None, False)
    second = await p.deliver([target(sink)], tx("again@example.com"))
    assert second.reused
    assert sink.connections == 1
    assert [m.recipients for m in sink.received] == [["ok@example.com"], ["again@example.com"]]
    assert sink.received[0].data.endswith(b"Hello.\r\n")
    await p.close()


async def test_the_next_mx_is_tried_when_one_refuses_connections(sink: Sink) -> None:
    p = pool(sink)
    dead = sessions.Target("mx0.test", "127.0.0.9", sink.port)  # nothing listens there
    result = await p.deliver([dead, target(sink, "127.0.0.3", "mx2.test")], tx())
    assert (result.failure, result.host, result.address) == (None, "mx2.test", "127.0.0.3")
    assert sink.received[0].local == "127.0.0.3"
    nothing = await p.deliver([dead], tx())
    assert nothing.failure is Failure.CONNECT_FAILED
    await p.close()


async def test_starttls_when_offered_and_required_tls(tls_files: tuple[Path, Path]) -> None:
    from mtad.submission import tls_context

    secure = await Sink(("127.0.0.4",), tls=tls_context(*tls_files)).start()
    clear = await Sink(("127.0.0.5",)).start()
    try:
        result = await pool(secure).deliver([target(secure, "127.0.0.4")], tx())
        assert result.tls in ("TLSv1.2", "TLSv1.3")
        assert secure.received[0].tls
        refused = await pool(clear, tls_required=True).deliver([target(clear, "127.0.0.5")], tx())
        assert refused.failure is Failure.TLS_REQUIRED
        assert clear.received == []
    finally:
        await secure.stop()
        await clear.stop()


async def test_each_result_says_where_its_time_went(tls_files: tuple[Path, Path]) -> None:
    from mtad.submission import tls_context

    secure = await Sink(("127.0.0.4",), tls=tls_context(*tls_files), data_delay=0.05).start()
    try:
        p = pool(secure)
        first = await p.deliver([target(secure, "127.0.0.4")], tx())
        assert first.tls in ("TLSv1.2", "TLSv1.3")
        assert first.cipher
        assert first.connect_time > 0
        assert first.tls_time > 0
        assert first.transfer_time >= 0.05  # the sink's wait before its reply to the data
        again = await p.deliver([target(secure, "127.0.0.4")], tx())
        assert (again.reused, again.connect_time, again.tls_time, again.cipher) == (True, 0.0, 0.0, first.cipher)
        assert again.transfer_time >= 0.05
        dead = sessions.Target("mx0.test", "127.0.0.9", secure.port)  # nothing listens there
        refused = await p.deliver([dead], tx())
        assert (refused.failure, refused.tls_time, refused.transfer_time) == (Failure.CONNECT_FAILED, 0.0, 0.0)
        assert refused.connect_time > 0  # the refused connection's time counts too
        await p.close()
    finally:
        await secure.stop()


async def test_a_disconnect_after_the_data_may_have_delivered(sink: Sink) -> None:
    result = await pool(sink).deliver([target(sink)], tx("disconnect-in-data@example.com"))
    assert result.failure is Failure.DISCONNECTED_IN_DATA
    assert result.data_sent


async def test_sessions_carry_at_most_max_messages(sink: Sink) -> None:
    p = pool(sink, max_messages=2)
    for _ in range(5):
        assert (await p.deliver([target(sink)], tx())).failure is None
    assert sink.connections == 3  # 2 + 2 + 1
    await p.close()


async def test_sessions_per_host_are_capped(sink: Sink) -> None:
    p = pool(sink, max_per_host=2)
    results = await asyncio.gather(*(p.deliver([target(sink)], tx(f"r{i}@example.com")) for i in range(20)))
    assert all(r.failure is None for r in results)
    assert sink.connections <= 2
    assert len(sink.received) == 20
    await p.close()


async def test_idle_sessions_are_closed(sink: Sink) -> None:
    clock = [0.0]
    p = sessions.Pool(sessions.Settings(port=sink.port, idle_timeout=30), now=lambda: clock[0])
    await p.deliver([target(sink)], tx())
    assert await p.close_idle() == 0
    clock[0] = 31
    assert await p.close_idle() == 1
    assert p.statistics().open == 0


async def test_the_source_address_is_bound(sink: Sink) -> None:
    result = await pool(sink, source_address="127.0.0.6").deliver([target(sink)], tx())
    assert result.source == "127.0.0.6"
    assert sink.received[0].peer == "127.0.0.6"


def test_replies_are_parsed_into_values() -> None:
    reply = smtp_wire.reply_of(550, "5.1.1 The email account\nthat you tried to reach does not exist")
    assert (reply.code, reply.enhanced, reply.text) == (
        550,
        "5.1.1",
        "The email account that you tried to reach does not exist",
    )
    assert smtp_wire.reply_of(250, "OK").enhanced == ""
    assert smtp_wire.reply_of(451, "5.1.1 mismatched class").enhanced == ""  # a 4xx with a 5.x.x is not trusted


@pytest.mark.parametrize("pipelining", [True, False])
async def test_every_recipient_refused_or_the_sender_refused(sink: Sink, pipelining: bool) -> None:
    sink.pipelining = pipelining
    p = pool(sink)
    refused = await p.deliver([target(sink)], tx("reject-1@example.com", "tempfail-2@example.com"))
    assert {r: reply.code for r, reply in refused.replies.items()} == {
        "reject-1@example.com": 550,
        "tempfail-2@example.com": 451,
    }
    assert not refused.data_sent
    after = await p.deliver([target(sink)], tx("fine@example.com"))  # the session is still in step
    assert after.replies["fine@example.com"].code == 250
    assert after.reused
    await p.close()


async def test_dots_at_the_start_of_lines_survive(sink: Sink) -> None:
    body = b"Subject: dots\r\n\r\n.leading\r\n..two\r\n.\r\nend\r\n"
    p = pool(sink)
    result = await p.deliver([target(sink)], sessions.Transaction("app@example.org", ("a@example.com",), body))
    assert result.replies["a@example.com"].code == 250
    assert sink.received[0].data == body
    await p.close()


async def test_a_reply_arriving_while_the_previous_one_waits_is_kept() -> None:
    """uvloop reads several segments in one go: the reply to the next pipelined command
    can arrive before the coroutine picked up the previous one. aiosmtplib's protocol
    drops it; mtad's keeps it for the pipelined reader."""

    class Transport(asyncio.Transport):
        def get_extra_info(self, name: str, default: object = None) -> object:
            return default

        def is_closing(self) -> bool:
            return False

        def write(self, data: bytes | bytearray | memoryview) -> None:
            pass

    def feed(protocol: aiosmtplib.protocol.SMTPProtocol) -> list[aiosmtplib.SMTPResponse]:
        protocol.connection_made(Transport())
        protocol.data_received(b"250 first\r\n")  # parsed: waits to be picked up
        protocol.data_received(b"250 second\r\n")  # arrives in the same turn of the loop
        got = []
        if (buffered := protocol._read_response_from_buffer()) is not None:
            got.append(buffered)
        return got

    loop = asyncio.get_running_loop()
    kept = feed(smtp_wire.PipeliningProtocol(loop=loop))
    assert [r.message for r in kept] == ["second"]
    assert feed(aiosmtplib.protocol.SMTPProtocol(loop=loop)) == []  # what the fix is for
