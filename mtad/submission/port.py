"""The submission port served in one process: the daemon's ([submission] processes
= 0), or a child's; and the settings it needs, all a child is handed."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import structlog

from mtad import db, submission
from mtad.base import metrics
from mtad.base.endpoints import HostPort
from mtad.feedback import suppression
from mtad.outbound import routing
from mtad.spool import commit, quotas, tenants
from mtad.spool import settings as spool_settings

logger = structlog.get_logger("mtad.submission.port")


@dataclass(frozen=True, slots=True)
class PortSettings:
    """What serving the submission port needs, in the daemon or in a child: the
    daemon makes it from the configuration (daemon.port_settings)."""

    submission: submission.Settings
    spool: spool_settings.Spool  # the group commit
    log_format: str
    log_level: str
    dsn: str
    pool_size: int
    nameservers: tuple[HostPort, ...]  # the recipient domains' lookups at RCPT
    dns_timeout: float
    providers: routing.Providers
    routes: Mapping[str, HostPort]
    port: int  # what delivery connects to (a route's relay port)
    node: str  # the fast path hands over leases of this node
    lease_duration: float

    def gate(self, database: db.Database, states: tenants.States) -> quotas.Gate:
        """The check of the tenants' states and quotas for a process serving the port."""
        sub = self.submission
        quota = {t: d.quota for t, d in sub.tenant_defaults.items()}
        return quotas.Gate(database, states, quota, sub.default_quota)

    def router(self) -> routing.Router:
        resolver = routing.DnsResolver(self.nameservers, timeout=self.dns_timeout)
        return routing.Router(resolver, self.providers, routes=self.routes, port=self.port)


class InProcess:
    """The submission port served by the daemon's own process ([submission]
    processes = 0), which hands what it accepts to its delivery (the fast path).
    The same interface as Processes: run() owned by the daemon's TaskGroup,
    start(), addresses, stop() (then run() returns), counts(), close()."""

    def __init__(
        self,
        settings: PortSettings,
        database: db.Database,
        router: routing.Router,
        *,
        fast_path: commit.FastPath | None = None,
        gate: quotas.Gate | None = None,
    ) -> None:
        sub = settings.submission
        self._within = sub.shutdown_timeout
        self.committer = commit.committer(database, settings.spool, fast_path=fast_path)
        tls = submission.tls_context(sub.tls_cert, sub.tls_key) if sub.tls_cert and sub.tls_key else None
        refusing = any(t.refuse_suppressed for t in sub.tenant_defaults.values())  # asks at RCPT
        checker = suppression.Checker(database) if refusing else None
        self.handler = submission.Handler(sub, self.committer, tenants.Authenticator(database), router=router,
                                          suppressions=checker, gate=gate)  # fmt: skip
        self._router = router
        self._gate = gate
        self.server = submission.Server(sub, self.handler, tls)

    def reconfigure(self, settings: PortSettings) -> None:
        """A reload: the submission's policy settings (tenants, quotas, pools, limits),
        the provider and route tables of its recipient checks. Listening sockets, the
        connection caps and the database stay as they were started."""
        sub = settings.submission
        self.handler.settings = sub
        self.handler.acceptor.settings = sub
        self._router.reconfigure(settings.providers, settings.routes, settings.port)
        if self._gate is not None:
            self._gate.reconfigure({t: d.quota for t, d in sub.tenant_defaults.items()}, sub.default_quota)

    async def run(self) -> None:
        await self.committer.run()

    async def start(self, listening: Sequence[socket.socket] | None = None) -> None:
        """Serve the given sockets, or bind the listen addresses; raises OSError."""
        await self.server.start(listening)

    @property
    def addresses(self) -> list[HostPort]:
        return self.server.addresses

    async def stop(self) -> None:
        """Steps 1-4 of the daemon's shutdown: no new sessions, DATA in flight
        finishes (bounded), 421 to the rest, what the committer holds is committed."""
        server = self.server
        if not await server.shutdown(self._within):
            logger.warning("shutdown_timeout", in_data=sum(s.in_data for s in server.sessions()))
        self.committer.close()

    async def counts(self) -> list[list[metrics.Counted]]:
        return []  # this process's own metrics are all there is

    async def heed(self) -> None:
        """Nothing: this process's gate is the daemon's, which reads the states itself."""

    def close(self) -> None:
        self.committer.close()
