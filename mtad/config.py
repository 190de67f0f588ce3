"""Configuration: one TOML file, overridable by MTAD_<SECTION>_<KEY> variables (any
other MTAD_ variable but those of NOT_CONFIG is refused, as an unknown key is).

Each package declares the sections it owns (mtad.base.settings: key, parser,
default, help; SECTIONS lists them); this module reads the file and the
environment, parses every section from its declaration, reads the tables of
named settings ([routes], [pools], [account_pools], [tenants]) and checks what
spans sections. Every problem is collected and raised at once as ConfigError; a
bad value never falls back to a default. A relative path in the file (or a
relative default) is relative to the file's directory, never the working
directory; an unset [database] data_dir is found beside the file too
(`default_data_dir`), so that the daemon and the tools given one file reach one
spool.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mtad import db
from mtad.admin import settings as admin_settings
from mtad.base import datafiles, errors, observing, values
from mtad.base import settings as declared
from mtad.db import settings as db_settings
from mtad.deliver import settings as deliver_settings
from mtad.feedback import settings as feedback_settings
from mtad.mailboxes import settings as mailboxes_settings
from mtad.outbound import settings as outbound_settings
from mtad.signing import settings as signing_settings
from mtad.spool import settings as spool_settings
from mtad.submission import settings as submission_settings
from mtad.submission import tenant_tables

if TYPE_CHECKING:  # imported where they are used: `mtad queue ls` needs none of them
    from mtad.admin import names as admin_names
    from mtad.deliver import configured
    from mtad.feedback import inbox, suppression
    from mtad.spool import retention

Limits = tuple[spool_settings.Quota, feedback_settings.Guard]  # a tenant's quotas and reputation limits

DEFAULT_PATHS = (Path("conf/mtad.toml"), Path("/etc/mtad/mtad.toml"))
# A held delivery's lease is renewed every third of it, on the wire too, so it covers an
# attempt of any length; what it must outlast is one renewal that waits for the database.
MIN_LEASE = 1.5 * db.CONNECT_TIMEOUT
OWN_KEY = "accounts.key"  # the key mtad makes for itself on the embedded default, beside the data directory
OWN_BOUNCE_KEY = "bounces.key"  # the same for the VERP addresses' HMAC
OWN_UNSUBSCRIBE_KEY = "unsubscribe.key"  # the same for the unsubscribe links' tokens
MIN_TOKEN = 16  # characters of an admin token at least


# Every section of the file, by the package that declares it.
SECTIONS: Mapping[str, type[Any]] = {
    "database": db_settings.Database,
    "submission": submission_settings.Submission,
    "sendmail": submission_settings.Sendmail,
    "spool": spool_settings.Spool,
    "tls": outbound_settings.Tls,
    "http": observing.Http,
    "metrics": observing.Metrics,
    "admin": admin_settings.Admin,
    "accounts": mailboxes_settings.Accounts,
    "dkim": signing_settings.Dkim,
    "log": observing.Log,
    "node": spool_settings.Node,
    "dns": outbound_settings.Dns,
    "delivery": deliver_settings.Delivery,
    "retention": spool_settings.Retention,
    "suppression": feedback_settings.Suppression,
    "consumers": feedback_settings.Consumers,
    "reputation": feedback_settings.Reputation,
    "reports": feedback_settings.Reports,
    "bounces": feedback_settings.Bounces,
    "inbound": feedback_settings.Inbound,
    "inbox": feedback_settings.Inbox,
    "webhooks": feedback_settings.Webhooks,
    "unsubscribe": feedback_settings.Unsubscribe,
    "tracking": feedback_settings.Tracking,
}
SCHEMA: Mapping[str, Mapping[str, declared.Key]] = {name: declared.keys(cls) for name, cls in SECTIONS.items()}


@dataclass(frozen=True, slots=True)
class Basics:
    """The part of the configuration a command-line tool needs (load_basics)."""

    database: db_settings.Database
    node: spool_settings.Node
    accounts: mailboxes_settings.Accounts
    dns: outbound_settings.Dns
    tenants: TenantLimits
    source: Path | None
    default_tenant: str = submission_settings.DEFAULT_TENANT  # [submission] default_tenant: with or without a row


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """What [tenants] says of the tenants' quotas and reputation limits."""

    quota: spool_settings.Quota  # of a tenant without its own table
    guard: feedback_settings.Guard
    probation_default: bool  # `mtad tenants add` puts a new tenant on probation
    own_quotas: dict[str, spool_settings.Quota]  # by tenant
    own_guards: dict[str, feedback_settings.Guard]

    def of(self, tenant: str) -> Limits:
        return self.own_quotas.get(tenant, self.quota), self.own_guards.get(tenant, self.guard)


