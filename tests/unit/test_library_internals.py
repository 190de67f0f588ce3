"""The internals of aiosmtpd and aiosmtplib that mtad relies on: private methods it
overrides or calls, private attributes it reads or sets, and behaviour neither
library documents. Both are pinned exactly (pyproject.toml); after an upgrade, a
failure here names what mtad must adapt. Each check says where mtad uses it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import aiosmtplib
import aiosmtplib.protocol
import aiosmtplib.smtp
from aiosmtpd.smtp import MISSING, SMTP, AuthResult, Envelope, Session, syntax

from mtad.outbound import smtp_wire
from mtad.submission import policy, protocol


def parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def source(function: Callable[..., Any]) -> str:
    return inspect.getsource(function)


class Hooks:
    """A handler with mtad's hooks whose form aiosmtpd inspects."""

    handle_EHLO = policy.Handler.handle_EHLO
    auth_PLAIN = policy.Handler.auth_PLAIN
    auth_LOGIN = policy.Handler.auth_LOGIN


async def smtp(cls: type[SMTP] = SMTP) -> SMTP:
    return cls(Hooks(), timeout=42.0, loop=asyncio.get_running_loop())


# --- aiosmtpd: the SMTP protocol class mtad subclasses (mtad/submission/protocol.py) -------


def test_aiosmtpd_smtp_takes_the_arguments_mtad_gives_it() -> None:
    # submission/server.py _make_protocol
    assert {"data_size_limit", "enable_SMTPUTF8", "decode_data", "hostname", "ident", "tls_context", "timeout",
            "auth_require_tls", "loop"} <= set(parameters(SMTP.__init__))  # fmt: skip


async def test_aiosmtpd_makes_sessions_and_envelopes_through_overridable_methods() -> None:
    # protocol.py Protocol._create_session, _create_envelope: mtad's session and envelope classes
    assert parameters(SMTP._create_session) == ["self"]
    assert parameters(SMTP._create_envelope) == ["self"]
    assert "self._create_session()" in source(SMTP.connection_made)

    class Marked(SMTP):
        def _create_envelope(self) -> Envelope:
            return policy.SubmissionEnvelope()

    server = await smtp(Marked)
    server._set_post_data_state()  # protocol.py smtp_DATA calls it after the DATA hook
    assert isinstance(server.envelope, policy.SubmissionEnvelope)


async def test_aiosmtpd_idle_timer_internals() -> None:
    # protocol.py _reset_timeout, _idle_check: one timer per idle period instead of one per command
    assert parameters(SMTP._reset_timeout) == ["self", "duration"]
    assert inspect.signature(SMTP._reset_timeout).parameters["duration"].default is None
    assert "self._reset_timeout()" in source(SMTP._handle_client)  # after every command
    assert parameters(SMTP._timeout_cb) == ["self"]
    server = await smtp()
    assert server._timeout_duration == 42.0
    assert server._timeout_handle is None
    assert isinstance(server.loop, asyncio.AbstractEventLoop)


async def test_aiosmtpd_auth_require_tls_is_an_attribute_read_per_command() -> None:
    # protocol.py connection_made sets it per client: trusted networks may AUTH without TLS
    server = await smtp()
    assert server._auth_require_tls is True
    assert "self._auth_require_tls" in source(SMTP.smtp_EHLO)  # whether AUTH is offered
    assert "self._auth_require_tls" in source(SMTP.smtp_AUTH)  # whether AUTH is taken


def test_aiosmtpd_tells_starttls_by_the_transport_already_set() -> None:
    # protocol.py connection_made: `self.transport is None` is a new connection, not STARTTLS's second call
    assert "self.transport is not None and seen_starttls" in source(SMTP.connection_made)


def test_aiosmtpd_replies_through_push_and_keeps_its_streams_as_reader_and_writer() -> None:
    # protocol.py push (writes to the transport itself), _read_data (self._reader), push (self._writer.drain)
    assert inspect.iscoroutinefunction(SMTP.push)
    assert parameters(SMTP.push) == ["self", "status"]
    assert "await self.push(" in source(SMTP._handle_client)
    assert "self._reader = reader" in source(SMTP._cb_client_connected)
    assert "self._writer = writer" in source(SMTP._cb_client_connected)


