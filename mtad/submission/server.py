"""The listening sockets and open sessions of the submission port, their caps
(per client IP address and in all), and their orderly end at shutdown: stop
listening, let DATA in flight finish, then 421.

The sockets can be bound by one process and served by others (`bind`, then
`Server.start(sockets)` in each): the daemon binds once and its submission
processes accept on the same sockets."""

from __future__ import annotations

import asyncio
import ipaddress
import math
import socket
import ssl
from collections.abc import Sequence

from mtad.base import metrics, replies
from mtad.base.endpoints import HostPort
from mtad.base.replies import Reply
from mtad.submission.policy import Handler, Settings
from mtad.submission.protocol import Protocol

BACKLOG = 1024  # connections the kernel completes before a process accepts them


def bind(addresses: Sequence[HostPort]) -> list[socket.socket]:
    """Listening sockets for the addresses (each address a name resolves to), with
    SO_REUSEADDR, non-blocking; raises OSError and leaves nothing open."""
    sockets: list[socket.socket] = []
    try:
        for address in addresses:
            found = socket.getaddrinfo(address.host or None, address.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)  # fmt: skip
            for family, kind, proto, _, where in dict.fromkeys(found):
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(where)
                sock.listen(BACKLOG)
                sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Server:
    """The listening sockets and open sessions of the submission port."""

    def __init__(self, settings: Settings, handler: Handler, tls: ssl.SSLContext | None) -> None:
        self.settings = settings
        self._handler = handler
        self._tls = tls
        self._servers: list[asyncio.Server] = []
        self._sessions: set[Protocol] = set()
        self._per_client: dict[str, int] = {}  # open sessions by client IP address
        # Each process serving the port counts its own sessions and allows its share of
        # the caps, rounded up (as workers.py divides auth_max_failures).
        share = max(settings.processes, 1)
        self._max_per_client = math.ceil(settings.max_connections_per_client / share)
        self._max_sessions = math.ceil(settings.max_connections / share)
        self._data_done = asyncio.Event()
        self.draining = False

    @property
    def addresses(self) -> list[HostPort]:
        """The addresses actually bound (port 0 in the config becomes a real port)."""
        bound = []
        for srv in self._servers:
            for sock in srv.sockets:
                host, port = sock.getsockname()[:2]
                bound.append(HostPort(host, port))
        return bound

    def is_trusted(self, client: str) -> bool:
        try:
            address = ipaddress.ip_address(client.split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.settings.trusted_networks)

    async def start(self, sockets: Sequence[socket.socket] | None = None) -> None:
        """Serve the given listening sockets, or bind every listen address; raises
        OSError if one cannot be bound."""
        loop = asyncio.get_running_loop()
        for sock in bind(self.settings.listen) if sockets is None else sockets:
            self._servers.append(await loop.create_server(self._make_protocol, sock=sock, backlog=BACKLOG))

    def _make_protocol(self) -> Protocol:
        return Protocol(
            self,
            self._handler,
            data_size_limit=self.settings.max_message_size,
            enable_SMTPUTF8=True,
            decode_data=False,
            hostname=self.settings.hostname,
            ident="ESMTP mtad",
            tls_context=self._tls,
            timeout=self.settings.idle_timeout,
            auth_require_tls=True,
            loop=asyncio.get_running_loop(),
        )

    def opened(self, session: Protocol) -> Reply | None:
        """Count a new session from session.client, or the refusal (421) when it would
        be one too many for its address (trusted networks are exempt, as the apps
        that submit live there) or in all; a refused one is not counted."""
        held = self._per_client.get(session.client, 0)
        if held >= self._max_per_client and not self.is_trusted(session.client):
            return replies.TOO_MANY_CONNECTIONS_FROM_CLIENT
        if len(self._sessions) >= self._max_sessions:
            return replies.TOO_MANY_CONNECTIONS
        self._per_client[session.client] = held + 1
        self._sessions.add(session)
        metrics.SESSIONS.set(len(self._sessions))
        return None

    def closed(self, session: Protocol) -> None:
        if session in self._sessions:
            self._sessions.remove(session)
            left = self._per_client[session.client] - 1
            if left:
                self._per_client[session.client] = left
            else:
                del self._per_client[session.client]
            metrics.SESSIONS.set(len(self._sessions))
        self.data_finished()

    def data_finished(self) -> None:
        self._data_done.set()

    def stop_accepting(self) -> None:
        """Close the listening sockets; sessions already open go on."""
        self.draining = True
        for srv in self._servers:
            srv.close()

    async def wait_data_done(self, within: float) -> bool:
        """Wait until no session is in DATA, for at most `within` seconds; True if none is."""
        try:
            async with asyncio.timeout(within):
                while any(s.in_data for s in self._sessions):
                    self._data_done.clear()
                    await self._data_done.wait()
        except TimeoutError:
            return False
        return True

    async def shutdown(self, within: float) -> bool:
        """Stop listening, let DATA in flight finish for at most `within` seconds,
        then 421 and close every session; False if DATA was still in flight."""
        self.stop_accepting()
        finished = await self.wait_data_done(within)
        await self.close_sessions()
        return finished

    async def close_sessions(self) -> None:
        """Tell every open session 421 and close it."""
        line = (replies.SHUTTING_DOWN.line() + "\r\n").encode()
        for session in list(self._sessions):
            transport = session.transport
            if transport is not None and not transport.is_closing():
                if not session.in_data:
                    transport.write(line)  # type: ignore[attr-defined]
                transport.close()
        for srv in self._servers:
            await srv.wait_closed()

    def sessions(self) -> Sequence[Protocol]:
        return list(self._sessions)
