"""[submission]: the SMTP submission port, declared (mtad.base.settings)."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtad.base import errors, values
from mtad.base.endpoints import HostPort
from mtad.base.settings import key
from mtad.spool import settings as spool_settings


def tenant(value: Any) -> str:
    try:
        return spool_settings.check_tenant_name(values.string(value))
    except errors.MtadError as exc:
        raise ValueError(str(exc)) from None


# auto: half the CPU cores, at most 4 (PostgreSQL and delivery want the rest); on one core 0.
process_count = values.count_or_auto(64, lambda cores: min(4, cores // 2))
DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Submission:
    listen: tuple[HostPort, ...] = key(values.list_of(values.host_port), ["127.0.0.1:2525"],
                                       "Addresses of the SMTP submission port.")  # fmt: skip
    hostname: str = key(values.hostname_or_fqdn, "", "Name in the greeting, EHLO reply, Received and Message-IDs.")
    max_message_size: int = key(values.size, "25MiB", "Largest message accepted (552 5.3.4 beyond).")
    max_recipients: int = key(values.integer(1, 100_000), 100, "Most recipients of one message (452 4.5.3 beyond).")
    trusted_networks: tuple[values.Network, ...] = key(values.list_of(values.network, allow_empty=True),
                                                       ["127.0.0.0/8", "::1/128"],
                                                       "Clients that may submit without AUTH.")  # fmt: skip
    require_auth: bool = key(values.boolean, False, "Every client must AUTH, trusted networks included.")
    default_tenant: str = key(tenant, DEFAULT_TENANT, "Tenant of mail submitted without AUTH.")
    idle_timeout: float = key(values.positive_duration, "5m", "A session idle this long is closed.")
    auth_max_failures: int = key(values.integer(1, 1000), 5, "Failed AUTHs of a client before 454 4.7.0.")
    auth_failure_window: float = key(values.positive_duration, "10m", "The window of auth_max_failures.")
    max_connections_per_client: int = key(values.integer(1, 1_000_000), 100, "Open sessions from one client IP.")
    max_connections: int = key(values.integer(1, 1_000_000), 10_000, "Open sessions in all.")
    shutdown_timeout: float = key(values.duration, "30s", "At SIGTERM, how long sessions in DATA may take.")
    check_recipient_domains: bool = key(values.boolean, True, "Refuse a recipient whose domain takes no mail.")
    processes: int = key(process_count, "auto", "Processes serving the port beside the daemon's own.")


@dataclass(frozen=True, slots=True)
class Sendmail:
    """How `mtad sendmail` hands a message to this node's submission port."""

    submit_to: HostPort | None = key(
        values.optional_host_port, "", "Where `mtad sendmail` submits; empty: the first [submission] listen address."
    )
    login: str | None = key(values.optional_string, "", "Its AUTH name; empty: no AUTH (a trusted client needs none).")
    password_file: Path | None = key(values.optional_path, "", "The file holding that login's password.")
    domain: str | None = key(
        values.optional_domain, "", "The domain of a sender given without -f; empty: [submission] hostname."
    )


MIN_PRIORITY = -100
MAX_PRIORITY = 100


@dataclass(frozen=True, slots=True)
class TenantDefaults:
    """What a tenant's messages get when they say nothing ([tenants."NAME"])."""

    priority: int = 0
    pool: str | None = None  # a configured pool name; None: the route's or the default
    account_pool: str | None = None  # a configured account pool; None: the route's, else MX
    refuse_suppressed: bool = False  # a suppressed recipient is refused at RCPT (else its delivery is cancelled)
    list_unsubscribe: bool = False  # its mail gets List-Unsubscribe (one-click) fields, one recipient per transaction
    dsn: bool = True  # its senders get a non-delivery report for mail that bounced or failed
    quota: spool_settings.Quota = spool_settings.NO_QUOTA  # what it may submit (mtad.spool.quotas)
    track_opens: bool = False  # its HTML mail gets a pixel per recipient ([tracking]), one recipient per transaction
    track_clicks: bool = False  # its HTML mail's links go through /c/ per recipient, one recipient per transaction
    campaign_max_per_hour: int | None = None  # the limits of a campaign its mail makes on first use (None: none)
    campaign_max_per_day: int | None = None


_SUBMISSION = Submission(hostname="localhost", processes=0)


@dataclass(frozen=True, slots=True)
class Settings:
    """What the port takes: [submission]'s keys (their defaults are the declared ones),
    and what config gives from [tls] and the tables."""

    listen: tuple[HostPort, ...] = _SUBMISSION.listen
    hostname: str = field(default_factory=socket.getfqdn)
    max_message_size: int = _SUBMISSION.max_message_size
    max_recipients: int = _SUBMISSION.max_recipients
    trusted_networks: tuple[values.Network, ...] = _SUBMISSION.trusted_networks
    require_auth: bool = _SUBMISSION.require_auth
    default_tenant: str = _SUBMISSION.default_tenant
    idle_timeout: float = _SUBMISSION.idle_timeout
    auth_max_failures: int = _SUBMISSION.auth_max_failures
    auth_failure_window: float = _SUBMISSION.auth_failure_window
    # Open sessions from one IP address (421 4.7.0 beyond), and in all; both divided among `processes` (Server).
    max_connections_per_client: int = _SUBMISSION.max_connections_per_client
    max_connections: int = _SUBMISSION.max_connections
    shutdown_timeout: float = _SUBMISSION.shutdown_timeout
    check_recipient_domains: bool = _SUBMISSION.check_recipient_domains  # 550 5.1.2 for a domain that takes no mail
    processes: int = 0  # processes serving the port beside the daemon's (0: the daemon's own serves it)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    pools: frozenset[str] = frozenset()  # the configured source IP pools, for X-Mtad-Pool
    account_pools: frozenset[str] = frozenset()  # the configured account pools, for X-Mtad-Account-Pool
    tenant_defaults: Mapping[str, TenantDefaults] = field(default_factory=dict)  # by tenant
    default_quota: spool_settings.Quota = spool_settings.NO_QUOTA  # the quotas of a tenant without its own ([tenants])