BASIC_SECTIONS = ("database", "node", "accounts", "dns")


@dataclass(frozen=True, slots=True)
class Settings:
    database: db_settings.Database
    submission: submission_settings.Settings
    spool: spool_settings.Spool
    http: observing.Http
    admin: admin_settings.Admin
    log: observing.Log
    node: spool_settings.Node
    delivery: configured.DeliverySettings
    accounts: mailboxes_settings.Accounts
    dkim: signing_settings.Rotation
    retention: retention.Settings
    suppression: suppression.Settings
    consumers: feedback_settings.Consumers
    bounces: feedback_settings.Bounces
    unsubscribe: feedback_settings.Unsubscribe
    tracking: feedback_settings.Tracking
    inbound: feedback_settings.InboundPort
    inbox: inbox.Settings
    webhooks: feedback_settings.WebhookSending
    reputation: feedback_settings.Guarding
    delayed_after: float | None  # [reports]: a notice of mail still retried this long after it came
    source: Path | None

    @property
    def default_tenant(self) -> str:
        return self.submission.default_tenant

    def limits(self, tenant: str) -> Limits:
        """A tenant's quotas and reputation limits, as the configuration gives them."""
        found = self.submission.tenant_defaults.get(tenant)
        return (found.quota if found else self.submission.default_quota), self.reputation.guard(tenant)


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
    from mtad.deliver import configured

    found, document, origin, problems = _read(path, environ, SCHEMA)
    extras = configured.tables(
        found, document.get("routes", {}), document.get("pools", {}), document.get("account_pools", {}), problems
    )
    extras["tenant_weights"] = {}
    extras["tenant_dkim_domains"] = {}
    extras["tenant_guards"] = {}
    extras["tenants_shared"] = tenant_tables.common(document.get("tenants", {}), problems)
    extras["tenant_defaults"] = tenant_tables.defaults(
        document.get("tenants", {}),
        extras["pools"],
        extras["account_pools"],
        extras["tenant_weights"],
        problems,
        extras["tenant_dkim_domains"],
        extras["tenants_shared"],
        extras["tenant_guards"],
    )
    sections = {name: declared.parsed(SECTIONS[name], keys) for name, keys in found.items()}
    _own_keys(sections)
    if extras["account_pools"] and not sections["accounts"].key_file and not sections["accounts"].key_env:
        problems.append(
            "[accounts] key_file or key_env: [account_pools] are configured, and their accounts' "
            "secrets need a key to open; make one with `mtad accounts key > FILE` (mode 0600), "
            "then set key_file = FILE"
        )
    if problems:
        raise errors.ConfigError(problems)
    built = _build(sections, extras, path)
    _check(built, origin, problems)
    if problems:
        raise errors.ConfigError(problems)
    return built


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
    found, document, _, problems = _read(path, environ, BASIC_SECTIONS, also=(("submission", "default_tenant"),))
    limits = _tenant_limits(document.get("tenants", {}), problems)
    if problems:
        raise errors.ConfigError(problems)
    sections = {name: declared.parsed(SECTIONS[name], found[name]) for name in BASIC_SECTIONS}
    _own_keys(sections)
    return Basics(
        database=sections["database"],
        node=sections["node"],
        accounts=sections["accounts"],
        dns=sections["dns"],
        tenants=limits,
        source=path,
        default_tenant=found["submission"]["default_tenant"],
    )


