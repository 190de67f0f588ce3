"""Configuration: one TOML file, overridable by MTAD_<SECTION>_<KEY> variables (any
other MTAD_ variable but those of NOT_CONFIG is refused, as an unknown key is).

Values parse into typed settings at load ("25MiB" becomes an int, "2ms" a float
of seconds, "10.0.0.0/8" a network). Every problem is collected and raised at
once as ConfigError; a bad value never falls back to a default. A key absent
from both the file and the environment takes the default documented in
conf/mtad.toml. A relative path in the file (or a relative default) is relative
to the file's directory, never the working directory; an unset [database]
data_dir is found beside the file too (`default_data_dir`), so that the daemon and
the tools given one file reach one spool.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import ssl
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtad import db
from mtad.base import datafiles, errors, values
from mtad.base.endpoints import HostPort
from mtad.outbound import outcomes
from mtad.spool import tenants

if TYPE_CHECKING:  # imported where they are used: `mtad queue ls` needs none of them
    from mtad import submission
    from mtad.admin import names as admin_names
    from mtad.deliver import egress
    from mtad.deliver import settings as deliver_settings
    from mtad.feedback import inbound, inbox, reputation, suppression, webhook_sender
    from mtad.mailboxes import relay
    from mtad.outbound import policies, routing, sessions, tlsrpt
    from mtad.signing import rotation
    from mtad.spool import quotas, retention

DEFAULT_PATHS = (Path("conf/mtad.toml"), Path("/etc/mtad/mtad.toml"))
# A held delivery's lease is renewed every third of it, on the wire too, so it covers an
# attempt of any length; what it must outlast is one renewal that waits for the database.
MIN_LEASE = 1.5 * db.CONNECT_TIMEOUT
OWN_KEY = "accounts.key"  # the key mtad makes for itself on the embedded default, beside the data directory
OWN_BOUNCE_KEY = "bounces.key"  # the same for the VERP addresses' HMAC
OWN_UNSUBSCRIBE_KEY = "unsubscribe.key"  # the same for the unsubscribe links' tokens


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    dsn: str | None  # None: run the embedded PostgreSQL under data_dir
    data_dir: Path
    pool_size: int
    wait: float = 30.0  # how long a command-line tool waits for the embedded server


@dataclass(frozen=True, slots=True)
class SpoolSettings:
    commit_window: float
    commit_max_batch: int
    commit_max_batch_bytes: int
    commit_timeout: float
    idempotency_window: float  # how long a resubmission is recognised by its key


@dataclass(frozen=True, slots=True)
class HttpSettings:
    listen: HostPort | None  # None: no HTTP endpoint


@dataclass(frozen=True, slots=True)
class AdminSettings:
    listen: HostPort
    token_file: Path | None  # None: no admin API
    token: str | None = None  # read from token_file when the configuration is loaded


@dataclass(frozen=True, slots=True)
class LogSettings:
    format: str
    level: str


@dataclass(frozen=True, slots=True)
class AccountsSettings:
    key_file: Path | None  # the key that seals account secrets, DKIM keys and webhook secrets (mtad.base.vault), else
    key_env: str | None  # the environment variable that holds it
    make: bool = False  # key_file is mtad's own (embedded database, no key named): made when missing


@dataclass(frozen=True, slots=True)
class BouncesSettings:
    domain: str | None  # the domain of the VERP envelope senders of MX mail (None: VERP off)
    key_file: Path | None  # the key of their HMAC
    make: bool = False  # key_file is mtad's own (embedded database, no key named): made when missing


@dataclass(frozen=True, slots=True)
class UnsubscribeSettings:
    listen: tuple[HostPort, ...]  # the public one-click endpoint (empty: none on this node)
    url: str | None  # its public base URL, https (None: no List-Unsubscribe is added)
    key_file: Path | None  # the key of the links' tokens
    make: bool = False  # key_file is mtad's own (embedded database, no key named): made when missing


@dataclass(frozen=True, slots=True)
class NodeSettings:
    id: str
    heartbeat_interval: float


@dataclass(frozen=True, slots=True)
class DnsSettings:
    nameservers: tuple[HostPort, ...]  # empty: the system's resolvers
    timeout: float


@dataclass(frozen=True, slots=True)
class Basics:
    """The part of the configuration a command-line tool needs (load_basics)."""

    database: DatabaseSettings
    node: NodeSettings
    accounts: AccountsSettings
    dns: DnsSettings
    tenants: TenantLimits
    source: Path | None
    default_tenant: str = "default"  # [submission] default_tenant: a tenant with or without a row


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """What [tenants] says of the tenants' quotas and reputation limits."""

    quota: quotas.Quota  # of a tenant without its own table
    guard: reputation.Guard
    probation_default: bool  # `mtad tenants add` puts a new tenant on probation
    own_quotas: dict[str, quotas.Quota]  # by tenant
    own_guards: dict[str, reputation.Guard]

    def of(self, tenant: str) -> tuple[quotas.Quota, reputation.Guard]:
        return self.own_quotas.get(tenant, self.quota), self.own_guards.get(tenant, self.guard)


BASIC_SECTIONS = ("database", "node", "accounts", "dns")


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    enabled: bool
    engine: deliver_settings.Settings
    sessions: sessions.Settings
    nameservers: tuple[HostPort, ...]  # empty: the system's resolvers
    dns_timeout: float
    providers: routing.Providers
    rules: outcomes.Rules
    routes: Mapping[str, HostPort]  # domain -> relay
    pools: Mapping[str, egress.PoolSettings]  # [pools.NAME]
    relay: relay.Settings  # [account_pools.NAME] and the [accounts] responses
    tls: policies.Settings  # the recipient domains' TLS policies: MTA-STS, DANE
    tls_reports: tlsrpt.Settings  # TLS reporting (RFC 8460) to those domains
    dkim_processes: int  # RSA signatures made off the event loop, in this many processes (0: on it)


@dataclass(frozen=True, slots=True)
class Settings:
    database: DatabaseSettings
    submission: submission.Settings
    spool: SpoolSettings
    http: HttpSettings
    admin: AdminSettings
    log: LogSettings
    node: NodeSettings
    delivery: DeliverySettings
    accounts: AccountsSettings
    dkim: rotation.Settings
    retention: retention.Settings
    suppression: suppression.Settings
    bounces: BouncesSettings
    unsubscribe: UnsubscribeSettings
    inbound: inbound.Settings
    inbox: inbox.Settings
    webhooks: webhook_sender.Settings
    reputation: reputation.Settings
    delayed_after: float | None  # [reports]: a notice of mail still retried this long after it came
    source: Path | None

    @property
    def default_tenant(self) -> str:
        return self.submission.default_tenant


# --- value parsers: each takes the raw TOML (or environment) value, returns the
# typed value or raises ValueError with a message for the operator.


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _optional_string(value: Any) -> str | None:
    return _string(value) or None


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


# Shared with the modules that parse tables of their own (mtad.base.values).
_integer = values.integer
duration = values.duration
_positive_duration = values.positive_duration
size = values.size


