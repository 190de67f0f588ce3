"""[dns], [tls] and the sessions' keys of [delivery]: how receivers are found and
reached, declared (mtad.base.settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtad.base import settings as declared
from mtad.base import values
from mtad.base.endpoints import HostPort


@dataclass(frozen=True, slots=True)
class Dns:
    nameservers: tuple[HostPort, ...] = declared.key(values.list_of(values.host_port, allow_empty=True), [],
                                            "Name servers, host:port; empty: the system's.")  # fmt: skip
    timeout: float = declared.key(values.positive_duration, "5s", "One lookup; longer counts as a temporary failure.")


@dataclass(frozen=True, slots=True)
class Tls:
    cert: Path | None = declared.key(
        values.optional_path, "", "PEM certificate chain for STARTTLS on the submission port."
    )
    key: Path | None = declared.key(values.optional_path, "", "Its private key.")
    outbound: str = declared.key(values.choice("opportunistic", "required", "dane"), "opportunistic",
                        "STARTTLS to receivers: opportunistic, required or dane.")  # fmt: skip
    ca_file: Path | None = declared.key(
        values.ca_file, "", "The CAs smarthosts, OAuth and MTA-STS are verified against."
    )
    mta_sts: bool = declared.key(values.boolean, True, "Honour the recipient domains' MTA-STS policies.")
    mta_sts_port: int = declared.key(values.integer(1, 65535), 443, "Where the policies are fetched.")
    mta_sts_timeout: float = declared.key(values.positive_duration, "10s", "One policy fetch.")
    reports: bool = declared.key(values.boolean, True, "Send the daily TLS reports (RFC 8460).")
    report_organization: str = declared.key(values.string, "", "Their organization; empty: [submission] hostname.")
    report_from: str = declared.key(values.string, "", "Their sender; empty: postmaster@[submission] hostname.")
    report_contact: str = declared.key(values.string, "", "Their contact-info.")


@dataclass(frozen=True, slots=True)
class Sessions:
    """The keys of [delivery] that say how the SMTP client sessions are made
    (deliver.settings.Delivery declares the rest of the section)."""

    port: int = declared.key(values.integer(1, 65535), 25, "Port of the receiving mail exchangers.")
    source_address: str | None = declared.key(values.optional_ip, "", "Local address of sends without a pool.")
    ehlo_hostname: str = declared.key(values.string, "", "Name in our EHLO; empty: [submission] hostname.")
    max_messages_per_session: int = declared.key(values.integer(1, 100_000), 100, "Messages a session carries.")
    max_sessions_per_host: int = declared.key(values.integer(1, 10_000), 20, "Sessions open at once to one MX.")
    idle_timeout: float = declared.key(values.positive_duration, "30s", "An unused session closes after this long.")
    connect_timeout: float = declared.key(values.positive_duration, "30s", "To connect and receive the greeting.")
    command_timeout: float = declared.key(values.positive_duration, "5m", "To wait for any reply.")


_SESSIONS = Sessions()


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """[delivery]'s session keys (their defaults are the declared ones), and [tls] outbound."""

    port: int = _SESSIONS.port
    ehlo_hostname: str = "localhost"  # config gives [delivery] ehlo_hostname, else [submission] hostname
    source_address: str | None = _SESSIONS.source_address
    tls_required: bool = False
    connect_timeout: float = _SESSIONS.connect_timeout
    command_timeout: float = _SESSIONS.command_timeout
    max_messages: int = _SESSIONS.max_messages_per_session  # per session
    max_per_host: int = _SESSIONS.max_sessions_per_host  # open sessions to one address
    idle_timeout: float = _SESSIONS.idle_timeout


_TLS = Tls()


@dataclass(frozen=True, slots=True)
class PolicySettings:
    """[tls]'s policy keys (their defaults are the declared ones)."""

    mta_sts: bool = _TLS.mta_sts  # honour the MTA-STS policies of recipient domains
    dane: bool = False  # verify against TLSA records in DNSSEC-validated answers ([tls] outbound = "dane")
    https_port: int = _TLS.mta_sts_port  # where policies are fetched (a test serves them elsewhere)
    fetch_timeout: float = _TLS.mta_sts_timeout
    ca_file: Path | None = None  # only its CAs are trusted ([tls] ca_file); None: the system's


@dataclass(frozen=True, slots=True)
class ReportSettings:
    enabled: bool = _TLS.reports  # false: sessions are still counted (metrics too), no report is sent
    organization: str = "mtad"  # organization-name of the reports
    contact: str = ""  # contact-info (an address); "": postmaster@ the sender's domain
    sender: str = "postmaster@localhost"  # From of the reports sent by mail
    tenant: str = "default"  # the tenant whose mail the reports are
    every: float = 3600.0  # seconds between looks for the reports due
    keep_days: int = 30  # days of counts and reports kept
    post_timeout: float = 30.0