async def test_asyncio_stream_reader_buffer_takes_data_pushed_back() -> None:
    # protocol.py _read_data: commands pipelined after the data go back to self._reader._buffer
    reader = asyncio.StreamReader()
    reader.feed_data(b"QUIT\r\n")
    assert isinstance(reader._buffer, bytearray)  # type: ignore[attr-defined]
    reader._buffer[0:0] = b"RSET\r\n"  # type: ignore[attr-defined]
    assert await reader.readuntil() == b"RSET\r\n"
    assert await reader.readuntil() == b"QUIT\r\n"


async def test_aiosmtpd_private_helpers_mtad_calls() -> None:
    # protocol.py smtp_MAIL, smtp_RCPT, _path, _mail_parameters
    server = await smtp()
    assert parameters(SMTP._call_handler_hook) == ["self", "command", "args"]
    assert inspect.iscoroutinefunction(SMTP._call_handler_hook)
    assert server._strip_command_keyword("FROM:", "from: <a@example.com> SIZE=1") == "<a@example.com> SIZE=1"
    assert server._strip_command_keyword("TO:", "from: <a@example.com>") is None
    assert server._getparams(["SIZE=10", "SMTPUTF8"]) == {"SIZE": "10", "SMTPUTF8": True}
    assert server._getparams(["SIZE="]) is None
    assert parameters(SMTP._getaddr) == ["self", "arg"]  # overridden: VRFY parses with mtad.base.envelope
    assert "self._getaddr(arg)" in source(SMTP.smtp_VRFY)
    assert parameters(SMTP.check_helo_needed) == ["self", "helo"]
    assert parameters(SMTP.check_auth_needed) == ["self", "caller_method"]
    assert inspect.iscoroutinefunction(SMTP.check_helo_needed)
    assert inspect.iscoroutinefunction(SMTP.check_auth_needed)


async def test_aiosmtpd_dispatches_commands_to_the_subclass_smtp_methods() -> None:
    # protocol.py overrides smtp_EHLO, smtp_HELO, smtp_MAIL, smtp_RCPT, smtp_DATA, each under @syntax
    assert parameters(syntax) == ["text", "extended", "when"]
    server = protocol.Protocol(None, Hooks(), loop=asyncio.get_running_loop())  # type: ignore[arg-type]
    for command in ("EHLO", "HELO", "MAIL", "RCPT", "DATA"):
        assert server._smtp_methods[command].__func__ is getattr(protocol.Protocol, f"smtp_{command}")
        assert server._syntax_available(server._smtp_methods[command])


# --- aiosmtpd: the handler hooks and session state (mtad/submission/policy.py) ---------------


async def test_aiosmtpd_takes_mtads_hooks_in_the_form_they_have() -> None:
    # policy.py Handler.handle_EHLO (5 arguments: the responses), auth_PLAIN, auth_LOGIN
    server = await smtp()
    assert server._ehlo_hook_ver == "new"
    assert {"PLAIN", "LOGIN"} <= set(server._auth_methods)
    # policy.py auth_PLAIN, auth_LOGIN: challenge_auth, MISSING, AuthResult
    assert parameters(SMTP.challenge_auth)[:2] == ["self", "challenge"]
    assert MISSING is not None
    AuthResult(success=False, handled=False, message="535 5.7.8 no", auth_data=None)


def test_aiosmtpd_session_and_envelope_fields_mtad_reads() -> None:
    # policy.py SubmissionSession, SubmissionEnvelope, handle_DATA; protocol.py smtp_MAIL, smtp_RCPT, _path
    session = Session(None)  # type: ignore[arg-type]
    assert {"host_name", "extended_smtp", "ssl", "authenticated", "auth_data", "peer"} <= set(vars(session))
    assert {"mail_from", "rcpt_tos", "content", "original_content", "smtp_utf8"} <= set(vars(Envelope()))
    assert Envelope().mail_from is None  # "no MAIL yet", which `MAIL FROM:<>` ("") is not