_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


def _processes(value: Any) -> int:
    """'auto' or 0-64. auto: half the CPU cores, at most 4 (PostgreSQL and delivery
    want the rest); on one core, 0 (the daemon's own process serves the port)."""
    if value == "auto":
        return min(4, (os.cpu_count() or 1) // 2)
    if isinstance(value, str):
        raise ValueError(f'expected a whole number or "auto", got {value!r}')
    return _integer(0, 64)(value)


def _dkim_processes(value: Any) -> int:
    """'auto' or 0-64. auto: a quarter of the CPU cores, at least 1 (an RSA signature
    is about as much CPU as the rest of a message's delivery)."""
    if value == "auto":
        return max(1, (os.cpu_count() or 1) // 4)
    if isinstance(value, str):
        raise ValueError(f'expected a whole number or "auto", got {value!r}')
    return _integer(0, 64)(value)


def _optional_address(value: Any) -> str | None:
    text = _string(value).strip().lower()
    if not text:
        return None
    local, at, domain = text.rpartition("@")
    if not local or not at or not _HOSTNAME.match(domain) or any(c.isspace() or c in "<>" for c in text):
        raise ValueError(f"expected an email address such as fbl@bounces.example.org, got {value!r}")
    return text


def _https_url(value: Any) -> str | None:
    text = _string(value).strip().rstrip("/")
    if not text:
        return None
    if not re.fullmatch(r"https://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)?", text):
        raise ValueError(f"expected the endpoint's public base URL, https://host[/path], got {value!r}")
    return text


def _optional_domain(value: Any) -> str | None:
    text = _string(value).strip().lower().rstrip(".")
    if text and (not _HOSTNAME.match(text) or "." not in text):
        raise ValueError(f"{value!r} is not a domain name")
    return text or None


def _hostname(value: Any) -> str:
    text: str = _string(value) or socket.getfqdn()
    if not _HOSTNAME.match(text):
        raise ValueError(f"{text!r} is not a valid host name")
    return text


def host_port(value: Any) -> HostPort:
    """ "127.0.0.1:2525", "[::1]:2525" or "localhost:2525"; port 0 picks a free port."""
    text = _string(value).strip()
    match = re.match(r"^\[([0-9A-Fa-f:.]+)\]:(\d+)$", text) or re.match(r"^([^:\[\]]+):(\d+)$", text)
    if not match:
        raise ValueError(f'expected "host:port" or "[ipv6]:port", got {text!r}')
    host, port = match.group(1), int(match.group(2))
    if port > 65535:
        raise ValueError(f"port {port} is out of range")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.match(host):
            raise ValueError(f"{host!r} is neither an IP address nor a host name") from None
    return HostPort(host, port)


def _optional_host_port(value: Any) -> HostPort | None:
    return host_port(value) if _string(value) else None


def _list_of(item: Callable[[Any], Any], *, allow_empty: bool = False) -> Callable[[Any], tuple[Any, ...]]:
    def parse(value: Any) -> tuple[Any, ...]:
        if isinstance(value, str):  # from the environment: "a, b"
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ValueError(f"expected a list, got {value!r}")
        if not value and not allow_empty:
            raise ValueError("must not be empty")
        return tuple(item(v) for v in value)

    return parse


def _network(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(_string(value), strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a network: {exc}") from None


def _choice(*options: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = _string(value).lower()
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {value!r}")
        return text

    return parse


def _path(value: Any) -> Path:
    text = _string(value)
    if not text:
        raise ValueError("must not be empty")
    return Path(text).expanduser()


def _optional_path(value: Any) -> Path | None:
    return _path(value) if _string(value) else None


def _ca_file(value: Any) -> Path | None:
    """A PEM file of CA certificates ("": none), loaded now so that a bad one stops the load."""
    path = _optional_path(value)
    if path is not None:
        try:
            ssl.create_default_context(cafile=path)
        except OSError as exc:  # ssl.SSLError included: no PEM certificate in it
            raise ValueError(f"cannot load {path}: {exc.strerror or exc}") from None
    return path


# The parsers whose values are paths: relative ones in the file are relative to it.
PATHS: frozenset[Callable[[Any], Any]] = frozenset({_path, _optional_path, _ca_file})


def _tenant(value: Any) -> str:
    try:
        return tenants.check_name(_string(value))
    except errors.MtadError as exc:
        raise ValueError(str(exc)) from None


def _node_id(value: Any) -> str:
    text = _string(value) or socket.gethostname()
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", text):
        raise ValueError(f"{text!r} is not a valid node id (letters, digits, '.', '_', '-')")
    return text


def retry_schedule(value: Any) -> outcomes.RetrySchedule:
    """ "5m, 10m, 30m, 1h, 2h, 4h" (the last repeats); "2h*3" is 2h three times."""
    text = _string(value)
    delays: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        item, star, times = part.partition("*")
        if star and not (times.strip().isdigit() and int(times) >= 1):
            raise ValueError(f"expected a repeat count after '*' in {part!r}")
        seconds = _positive_duration(item.strip())
        delays.extend([seconds] * (int(times) if star else 1))
    if not delays:
        raise ValueError("expected at least one delay")
    return outcomes.RetrySchedule(tuple(delays))


def _canonicalization(value: Any) -> str:
    from mtad.signing import dkim

    return _choice(*dkim.CANONICALIZATIONS)(value)


def _optional_duration(value: Any) -> float | None:
    return None if value == "" else _positive_duration(value)


def _optional_ip(value: Any) -> str | None:
    text = _string(value)
    if not text:
        return None
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address") from None


# section -> key -> (parser, default). The defaults are the ones conf/mtad.toml documents.
SCHEMA: Mapping[str, Mapping[str, tuple[Callable[[Any], Any], Any]]] = {
    "database": {
        "dsn": (_optional_string, ""),
        "data_dir": (_path, ""),  # "": default_data_dir(the file)
        "pool_size": (_integer(2, 500), 10),
        "wait": (_positive_duration, "30s"),
    },
    "submission": {
        "listen": (_list_of(host_port), ["127.0.0.1:2525"]),
        "hostname": (_hostname, ""),
        "max_message_size": (size, "25MiB"),
        "max_recipients": (_integer(1, 100_000), 100),
        "trusted_networks": (_list_of(_network, allow_empty=True), ["127.0.0.0/8", "::1/128"]),
        "require_auth": (_boolean, False),
        "default_tenant": (_tenant, "default"),
        "idle_timeout": (_positive_duration, "5m"),
        "auth_max_failures": (_integer(1, 1000), 5),
        "auth_failure_window": (_positive_duration, "10m"),
        "max_connections_per_client": (_integer(1, 1_000_000), 100),
        "max_connections": (_integer(1, 1_000_000), 10_000),
        "shutdown_timeout": (duration, "30s"),
        "check_recipient_domains": (_boolean, True),
        "processes": (_processes, "auto"),
    },
    "spool": {
        "commit_window": (duration, "0s"),
        "commit_max_batch": (_integer(1, 10_000), 200),
        "commit_max_batch_bytes": (size, "1MiB"),
        "commit_timeout": (_positive_duration, "15s"),
        "idempotency_window": (_positive_duration, "24h"),
    },
    "tls": {
        "cert": (_optional_path, ""),
        "key": (_optional_path, ""),
        "outbound": (_choice("opportunistic", "required", "dane"), "opportunistic"),
        "ca_file": (_ca_file, ""),
        "mta_sts": (_boolean, True),
        "mta_sts_port": (_integer(1, 65535), 443),
        "mta_sts_timeout": (_positive_duration, "10s"),
        "reports": (_boolean, True),
        "report_organization": (_string, ""),
        "report_from": (_string, ""),
        "report_contact": (_string, ""),
    },
    "http": {
        "listen": (_optional_host_port, "127.0.0.1:9108"),
    },
    "admin": {  # the admin HTTP API; off without a token
        "listen": (host_port, "127.0.0.1:9110"),
        "token_file": (_optional_path, ""),
    },
    "accounts": {
        "key_file": (_optional_path, ""),
        "key_env": (_optional_string, ""),
        "cooldown": (_positive_duration, "60m"),
        "gmail_cooldown": (_positive_duration, "4h"),
        "hand_back_after": (_positive_duration, "1m"),
        "breaker_failures": (_integer(1, 10_000), 5),
        "breaker_window": (_positive_duration, "30m"),
        "breaker_min_successes": (_integer(0, 1_000_000), 10),
        "trip_duration": (_positive_duration, "30m"),
        "trips_to_disconnect": (_integer(1, 100), 2),
    },
    "dkim": {
        "overlap": (_positive_duration, "7d"),
        "rotate_every": (_optional_duration, ""),
        "check_interval": (_positive_duration, "1m"),
        "canonicalization": (_canonicalization, "relaxed/relaxed"),
        "processes": (_dkim_processes, "auto"),
    },
    "log": {
        "format": (_choice("json", "console"), "json"),
        "level": (_choice("debug", "info", "warning", "error"), "info"),
    },
    "node": {
        "id": (_node_id, ""),
        "heartbeat_interval": (_positive_duration, "10s"),
    },
    "dns": {
        "nameservers": (_list_of(host_port, allow_empty=True), []),
        "timeout": (_positive_duration, "5s"),
    },
    "delivery": {
        "enabled": (_boolean, True),
        "port": (_integer(1, 65535), 25),
        "source_address": (_optional_ip, ""),
        "ehlo_hostname": (_string, ""),
        "providers": (_optional_path, ""),  # "": the table shipped with mtad (shipped_table())
        "replies": (_optional_path, ""),
        "max_messages_per_session": (_integer(1, 100_000), 100),
        "max_sessions_per_host": (_integer(1, 10_000), 20),
        "max_recipients_per_transaction": (_integer(1, 1000), 50),
        "idle_timeout": (_positive_duration, "30s"),
        "connect_timeout": (_positive_duration, "30s"),
        "command_timeout": (_positive_duration, "5m"),
        "retry": (retry_schedule, "5m, 10m, 30m, 1h, 2h, 4h"),
        "max_age": (_positive_duration, "5d"),
        "max_failures": (_integer(1, 1000), 5),
        "lease_duration": (_positive_duration, "5m"),
        "lease_batch": (_integer(1, 100_000), 500),
        "max_held": (_integer(1, 10_000_000), 20_000),
        "body_cache": (size, "64MiB"),
        "poll_interval": (_positive_duration, "5s"),
        "shutdown_timeout": (duration, "30s"),
        "checkpoint_interval": (_positive_duration, "5s"),
        "default_pool": (_optional_string, ""),
        "probation_pool": (_optional_string, ""),  # "": tenants on probation send as the others do
    },
    "retention": {
        "enabled": (_boolean, True),
        "messages": (_positive_duration, "7d"),
        "events": (_positive_duration, "30d"),
        "interval": (_positive_duration, "1m"),
        "batch": (_integer(10, 100_000), 500),
        "pause": (duration, "0s"),
        "reindex": (_boolean, True),
    },
    "suppression": {
        "bounce_expiry": (_optional_duration, ""),  # "": a hard or soft bounce suppresses until removed
        "soft_after": (_integer(0, 1000), 3),  # soft bounces within soft_window that suppress (0: never)
        "soft_window": (_positive_duration, "30d"),
    },
    "reputation": {  # the windows of outcomes, the auto-pause and probation ([tenants] sets the limits)
        "enabled": (_boolean, True),  # false: nothing is counted, no tenant is paused or graduates by itself
        "publish": (_positive_duration, "30s"),  # how often the windows' metrics are updated
    },
    "reports": {  # the non-delivery reports to envelope senders ([tenants."T"] dsn turns them off)
        "delayed_after": (_optional_duration, ""),  # "": no notice of mail still being retried
    },
    "bounces": {
        "domain": (_optional_domain, ""),  # "": MX mail keeps its sender (no VERP)
        "key_file": (_optional_path, ""),
    },
    "inbound": {
        "listen": (_list_of(host_port, allow_empty=True), []),  # []: no inbound listener on this node
        "complaints": (_optional_address, ""),
        "max_message_size": (size, "10MiB"),
        "max_per_minute": (_integer(1, 1_000_000), 600),
    },
    "inbox": {  # the sending mailboxes' inboxes, read over IMAP
        "enabled": (_boolean, True),  # false: this node reads none (another node of the cluster does)
        "poll": (_positive_duration, "60s"),
        "idle": (_positive_duration, "10m"),
        "lease": (_positive_duration, "60s"),
        "timeout": (_positive_duration, "60s"),
        "max_message_size": (size, "1MiB"),
        "mark_seen": (_boolean, False),
    },
    "webhooks": {  # the tenants' endpoints: `mtad webhooks add`
        "enabled": (_boolean, True),  # false: this node sends no webhook request (another node does)
        "timeout": (_positive_duration, "10s"),
        "max_response": (size, "64KiB"),
        "retry_base": (_positive_duration, "5s"),
        "retry_max": (_positive_duration, "1h"),
        "max_age": (_positive_duration, "24h"),
        "per_endpoint": (_integer(1, 1000), 4),
        "in_flight": (_integer(1, 10_000), 64),
        "first_wait": (duration, "2s"),  # 0: every request goes through the outbox
        "poll": (_positive_duration, "1s"),
        "allow_networks": (_list_of(_network, allow_empty=True), []),
    },
    "unsubscribe": {
        "listen": (_list_of(host_port, allow_empty=True), []),
        "url": (_https_url, ""),
        "key_file": (_optional_path, ""),
    },
}
# Every MTAD_<SECTION>_<KEY> variable that overrides a key of the file.
ENV_NAMES = frozenset(f"MTAD_{section}_{key}".upper() for section, keys in SCHEMA.items() for key in keys)
# MTAD_ variables that are not configuration, left alone (any other is a misspelt key, an
# error); and the variable [accounts] key_env names, whatever its name.
NOT_CONFIG = {
    "MTAD_TEST_DSN": "the PostgreSQL server the test suite uses instead of its embedded one (tests/conftest.py)",
}
# Sections whose keys are names the operator chooses: [routes."example.org"] relay = "host:port",
# [pools.bulk] addresses = [...], [tenants."shop"] priority = 10, [account_pools.outreach] rewrite_from = true.
DYNAMIC_SECTIONS = ("routes", "pools", "tenants", "account_pools")


def shipped_table(name: str) -> Path:
    """The reference table `name` ("providers", "replies") shipped with mtad, the
    default when the configuration names none."""
    return Path(str(resources.files("mtad").joinpath("tables", f"{name}.toml")))


def default_data_dir(path: Path | None) -> Path:
    """The embedded PostgreSQL's data directory when [database] data_dir is not set,
    found beside the configuration file: for a file in an etc/NAME/ directory,
    var/lib/NAME/pgdata beside that etc (/etc/mtad/mtad.toml: /var/lib/mtad/pgdata,
    the systemd unit's StateDirectory); for any other file, var/pgdata beside the
    file's directory (conf/mtad.toml in a source tree: ./var/pgdata). Without a file,
    ./var/pgdata in the working directory."""
    if path is None:
        return Path("var") / "pgdata"
    home = path.expanduser().resolve().parent
    if home.name == "etc":
        return home.parent / "var" / "lib" / "mtad" / "pgdata"
    if home.parent.name == "etc":
        return home.parent.parent / "var" / "lib" / home.name / "pgdata"
    return home.parent / "var" / "pgdata"


def default_path() -> Path | None:
    """conf/mtad.toml when present, else /etc/mtad/mtad.toml when present."""
    for candidate in DEFAULT_PATHS:
        if candidate.exists():
            return candidate
    return None


def load(path: Path | None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read, override from the environment, parse and check; ConfigError lists every problem."""
    values, document, origin, problems = _read(path, environ, SCHEMA)
    extras = _load_delivery_data(values, document.get("routes", {}), document.get("pools", {}),
                                 document.get("account_pools", {}), problems)  # fmt: skip
    extras["tenant_weights"] = {}
    extras["tenant_dkim_domains"] = {}
    extras["tenant_guards"] = {}
    extras["tenants_shared"] = _tenants_shared(document.get("tenants", {}), problems)
    extras["tenant_defaults"] = _load_tenant_defaults(
        document.get("tenants", {}),
        extras["pools"],
        extras["account_pools"],
        extras["tenant_weights"],
        problems,
        extras["tenant_dkim_domains"],
        extras["tenants_shared"],
        extras["tenant_guards"],
    )
    if extras["account_pools"] and not _accounts(values).key_file and not values["accounts"].get("key_env"):
        problems.append("[accounts] key_file or key_env: [account_pools] are configured, and their accounts' "
                        "secrets need a key to open; make one with `mtad accounts key > FILE` (mode 0600), "
                        "then set key_file = FILE")  # fmt: skip
    if problems:
        raise errors.ConfigError(problems)
    settings = _build(values, extras, path)
    _check(settings, origin, problems)
    if problems:
        raise errors.ConfigError(problems)
    return settings


def names(settings: Settings) -> admin_names.Configured:
    """The names the configuration makes, as the command line and the admin API check
    an operator's: source pools and their addresses, account pools, provider groups."""
    from mtad.admin import names as admin_names

    out = settings.delivery
    groups = {p.name for p in out.providers.known} | {f"relay:{relay}" for relay in out.routes.values()}
    return admin_names.Configured(
        pools={name: pool.addresses for name, pool in out.pools.items()},
        account_pools=frozenset(out.relay.pools),
        groups=frozenset(groups | {f"accounts:{pool}" for pool in out.relay.pools}),
        default_source=out.sessions.source_address,
    )


def load_basics(path: Path | None, environ: Mapping[str, str] | None = None) -> Basics:
    """What a command-line tool needs (the database, the node, the account key, DNS),
    parsed and checked alone: it imports none of the delivery or submission code."""
    values, document, _, problems = _read(path, environ, BASIC_SECTIONS, also=(("submission", "default_tenant"),))
    limits = _tenant_limits(document.get("tenants", {}), problems)
    if problems:
        raise errors.ConfigError(problems)
    dns = values["dns"]
    return Basics(
        database=DatabaseSettings(**values["database"]),
        node=NodeSettings(**values["node"]),
        accounts=_accounts(values),
        dns=DnsSettings(dns["nameservers"], dns["timeout"]),
        tenants=limits,
        source=path,
        default_tenant=values["submission"]["default_tenant"],
    )


def _tenant_limits(table: Any, problems: list[str]) -> TenantLimits:
    """The quotas and limits of [tenants] and of each [tenants."NAME"], alone."""
    shared = _tenants_shared(table, problems)
    found = TenantLimits(shared["quota"], shared["guard"], shared["probation_default"], {}, {})
    for name, keys in table.items() if isinstance(table, dict) else ():
        if isinstance(keys, dict):
            found.own_quotas[name], found.own_guards[name] = _limits(keys, f'[tenants."{name}"]', found.quota,
                                                             found.guard, problems)  # fmt: skip
    return found


def _accounts(values: dict[str, dict[str, Any]]) -> AccountsSettings:
    """The key named, else on the embedded database mtad's own, in its state directory
    (the data directory's parent); with a DSN and none named, no key."""
    keys, base = values["accounts"], values["database"]
    if keys.get("key_file") or keys.get("key_env") or base.get("dsn") or "data_dir" not in base:
        return AccountsSettings(keys.get("key_file"), keys.get("key_env"))
    return AccountsSettings(base["data_dir"].parent / OWN_KEY, None, make=True)


def _bounces(values: dict[str, dict[str, Any]]) -> BouncesSettings:
    """The bounce key named, else on the embedded database mtad's own (as _accounts)."""
    bounces, base = values["bounces"], values["database"]
    if bounces["key_file"] or base.get("dsn") or bounces["domain"] is None:
        return BouncesSettings(bounces["domain"], bounces["key_file"])
    return BouncesSettings(bounces["domain"], base["data_dir"].parent / OWN_BOUNCE_KEY, make=True)


def _unsubscribe(values: dict[str, dict[str, Any]]) -> UnsubscribeSettings:
    """The token key named, else on the embedded database mtad's own (as _accounts)."""
    found, base = values["unsubscribe"], values["database"]
    listen, url = tuple(found["listen"]), found["url"]
    if found["key_file"] or base.get("dsn") or (url is None and not listen):
        return UnsubscribeSettings(listen, url, found["key_file"])
    return UnsubscribeSettings(listen, url, base["data_dir"].parent / OWN_UNSUBSCRIBE_KEY, make=True)


def _read(
    path: Path | None,
    environ: Mapping[str, str] | None,
    sections: Iterable[str],
    also: Iterable[tuple[str, str]] = (),
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[tuple[str, str], str], list[str]]:
    """The file and the environment merged (every unknown section or key a problem), and
    the keys of `sections` parsed, and the (section, key)s of `also`: (values, the
    document, where each override came from, problems)."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    document: dict[str, Any] = {}
    home = None  # what a relative path in the file (or a default) is relative to
    if path is not None:
        document = datafiles.read_toml(path)
        home = path.expanduser().resolve().parent
        _anchor_account_pools(document.get("account_pools"), home)
    raw, origin = _merge(document, env, problems)
    values: dict[str, dict[str, Any]] = {}
    wanted = [(section, key) for section in sections for key in SCHEMA[section]] + list(also)
    for section, key in wanted:
        values.setdefault(section, {})
        parse, default = SCHEMA[section][key]
        value = raw.get(section, {}).get(key, default)
        if (section, key) == ("database", "data_dir") and key not in raw.get(section, {}):
            value = str(default_data_dir(path))
        elif parse in PATHS and (section, key) not in origin:  # from the file, or the default
            value = _anchored(value, home)
        try:
            values[section][key] = parse(value)
        except ValueError as exc:
            problems.append(f"{origin.get((section, key), f'[{section}] {key}')}: {exc}")
    return values, document, origin, problems


def _anchored(value: Any, home: Path | None) -> Any:
    """A relative path (a non-empty string) made relative to `home`; anything else as it is."""
    if home is None or not isinstance(value, str) or not value:
        return value
    path = Path(value).expanduser()
    return value if path.is_absolute() else os.path.normpath(home / path)


def _anchor_account_pools(table: Any, home: Path) -> None:
    """[account_pools.NAME] ca_file, relative to the file too."""
    if isinstance(table, dict):
        for keys in table.values():
            if isinstance(keys, dict) and "ca_file" in keys:
                keys["ca_file"] = _anchored(keys["ca_file"], home)


def _merge(
    document: dict[str, Any], env: Mapping[str, str], problems: list[str]
) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], str]]:
    raw: dict[str, dict[str, Any]] = {}
    origin: dict[tuple[str, str], str] = {}
    for section, table in document.items():
        if section in DYNAMIC_SECTIONS:
            continue
        if section not in SCHEMA:
            problems.append(f"[{section}]: unknown section{_did_you_mean(section, SCHEMA)}")
            continue
        if not isinstance(table, dict):
            problems.append(f"{section}: expected a [{section}] table")
            continue
        for key, value in table.items():
            if key not in SCHEMA[section]:
                problems.append(f"[{section}] {key}: unknown key{_did_you_mean(key, SCHEMA[section])}")
                continue
            raw.setdefault(section, {})[key] = value
    accounts = document.get("accounts")
    keys_in = {str(accounts.get("key_env")) if isinstance(accounts, dict) else "",
               str(_env_value(env.get("MTAD_ACCOUNTS_KEY_ENV", "")))}  # fmt: skip
    for name, text in env.items():
        if not name.startswith("MTAD_") or name in NOT_CONFIG or name in keys_in:
            continue
        rest = name[5:].lower()
        env_section = next((s for s in SCHEMA if rest.startswith(s + "_")), None)
        if env_section is None:
            hint = _did_you_mean(name, ENV_NAMES)
            problems.append(f"{name}: not a configuration variable (MTAD_<SECTION>_<KEY>){hint}")
            continue
        key = rest[len(env_section) + 1 :]
        if key not in SCHEMA[env_section]:
            problems.append(f"{name}: unknown key {key!r} in [{env_section}]{_did_you_mean(key, SCHEMA[env_section])}")
            continue
        raw.setdefault(env_section, {})[key] = _env_value(text)
        origin[(env_section, key)] = name
    return raw, origin


def _env_value(text: str) -> Any:
    """A TOML value if the text is one (true, 10, ["a"], "x"), else the text itself."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _did_you_mean(word: str, options: Iterable[str]) -> str:
    return values.did_you_mean(word, options)


def _named_tables(
    table: dict[str, Any],
    where: str,
    check: Callable[[str], object],
    example: str,
    known: Mapping[str, Any],
    problems: list[str],
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(name, where, keys) of each table of a section of named tables (`where` formats
    the name), past the checks they share: the name (`check` raises ValueError or an
    MtadError), a table, and each unknown key named (the table is still given)."""
    for name, keys in table.items():
        here = where.format(name)
        try:
            check(name)
        except (ValueError, errors.MtadError) as exc:
            problems.append(f"{here}: {exc}")
            continue
        if not isinstance(keys, dict):
            problems.append(f"{here}: expected a table such as {example}")
            continue
        for key in keys:
            if key not in known:
                problems.append(f"{here} {key}: unknown key{_did_you_mean(key, known)}")
        yield name, here, keys


def _load_delivery_data(
    values: dict[str, dict[str, Any]], routes: Any, pools: Any, account_pools: Any, problems: list[str]
) -> dict[str, Any]:
    """The files [delivery] names (providers, reply rules), the [pools], [account_pools]
    and [routes] tables."""
    from mtad.base import envelope
    from mtad.deliver import egress
    from mtad.outbound import routing

    extras: dict[str, Any] = {
        "routes": {},
        "route_pools": {},
        "route_account_pools": {},
        "pools": egress.parse_pools(pools, problems),
        "account_pools": parse_account_pools(account_pools, problems),
    }
    for key in ("default_pool", "probation_pool"):
        named = values["delivery"].get(key)
        if named and named not in extras["pools"]:
            problems.append(f"[delivery] {key}: no pool named {named!r}{_pools_known(extras['pools'])}")
    for key, load_file in (("providers", routing.load_providers), ("replies", outcomes.load_rules)):
        if key not in values["delivery"]:
            continue  # a bad value, already reported
        path = values["delivery"][key] or shipped_table(key)
        try:
            extras[key] = load_file(path)
        except errors.ConfigError as exc:
            problems.extend(f"[delivery] {key}: {problem}" for problem in exc.problems)
    if not isinstance(routes, dict):
        problems.append('[routes]: expected tables such as [routes."example.org"]')
        return extras
    for domain, table in routes.items():
        where = f'[routes."{domain}"]'
        try:
            ascii_domain = envelope.normalise_domain(domain)
        except errors.AddressError as exc:
            problems.append(f"{where}: {exc.text}")
            continue
        if not isinstance(table, dict) or not table or not set(table) <= {"relay", "pool", "account_pool"}:
            problems.append(f'{where}: expected relay = "host:port", pool = "NAME", account_pool = "NAME"')
            continue
        if "relay" in table:
            try:
                extras["routes"][ascii_domain] = host_port(table["relay"])
            except ValueError as exc:
                problems.append(f"{where} relay: {exc}")
        for key, section, chosen in (("pool", "pools", "route_pools"),
                                     ("account_pool", "account_pools", "route_account_pools")):  # fmt: skip
            if key in table:
                named = _pool_name(table[key], extras[section], f"{where} {key}", section, problems)
                if named:
                    extras[chosen][ascii_domain] = named
    return extras


def _pools_known(pools: Mapping[str, Any], section: str = "pools") -> str:
    return f" (configured: {', '.join(sorted(pools))})" if pools else f" (no [{section}] are configured)"


def _pool_name(value: Any, known: Mapping[str, Any], at: str, section: str, problems: list[str]) -> str | None:
    """A pool name given at `at` (a route's, a tenant's), one of the [section] tables
    ("pools" or "account_pools"); "" is none. None, and a problem, when it is not."""
    kind = "account pool" if section == "account_pools" else "pool"
    if not isinstance(value, str):
        problems.append(f"{at}: expected {'an' if section == 'account_pools' else 'a'} {kind} name, got {value!r}")
        return None
    if value and value not in known:
        problems.append(f"{at}: no {kind} named {value!r}{_pools_known(known, section)}")
        return None
    return value or None


_ACCOUNT_POOL_KEYS = {
    "rewrite_from": "true or false",
    "daily_cap": "a whole number",
    "min_gap": "a duration",
    "jitter": "[low, high] durations",
    "per_second": "a whole number",
    "per_minute": "a whole number",
    "per_hour": "a whole number",
    "time_zone": "an IANA time zone",
    "ca_file": "a PEM file of CA certificates",
    "health_floor": "a whole number from 0 to 100",
    "sent_check_after": "a duration from 1s to 1d",
    "on_unknown": '"hold" or "resend"',
}


def _sent_check_after(value: Any) -> float:
    """How long a send whose outcome is unknown is looked for in its Sent folder: a
    provider files its sent mail within minutes, and past a day the mail is stale."""
    seconds = _positive_duration(value)
    if not 1 <= seconds <= 86_400:
        raise ValueError(f"expected a duration from 1s to 1d, got {value!r}")
    return seconds


def parse_account_pools(table: Any, problems: list[str]) -> dict[str, relay.PoolSettings]:
    """The [account_pools.NAME] tables: whether the pool rewrites From, the limits
    `mtad accounts add` gives its accounts when it is not told, the CA file its
    smarthosts are verified against, the health below which an account rests, and
    what becomes of a send whose outcome is unknown (all optional)."""
    from mtad.mailboxes import accounts, relay

    if not isinstance(table, dict):
        problems.append("[account_pools]: expected tables such as [account_pools.outreach]")
        return {}
    found: dict[str, relay.PoolSettings] = {}
    cap = _integer(1, 10_000_000)

    def check(name: str) -> None:
        if not accounts.POOL.match(name):
            raise ValueError("a pool name is 1-64 letters, digits, '.', '_' and '-'")

    example = "rewrite_from = true, daily_cap = 500"
    for name, where, keys in _named_tables(table, "[account_pools.{}]", check, example, _ACCOUNT_POOL_KEYS, problems):
        before = len(problems)
        parsed: dict[str, Any] = {}
        for key, parse in (("rewrite_from", _boolean), ("daily_cap", cap), ("min_gap", duration),
                           ("per_second", cap), ("per_minute", cap), ("per_hour", cap),
                           ("ca_file", _ca_file), ("health_floor", _integer(0, 100)),
                           ("sent_check_after", _sent_check_after),
                           ("on_unknown", _choice(*relay.ON_UNKNOWN))):  # fmt: skip
            if key in keys:
                try:
                    parsed[key] = parse(keys[key])
                except ValueError as exc:
                    problems.append(f"{where} {key}: {exc}")
        jitter = None
        if "jitter" in keys:
            try:
                low, high = (duration(v) for v in keys["jitter"]) if isinstance(keys["jitter"], list) else (-1, -1)
                if not 0 <= low <= high:
                    raise ValueError(f'expected [low, high] such as ["25s", "45s"], got {keys["jitter"]!r}')
                jitter = (low, high)
            except ValueError as exc:
                problems.append(f"{where} jitter: {exc}")
        zone = keys.get("time_zone", "UTC")
        limits = accounts.Limits(parsed.get("daily_cap"), parsed.get("min_gap"), jitter, parsed.get("per_second"),
                                 parsed.get("per_minute"), parsed.get("per_hour"))  # fmt: skip
        sample = accounts.Account(name="check", address="a@b", pool=name, host="h", port=1, login="l",
                                  time_zone=str(zone), limits=limits)  # fmt: skip
        problems.extend(f"{where}: {p.split(': ', 1)[1]}" for p in accounts.problems(sample))
        if len(problems) == before:
            found[name] = relay.PoolSettings(parsed.get("rewrite_from", False), limits, str(zone),
                                             parsed.get("ca_file"),
                                             parsed.get("health_floor", relay.HEALTH_FLOOR),
                                             parsed.get("sent_check_after", relay.SENT_CHECK_AFTER),
                                             parsed.get("on_unknown", "hold"))  # fmt: skip
    return found


_TENANT_KEYS = {
    "dkim_domain": "a domain with DKIM keys",
    "priority": "a whole number",
    "pool": "a pool name",
    "account_pool": "an account pool name",
    "weight": "a whole number",
    "suppressed": '"cancel" or "refuse"',
    "list_unsubscribe": "true or false",
    "dsn": "true or false",
    "max_per_hour": "a whole number of messages",
    "max_per_day": "a whole number of messages",
    "max_queued_bytes": 'a size such as "2GiB"',
    "max_complaint_rate": "a fraction such as 0.003",
    "max_bounce_rate": "a fraction such as 0.05",
    "reputation_min_volume": "a whole number of deliveries",
    "graduate_after": "a whole number of deliveries",
}
# Keys of [tenants] itself: the limits of every tenant without its own, and probation_default.
_TENANTS_SHARED = frozenset(
    {"probation_default", *(k for k in _TENANT_KEYS if k.startswith(("max_", "reputation_", "graduate_")))}
)


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError(f"expected a fraction above 0 and at most 1, got {value!r}")
    return float(value)


# key -> (parser, where it goes: "quota" or "guard", the field)
_LIMITS: Mapping[str, tuple[Callable[[Any], Any], str, str]] = {
    "max_per_hour": (_integer(1, 1_000_000_000), "quota", "max_per_hour"),
    "max_per_day": (_integer(1, 1_000_000_000), "quota", "max_per_day"),
    "max_queued_bytes": (size, "quota", "max_queued_bytes"),
    "max_complaint_rate": (_fraction, "guard", "max_complaint_rate"),
    "max_bounce_rate": (_fraction, "guard", "max_bounce_rate"),
    "reputation_min_volume": (_integer(1, 1_000_000_000), "guard", "min_volume"),
    "graduate_after": (_integer(1, 1_000_000_000), "guard", "graduate_after"),
}


def _limits(keys: Mapping[str, Any], where: str, quota: Any, guard: Any, problems: list[str]) -> tuple[Any, Any]:
    """A quota and a guard: those given, with what `keys` sets in place of theirs."""
    import dataclasses

    changes: dict[str, dict[str, Any]] = {"quota": {}, "guard": {}}
    for key, (parse, part, name) in _LIMITS.items():
        if key in keys:
            try:
                changes[part][name] = parse(keys[key])
            except ValueError as exc:
                problems.append(f"{where} {key}: {exc}")
    return dataclasses.replace(quota, **changes["quota"]), dataclasses.replace(guard, **changes["guard"])


def _tenants_shared(table: Any, problems: list[str]) -> dict[str, Any]:
    """[tenants]' own keys, parsed: "quota", "guard", "probation_default"."""
    from mtad.feedback import reputation
    from mtad.spool import quotas

    keys = {k: v for k, v in table.items() if k in _TENANTS_SHARED and not isinstance(v, dict)} if isinstance(
        table, dict) else {}  # fmt: skip
    quota, guard = _limits(keys, "[tenants]", quotas.NONE, reputation.Guard(), problems)
    probation = keys.get("probation_default", False)
    if not isinstance(probation, bool):
        problems.append(f"[tenants] probation_default: expected true or false, got {probation!r}")
    return {"quota": quota, "guard": guard, "probation_default": probation is True}


def _load_tenant_defaults(
    table: Any,
    pools: Mapping[str, Any],
    account_pools: Mapping[str, Any],
    weights: dict[str, int],
    problems: list[str],
    dkim_domains: dict[str, str] | None = None,
    shared: Mapping[str, Any] | None = None,
    guards: dict[str, Any] | None = None,
) -> dict[str, submission.TenantDefaults]:
    """The [tenants."NAME"] tables: the priority and source IP pool of a tenant's
    messages when they name none (X-Mtad-Priority, Priority, X-Mtad-Pool), and the
    tenant's weight in delivery's ready queues (put in `weights`)."""
    from mtad import submission
    from mtad.signing import dkim

    if not isinstance(table, dict):
        problems.append('[tenants]: expected tables such as [tenants."shop"]')
        return {}
    shared = shared if shared is not None else _tenants_shared(table, problems)
    table = {k: v for k, v in table.items() if not (k in _TENANTS_SHARED and not isinstance(v, dict))}
    priority = _integer(submission.MIN_PRIORITY, submission.MAX_PRIORITY)
    defaults: dict[str, submission.TenantDefaults] = {}
    example = 'priority = 10, pool = "bulk"'
    for name, where, keys in _named_tables(table, '[tenants."{}"]', tenants.check_name, example, _TENANT_KEYS,
                                           problems):  # fmt: skip
        found = len(problems)
        chosen = 0
        try:
            chosen = priority(keys.get("priority", 0))
        except ValueError as exc:
            problems.append(f"{where} priority: {exc}")
        try:
            weights[name] = _integer(1, 100)(keys.get("weight", 1))
        except ValueError as exc:
            problems.append(f"{where} weight: {exc}")
        pool = _pool_name(keys.get("pool", ""), pools, f"{where} pool", "pools", problems)
        account_pool = _pool_name(keys.get("account_pool", ""), account_pools, f"{where} account_pool",
                                  "account_pools", problems)  # fmt: skip
        signing = keys.get("dkim_domain", "")
        if not isinstance(signing, str) or (signing and not dkim.DOMAIN.match(signing.lower().rstrip("."))):
            problems.append(f"{where} dkim_domain: expected a domain name, got {signing!r}")
        elif signing and dkim_domains is not None:
            dkim_domains[name] = signing.lower().rstrip(".")
        refusing = keys.get("suppressed", "cancel")
        if refusing not in ("cancel", "refuse"):
            problems.append(f'{where} suppressed: expected "cancel" (the delivery is cancelled) or "refuse" '
                            f"(550 5.7.1 at RCPT), got {refusing!r}")  # fmt: skip
        leaving = keys.get("list_unsubscribe", False)
        if not isinstance(leaving, bool):
            problems.append(f"{where} list_unsubscribe: expected true or false, got {leaving!r}")
        reporting = keys.get("dsn", True)
        if not isinstance(reporting, bool):
            problems.append(f"{where} dsn: expected true or false, got {reporting!r}")
        quota, guard = _limits(keys, where, shared["quota"], shared["guard"], problems)
        if guards is not None and any(k in keys for k, (_, part, _) in _LIMITS.items() if part == "guard"):
            guards[name] = guard
        if len(problems) == found:
            defaults[name] = submission.TenantDefaults(chosen, pool, account_pool, refusing == "refuse",
                                                       leaving is True, reporting is not False, quota)  # fmt: skip
    return defaults


def _build(values: dict[str, dict[str, Any]], extras: dict[str, Any], path: Path | None) -> Settings:
    from mtad import submission
    from mtad.deliver import settings as deliver_settings
    from mtad.feedback import inbound, inbox, reputation, suppression, webhook_sender
    from mtad.mailboxes import accounts, relay
    from mtad.outbound import policies, sessions, tlsrpt
    from mtad.signing import rotation
    from mtad.spool import retention

    sub = values["submission"]
    d = values["delivery"]
    a = values["accounts"]
    return Settings(
        database=DatabaseSettings(**values["database"]),
        submission=submission.Settings(
            listen=sub["listen"],
            hostname=sub["hostname"],
            max_message_size=sub["max_message_size"],
            max_recipients=sub["max_recipients"],
            trusted_networks=sub["trusted_networks"],
            require_auth=sub["require_auth"],
            default_tenant=sub["default_tenant"],
            idle_timeout=sub["idle_timeout"],
            auth_max_failures=sub["auth_max_failures"],
            auth_failure_window=sub["auth_failure_window"],
            max_connections_per_client=sub["max_connections_per_client"],
            max_connections=sub["max_connections"],
            shutdown_timeout=sub["shutdown_timeout"],
            check_recipient_domains=sub["check_recipient_domains"],
            processes=sub["processes"],
            tls_cert=values["tls"]["cert"],
            tls_key=values["tls"]["key"],
            pools=frozenset(extras["pools"]),
            account_pools=frozenset(extras["account_pools"]),
            tenant_defaults=extras["tenant_defaults"],
            default_quota=extras["tenants_shared"]["quota"],
        ),
        spool=SpoolSettings(**values["spool"]),
        http=HttpSettings(**values["http"]),
        admin=_admin(values["admin"]),
        log=LogSettings(**values["log"]),
        accounts=_accounts(values),
        dkim=rotation.Settings(
            overlap=values["dkim"]["overlap"],
            rotate_every=values["dkim"]["rotate_every"],
            check_interval=values["dkim"]["check_interval"],
        ),
        node=NodeSettings(**values["node"]),
        delivery=DeliverySettings(
            enabled=d["enabled"],
            engine=deliver_settings.Settings(
                node=values["node"]["id"],
                retry=d["retry"],
                max_age=d["max_age"],
                max_failures=d["max_failures"],
                max_recipients_per_transaction=d["max_recipients_per_transaction"],
                lease_duration=d["lease_duration"],
                lease_batch=d["lease_batch"],
                max_held=d["max_held"],
                body_cache=d["body_cache"],
                poll_interval=d["poll_interval"],
                shutdown_timeout=d["shutdown_timeout"],
                checkpoint_interval=d["checkpoint_interval"],
                node_timeout=3 * values["node"]["heartbeat_interval"],
                default_pool=d["default_pool"],
                probation_pool=d["probation_pool"],
                route_pools=extras["route_pools"],
                route_account_pools=extras["route_account_pools"],
                tenant_dkim_domains=extras["tenant_dkim_domains"],
                dkim_canonicalization=values["dkim"]["canonicalization"],
                tenant_weights=extras["tenant_weights"],
                bounce_suppression=values["suppression"]["bounce_expiry"],
                list_unsubscribe=frozenset(t for t, d in extras["tenant_defaults"].items() if d.list_unsubscribe),
            ),
            sessions=sessions.Settings(
                port=d["port"],
                ehlo_hostname=d["ehlo_hostname"] or sub["hostname"],
                source_address=d["source_address"],
                tls_required=values["tls"]["outbound"] == "required",
                connect_timeout=d["connect_timeout"],
                command_timeout=d["command_timeout"],
                max_messages=d["max_messages_per_session"],
                max_per_host=d["max_sessions_per_host"],
                idle_timeout=d["idle_timeout"],
            ),
            nameservers=values["dns"]["nameservers"],
            dns_timeout=values["dns"]["timeout"],
            providers=extras["providers"],
            rules=extras["replies"],
            routes=extras["routes"],
            pools=extras["pools"],
            relay=relay.Settings(
                pools=extras["account_pools"],
                cooldown=a["cooldown"],
                gmail_cooldown=a["gmail_cooldown"],
                hand_back_after=a["hand_back_after"],
                breaker=accounts.Breaker(
                    failures=a["breaker_failures"],
                    window=a["breaker_window"],
                    min_successes=a["breaker_min_successes"],
                    trip_for=a["trip_duration"],
                    trips_per_day=a["trips_to_disconnect"],
                ),
                poll=d["poll_interval"],
                ca_file=values["tls"]["ca_file"],
            ),
            tls=policies.Settings(
                mta_sts=values["tls"]["mta_sts"],
                dane=values["tls"]["outbound"] == "dane",
                https_port=values["tls"]["mta_sts_port"],
                fetch_timeout=values["tls"]["mta_sts_timeout"],
                ca_file=values["tls"]["ca_file"],
            ),
            tls_reports=tlsrpt.Settings(
                enabled=values["tls"]["reports"],
                organization=values["tls"]["report_organization"] or sub["hostname"],
                contact=values["tls"]["report_contact"],
                sender=values["tls"]["report_from"] or f"postmaster@{sub['hostname']}",
                tenant=sub["default_tenant"],
            ),
            dkim_processes=values["dkim"]["processes"],
        ),
        retention=retention.Settings(**values["retention"]),
        suppression=suppression.Settings(**values["suppression"]),
        bounces=_bounces(values),
        unsubscribe=_unsubscribe(values),
        inbound=inbound.Settings(
            listen=tuple(values["inbound"]["listen"]),
            bounce_domain=values["bounces"]["domain"],
            complaints=values["inbound"]["complaints"],
            max_message_size=values["inbound"]["max_message_size"],
            max_per_minute=values["inbound"]["max_per_minute"],
            hostname=sub["hostname"],
        ),
        inbox=inbox.Settings(**values["inbox"]),
        webhooks=webhook_sender.Settings(**values["webhooks"]),
        reputation=reputation.Settings(
            enabled=values["reputation"]["enabled"],
            default=extras["tenants_shared"]["guard"],
            tenants=extras["tenant_guards"],
            publish=values["reputation"]["publish"],
        ),
        delayed_after=values["reports"]["delayed_after"],
        source=path,
    )


MIN_TOKEN = 16  # characters of an admin token at least


def _admin(values: dict[str, Any]) -> AdminSettings:
    """[admin], with the token read from its file (checked by _check)."""
    path = values["token_file"]
    token = None
    if path is not None:
        try:
            token = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            token = None
    return AdminSettings(values["listen"], path, token)


def _check(settings: Settings, origin: dict[tuple[str, str], str], problems: list[str]) -> None:
    """Checks that span keys or touch the file system."""
    from mtad import submission

    leaving = settings.unsubscribe
    if (leaving.url is not None or leaving.listen) and leaving.key_file is None:
        problems.append("[unsubscribe] key_file: with a DSN, name the key of the unsubscribe links' tokens "
                        "(make one: mtad accounts key > FILE)")  # fmt: skip
    wanted = sorted(t for t, d in settings.submission.tenant_defaults.items() if d.list_unsubscribe)
    if wanted and leaving.url is None:
        problems.append(f"[unsubscribe] url: tenants {', '.join(wanted)} ask for list_unsubscribe; give the "
                        "public https URL of the one-click endpoint")  # fmt: skip
    bounces = settings.bounces
    if bounces.domain is not None and bounces.key_file is None:
        problems.append("[bounces] key_file: with a DSN, name the key of the VERP addresses' HMAC "
                        "(make one: mtad accounts key > FILE)")  # fmt: skip
    elif bounces.key_file is not None and not bounces.make and not bounces.key_file.is_file():
        problems.append(f"[bounces] key_file: no such file: {bounces.key_file}")
    sub = settings.submission
    cert, key = sub.tls_cert, sub.tls_key
    if (cert is None) != (key is None):
        problems.append("[tls] cert and key: set both or neither")
    elif cert is not None and key is not None:
        try:
            submission.tls_context(cert, key)
        except (OSError, ssl.SSLError) as exc:
            problems.append(f"[tls] cert/key: cannot load {cert} and {key}: {exc}")
    listen = [str(a) for a in sub.listen]
    if len(set(listen)) != len(listen):
        problems.append("[submission] listen: the same address is listed twice")
    admin = settings.admin
    if admin.token_file is not None and (admin.token is None or len(admin.token) < MIN_TOKEN):
        problems.append(f"[admin] token_file: {admin.token_file} must be a readable file holding the token, "
                        f"at least {MIN_TOKEN} characters (head -c 32 /dev/urandom | base64 > FILE)")  # fmt: skip
    http = settings.http.listen
    if http is not None and http.port != 0 and str(http) in listen:
        problems.append("[http] listen: the same address as a [submission] listen address")
    lease = settings.delivery.engine.lease_duration
    if lease < MIN_LEASE:
        problems.append(f"{origin.get(('delivery', 'lease_duration'), '[delivery] lease_duration')}: {lease:g}s is "
                        f"too short; at least {MIN_LEASE:g}s, so that a lease renewed every third of itself "
                        f"outlasts a renewal that waits {db.CONNECT_TIMEOUT:g}s for the database")  # fmt: skip
    if settings.spool.commit_window > 1.0:
        problems.append("[spool] commit_window: longer than 1s would hold every 250 back for that long")
