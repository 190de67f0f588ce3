"""What delivery runs on a node, built from its settings: the routes mail takes
(resolver, router, the receivers' TLS policies: shared with submission, which routes
at accept), and on a node that delivers the engine with its own connections, its
sending mailboxes, and the TLS reports of the sessions it made. The daemon runs the
engine and `loops` in its TaskGroup, reconfigures both on a reload, closes the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mtad import db
from mtad.base import vault
from mtad.base.tasks import Loop
from mtad.deliver import delivery, egress
from mtad.deliver.configured import DeliverySettings
from mtad.feedback.tracking import Tracking
from mtad.feedback.unsubscribe import Unsubscribing
from mtad.feedback.verp import Verp
from mtad.mailboxes import relay
from mtad.outbound import fetching, policies, routing, sessions, tlsrpt
from mtad.signing import dkim
from mtad.spool import suspensions


@dataclass(frozen=True, slots=True)
class Routes:
    resolver: routing.DnsResolver
    router: routing.Router
    policies: policies.Policies  # closed by the daemon, last

    def reconfigure(self, out: DeliverySettings) -> None:
        self.router.reconfigure(out.providers, out.routes, out.sessions.port)


def routes(database: db.Database, out: DeliverySettings) -> Routes:
    resolver = routing.DnsResolver(out.nameservers, timeout=out.dns_timeout)
    return Routes(
        resolver,
        routing.Router(resolver, out.providers, routes=out.routes, port=out.sessions.port),
        policies.Policies(database, resolver, out.tls, count_failure=tlsrpt.failures(database)),
    )


@dataclass(slots=True)
class Delivering:
    engine: delivery.Delivery  # run, stopped and awaited by the daemon before its loops end
    pool: db.Database  # the engine's own connections: closed by the daemon
    loops: list[Loop] = field(default_factory=list)

    def reconfigure(self, out: DeliverySettings) -> None:
        """ConfigError, changing nothing, for pools the engine refuses."""
        self.engine.reconfigure(out.engine, out.rules, out.pools, out.relay)


async def on_node(
    database: db.Database, out: DeliverySettings, routes: Routes, signer: dkim.Signer, *, pool_size: int,
    hostname: str, sealer: vault.Vault | None, verp: Verp | None, unsubscribing: Unsubscribing | None,
    on_probation: Callable[[str], bool], controls: suspensions.Controls, tracking: Tracking | None = None,
) -> Delivering:  # fmt: skip
    """The engine of a node that delivers; `hostname`: the TLS reports' submitter."""
    queue = await db.Database.connect(database.dsn, max_size=pool_size, replan=True, name="delivery")
    verified = fetching.trust(out.tls.ca_file)
    engine = delivery.Delivery(
        out.engine, queue, routes.router, sessions.Pool(out.sessions, verified_tls=verified), out.rules,
        pools=egress.Egress(out.pools), tls=routes.policies, signer=signer, verp=verp, unsubscribing=unsubscribing,
        tracking=tracking,
        mailboxes=relay.Mailboxes(queue, out.relay, sealer),  # PostgreSQL's clock
        on_probation=on_probation, controls=controls,
    )  # fmt: skip
    reporting = tlsrpt.Reporter(database, routes.resolver, out.tls_reports, hostname, https_tls=verified)
    return Delivering(engine, queue, [("tls-reports", reporting.run)])