def load_section(
    path: Path | None, name: str, also: Iterable[tuple[str, str]] = (), environ: Mapping[str, str] | None = None
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """One section parsed alone from its declaration, and the (section, key)s of `also`
    parsed (by section and key); ConfigError lists every problem (the file's unknown
    sections and keys included)."""
    found, _, _, problems = _read(path, environ, (name,), also=also)
    if problems:
        raise errors.ConfigError(problems)
    return declared.parsed(SECTIONS[name], found[name]), found


def _tenant_limits(table: Any, problems: list[str]) -> TenantLimits:
    """The quotas and limits of [tenants] and of each [tenants."NAME"], alone."""
    shared = tenant_tables.common(table, problems)
    found = TenantLimits(shared["quota"], shared["guard"], shared["probation_default"], {}, {})
    for name, keys in table.items() if isinstance(table, dict) else ():
        if isinstance(keys, dict):
            found.own_quotas[name], found.own_guards[name] = tenant_tables.limits(
                keys, f'[tenants."{name}"]', found.quota, found.guard, problems
            )
    return found


def _own_keys(sections: dict[str, Any]) -> None:
    """[accounts], [bounces] and [unsubscribe] with their keys, in place: the key named,
    else on the embedded database mtad's own, in its state directory (the data
    directory's parent), made when missing; with a DSN and none named, none. The
    unsubscribe key signs [tracking]'s tokens too."""
    base = sections["database"]
    tracked = getattr(sections.get("tracking"), "url", None) is not None
    wants: dict[str, tuple[str, Callable[[Any], bool]]] = {
        "accounts": (OWN_KEY, lambda s: not s.key_env),
        "bounces": (OWN_BOUNCE_KEY, lambda s: s.domain is not None),
        "unsubscribe": (OWN_UNSUBSCRIBE_KEY, lambda s: s.url is not None or bool(s.listen) or tracked),
    }
    for name, (own, wanted) in wants.items():
        section = sections.get(name)
        if section is not None and section.key_file is None and base.dsn is None and wanted(section):
            sections[name] = dataclasses.replace(section, key_file=base.data_dir.parent / own, make=True)


def _read(
    path: Path | None,
    environ: Mapping[str, str] | None,
    sections: Iterable[str],
    also: Iterable[tuple[str, str]] = (),
) -> tuple[dict[str, dict[str, Any]], dict[str, Any], dict[tuple[str, str], str], list[str]]:
    """The file and the environment merged (every unknown section or key a problem), and
    the keys of `sections` parsed, and the (section, key)s of `also`: (the parsed values
    by section and key, the document, where each override came from, problems)."""
    env = os.environ if environ is None else environ
    problems: list[str] = []
    document: dict[str, Any] = {}
    home = None  # what a relative path in the file (or a default) is relative to
    if path is not None:
        document = datafiles.read_toml(path)
        home = path.expanduser().resolve().parent
        _anchor_account_pools(document.get("account_pools"), home)
    raw, origin = _merge(document, env, problems)
    found: dict[str, dict[str, Any]] = {}
    wanted = [(section, key) for section in sections for key in SCHEMA[section]] + list(also)
    for section, key in wanted:
        found.setdefault(section, {})
        declaration = SCHEMA[section][key]
        value = raw.get(section, {}).get(key, declaration.default)
        if (section, key) == ("database", "data_dir") and key not in raw.get(section, {}):
            value = str(default_data_dir(path))
        elif declaration.parse in values.PATHS and (section, key) not in origin:  # from the file, or the default
            value = _anchored(value, home)
        try:
            found[section][key] = declaration.parse(value)
        except ValueError as exc:
            problems.append(f"{origin.get((section, key), f'[{section}] {key}')}: {exc}")
    return found, document, origin, problems


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
            problems.append(f"[{section}]: unknown section{values.did_you_mean(section, SCHEMA)}")
            continue
        if not isinstance(table, dict):
            problems.append(f"{section}: expected a [{section}] table")
            continue
        for key, value in table.items():
            if key not in SCHEMA[section]:
                problems.append(f"[{section}] {key}: unknown key{values.did_you_mean(key, SCHEMA[section])}")
                continue
            raw.setdefault(section, {})[key] = value
    accounts = document.get("accounts")
    keys_in = {
        str(accounts.get("key_env")) if isinstance(accounts, dict) else "",
        str(_env_value(env.get("MTAD_ACCOUNTS_KEY_ENV", ""))),
    }
    for name, text in env.items():
        if not name.startswith("MTAD_") or name in NOT_CONFIG or name in keys_in:
            continue
        rest = name[5:].lower()
        env_section = next((s for s in SCHEMA if rest.startswith(s + "_")), None)
        if env_section is None:
            hint = values.did_you_mean(name, ENV_NAMES)
            problems.append(f"{name}: not a configuration variable (MTAD_<SECTION>_<KEY>){hint}")
            continue
        key = rest[len(env_section) + 1 :]
        if key not in SCHEMA[env_section]:
            problems.append(
                f"{name}: unknown key {key!r} in [{env_section}]{values.did_you_mean(key, SCHEMA[env_section])}"
            )
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


def _build(sections: dict[str, Any], extras: dict[str, Any], path: Path | None) -> Settings:
    """The settings of each component: a field named as a key of its section takes the
    key's value (mtad.base.settings.build); what differs, or spans sections, is given."""
    from mtad.deliver import configured

    build = declared.build
    sub, tls, dkim = sections["submission"], sections["tls"], sections["dkim"]
    hostname = sub.hostname
    tenant_defaults = extras["tenant_defaults"]
    tracked = {t: (d.track_opens, d.track_clicks) for t, d in tenant_defaults.items() if d.track_opens | d.track_clicks}
    return Settings(
        database=sections["database"],
        submission=build(
            submission_settings.Settings,
            sub,
            tls_cert=tls.cert,
            tls_key=tls.key,
            pools=frozenset(extras["pools"]),
            account_pools=frozenset(extras["account_pools"]),
            tenant_defaults=tenant_defaults,
            default_quota=extras["tenants_shared"]["quota"],
        ),
        spool=sections["spool"],
        http=sections["http"],
        admin=_admin(sections["admin"]),
        log=sections["log"],
        accounts=sections["accounts"],
        dkim=build(signing_settings.Rotation, dkim),
        node=sections["node"],
        delivery=configured.build(
            sections,
            extras,
            list_unsubscribe=frozenset(t for t, d in tenant_defaults.items() if d.list_unsubscribe),
            tracked=tracked,
        ),
        retention=sections["retention"],
        suppression=sections["suppression"],
        consumers=sections["consumers"],
        bounces=sections["bounces"],
        unsubscribe=sections["unsubscribe"],
        tracking=sections["tracking"],
        inbound=build(
            feedback_settings.InboundPort,
            sections["inbound"],
            bounce_domain=sections["bounces"].domain,
            hostname=hostname,
        ),
        inbox=sections["inbox"],
        webhooks=build(feedback_settings.WebhookSending, sections["webhooks"]),
        reputation=build(
            feedback_settings.Guarding,
            sections["reputation"],
            default=extras["tenants_shared"]["guard"],
            tenants=extras["tenant_guards"],
        ),
        delayed_after=sections["reports"].delayed_after,
        source=path,
    )


def _admin(given: admin_settings.Admin) -> admin_settings.Admin:
    """[admin], with the token read from its file (checked by _check)."""
    token = None
    if given.token_file is not None:
        try:
            token = given.token_file.read_text().strip()
        except (OSError, UnicodeDecodeError):
            token = None
    return admin_settings.Admin(listen=given.listen, token_file=given.token_file, token=token)


def _check(settings: Settings, origin: dict[tuple[str, str], str], problems: list[str]) -> None:
    """Checks that span keys or touch the file system."""
    from mtad import submission

    tenants = settings.submission.tenant_defaults.items()
    problems += feedback_settings.problems(
        settings.unsubscribe, settings.tracking, listing=sorted(t for t, d in tenants if d.list_unsubscribe),
        tracked=sorted(t for t, d in tenants if d.track_opens or d.track_clicks))  # fmt: skip
    bounces = settings.bounces
    if bounces.domain is not None and bounces.key_file is None:
        problems.append(
            "[bounces] key_file: with a DSN, name the key of the VERP addresses' HMAC "
            "(make one: mtad accounts key > FILE)"
        )
    elif bounces.key_file is not None and not bounces.make and not bounces.key_file.is_file():
        problems.append(f"[bounces] key_file: no such file: {bounces.key_file}")
    sub = settings.submission
    cert, key = sub.tls_cert, sub.tls_key
    if (cert is None) != (key is None):
        problems.append("[tls] cert and key: set both or neither")
    elif cert is not None and key is not None:
        try:
            submission.tls_context(cert, key)
        except OSError as exc:  # ssl.SSLError included
            problems.append(f"[tls] cert/key: cannot load {cert} and {key}: {exc}")
    listen = [str(a) for a in sub.listen]
    if len(set(listen)) != len(listen):
        problems.append("[submission] listen: the same address is listed twice")
    admin = settings.admin
    if admin.token_file is not None and (admin.token is None or len(admin.token) < MIN_TOKEN):
        problems.append(
            f"[admin] token_file: {admin.token_file} must be a readable file holding the token, "
            f"at least {MIN_TOKEN} characters (head -c 32 /dev/urandom | base64 > FILE)"
        )
    http = settings.http.listen
    if http is not None and http.port != 0 and str(http) in listen:
        problems.append("[http] listen: the same address as a [submission] listen address")
    lease = settings.delivery.engine.lease_duration
    if lease < MIN_LEASE:
        problems.append(
            f"{origin.get(('delivery', 'lease_duration'), '[delivery] lease_duration')}: {lease:g}s is "
            f"too short; at least {MIN_LEASE:g}s, so that a lease renewed every third of itself "
            f"outlasts a renewal that waits {db.CONNECT_TIMEOUT:g}s for the database"
        )
    if settings.spool.commit_window > 1.0:
        problems.append("[spool] commit_window: longer than 1s would hold every 250 back for that long")


# What a running node cannot change: the listening sockets, the database, the node's
# name and roles, what its background loops were started with.
_RESTART_ONLY: tuple[tuple[str, Callable[[Settings], Any]], ...] = (
    ("[database] dsn, data_dir and pool_size", lambda s: (s.database.dsn, s.database.data_dir, s.database.pool_size)),
    ("[submission] listen", lambda s: s.submission.listen),
    ("[submission] processes", lambda s: s.submission.processes),
    ("[submission] max_connections", lambda s: (s.submission.max_connections, s.submission.max_connections_per_client)),
    ("[tls] cert and key", lambda s: (s.submission.tls_cert, s.submission.tls_key)),
    ("[tls] outbound, ca_file, mta_sts and reports", lambda s: (s.delivery.tls, s.delivery.tls_reports)),
    ("[http] listen", lambda s: s.http.listen),
    ("[metrics] campaign_labels", lambda s: s.delivery.engine.campaign_metrics),
    ("[admin]", lambda s: s.admin),
    ("[node]", lambda s: s.node),
    ("[delivery] enabled", lambda s: s.delivery.enabled),
    ("[delivery] sessions (port, timeouts, source_address, max_sessions_per_host, ...)", lambda s: s.delivery.sessions),
    ("[dns]", lambda s: (s.delivery.nameservers, s.delivery.dns_timeout)),
    ("[spool]", lambda s: s.spool),
    ("[log]", lambda s: s.log),
    ("[accounts] key", lambda s: s.accounts),
    ("[dkim]", lambda s: s.dkim),
    ("[retention]", lambda s: s.retention),
    ("[suppression]", lambda s: s.suppression),
    ("[consumers]", lambda s: s.consumers),
    ("[bounces]", lambda s: s.bounces),
    ("[unsubscribe]", lambda s: s.unsubscribe),
    ("[tracking]", lambda s: s.tracking),
    ("[inbound]", lambda s: s.inbound),
    ("[inbox]", lambda s: s.inbox),
    ("[webhooks]", lambda s: s.webhooks),
    ("[reports] delayed_after", lambda s: s.delayed_after),
    ("[reputation] enabled and publish", lambda s: (s.reputation.enabled, s.reputation.publish)),
)


def restart_only(old: Settings, new: Settings) -> list[str]:
    """The keys changed in the file that the running node cannot take up."""
    return [name for name, part in _RESTART_ONLY if part(old) != part(new)]