# --- aiosmtplib: the client protocol mtad pipelines through (mtad/sessions.py) ---------------


def test_aiosmtplib_makes_its_protocol_by_a_module_level_name() -> None:
    # sessions.py replaces aiosmtplib.smtp.SMTPProtocol with _PipeliningProtocol
    assert "SMTPProtocol(" in source(aiosmtplib.smtp.SMTP._create_connection)
    assert aiosmtplib.smtp.SMTP._create_connection.__globals__ is vars(aiosmtplib.smtp)
    assert aiosmtplib.smtp.SMTPProtocol is smtp_wire.PipeliningProtocol
    assert issubclass(smtp_wire.PipeliningProtocol, aiosmtplib.protocol.SMTPProtocol)


class Wire(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return False


async def connected(cls: type[aiosmtplib.protocol.SMTPProtocol]) -> aiosmtplib.protocol.SMTPProtocol:
    made = cls(loop=asyncio.get_running_loop())
    assert made._command_lock is None
    made.connection_made(Wire())
    assert isinstance(made._command_lock, asyncio.Lock)  # sessions.py _pipelined, _send_body hold it
    made.data_received(b"220 ready\r\n")
    assert (await made.read_response(timeout=1)).code == 220
    return made


async def test_aiosmtplib_protocol_internals_mtad_pipelines_through() -> None:
    # sessions.py _pipelined, _send_body, _read_reply, _PipeliningProtocol.data_received
    made = await connected(aiosmtplib.protocol.SMTPProtocol)
    assert isinstance(made._buffer, bytearray)
    assert made._response_pending is False  # read_response clears it; mtad sets it before writing
    assert isinstance(made._response_waiter, asyncio.Future)
    assert parameters(made.read_response) == ["timeout"]
    assert parameters(made.write) == ["data"]
    made._buffer.extend(b"250 one\r\n250-two\r\n250 three\r\n")
    assert made._read_response_from_buffer() == aiosmtplib.SMTPResponse(250, "one")
    assert made._read_response_from_buffer() == aiosmtplib.SMTPResponse(250, "two\nthree")
    assert made._read_response_from_buffer() is None


async def test_aiosmtplib_drops_a_reply_that_arrives_while_one_waits_and_mtad_keeps_it() -> None:
    # sessions.py _PipeliningProtocol: why it exists (aiosmtplib reads one reply per command written)
    for cls, kept in ((aiosmtplib.protocol.SMTPProtocol, False), (smtp_wire.PipeliningProtocol, True)):
        made = await connected(cls)
        made._response_pending = True
        made.write(b"MAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.com>\r\n")
        made.data_received(b"250 sender ok\r\n")
        made.data_received(b"250 recipient ok\r\n")  # its waiter is done: the first reply waits
        assert (await made.read_response(timeout=1)).message == "sender ok"
        second = made._read_response_from_buffer()
        assert second == (aiosmtplib.SMTPResponse(250, "recipient ok") if kept else None), cls


def test_aiosmtplib_client_surface_mtad_uses() -> None:
    # sessions.py Pool._open (the constructor), _Session, _authenticate, _one_by_one, _tls_version
    assert {"hostname", "port", "sock", "use_tls", "start_tls", "tls_context", "local_hostname", "timeout",
            "source_address"} <= set(parameters(aiosmtplib.SMTP.__init__))  # fmt: skip
    for login in (aiosmtplib.SMTP.auth_plain, aiosmtplib.SMTP.auth_login, aiosmtplib.SMTP.auth_xoauth2):
        assert len([p for p in inspect.signature(login).parameters.values() if p.kind is p.POSITIONAL_ONLY]) == 3
    assert "timeout" in parameters(aiosmtplib.SMTP.execute_command)
    client = aiosmtplib.SMTP(hostname="localhost")
    assert client.protocol is None  # sessions.py _pipelined, _send_body: None once disconnected
    # sessions.py _read_reply turns a read timeout into the timeout aiosmtplib's own commands raise
    assert issubclass(aiosmtplib.SMTPReadTimeoutError, aiosmtplib.SMTPTimeoutError)
