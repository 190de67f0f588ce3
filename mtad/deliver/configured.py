"""What delivery takes of the configuration: [delivery] with the [tls], [accounts],
[dkim] and [dns] keys it needs, and the tables it names ([routes], [pools],
[account_pools], the providers and reply tables), built into the settings of each
part of it (config calls `tables`, then `build`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mtad.base import envelope, errors, values
from mtad.base import settings as declared
from mtad.base.endpoints import HostPort
from mtad.deliver import egress
from mtad.deliver import pools as source_pools
from mtad.deliver import settings as deliver_settings
from mtad.mailboxes import accounts
from mtad.mailboxes import pools as mailbox_pools
from mtad.outbound import outcomes, providers
from mtad.outbound import settings as outbound_settings


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    enabled: bool
    engine: deliver_settings.Settings
    sessions: outbound_settings.SessionSettings
    nameservers: tuple[HostPort, ...]  # empty: the system's resolvers
    dns_timeout: float
    providers: providers.Providers
    rules: outcomes.Rules
    routes: Mapping[str, HostPort]  # domain -> relay
    pools: Mapping[str, egress.PoolSettings]  # [pools.NAME]
    relay: mailbox_pools.Settings  # [account_pools.NAME] and the [accounts] responses
    tls: outbound_settings.PolicySettings  # the recipient domains' TLS policies: MTA-STS, DANE
    tls_reports: outbound_settings.ReportSettings  # TLS reporting (RFC 8460) to those domains
    dkim_processes: int  # RSA signatures made off the event loop, in this many processes (0: on it)


def tables(
    found: dict[str, dict[str, Any]], routes: Any, pools: Any, account_pools: Any, problems: list[str]
) -> dict[str, Any]:
    """The files [delivery] names (providers, reply rules), the [pools], [account_pools]
    and [routes] tables."""
    extras: dict[str, Any] = {
        "routes": {},
        "route_pools": {},
        "route_account_pools": {},
        "pools": source_pools.parse(pools, problems),
        "account_pools": mailbox_pools.parse(account_pools, problems),
    }
    for key in ("default_pool", "probation_pool"):
        named = found["delivery"].get(key)
        if named and named not in extras["pools"]:
            problems.append(f"[delivery] {key}: no pool named {named!r}{declared.pools_known(extras['pools'])}")
    for key, load_file in (("providers", providers.load_providers), ("replies", outcomes.load_rules)):
        if key not in found["delivery"]:
            continue  # a bad value, already reported
        path = found["delivery"][key] or deliver_settings.shipped_table(key)
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
                extras["routes"][ascii_domain] = values.host_port(table["relay"])
            except ValueError as exc:
                problems.append(f"{where} relay: {exc}")
        for key, section, chosen in (
            ("pool", "pools", "route_pools"),
            ("account_pool", "account_pools", "route_account_pools"),
        ):
            if key in table:
                named = declared.pool_name(table[key], extras[section], f"{where} {key}", section, problems)
                if named:
                    extras[chosen][ascii_domain] = named
    return extras


def build(
    sections: Mapping[str, Any],
    extras: Mapping[str, Any],
    *,
    list_unsubscribe: frozenset[str],
    tracked: Mapping[str, tuple[bool, bool]] | None = None,
) -> DeliverySettings:
    """Each part's settings from the parsed sections (by name) and the tables."""
    build = declared.build
    out, tls, keys, dkim = (sections[n] for n in ("delivery", "tls", "accounts", "dkim"))
    hostname, tenant = sections["submission"].hostname, sections["submission"].default_tenant
    return DeliverySettings(
        enabled=out.enabled,
        engine=build(
            deliver_settings.Settings,
            out,
            node=sections["node"].id,
            node_timeout=3 * sections["node"].heartbeat_interval,
            route_pools=extras["route_pools"],
            route_account_pools=extras["route_account_pools"],
            tenant_dkim_domains=extras["tenant_dkim_domains"],
            dkim_canonicalization=dkim.canonicalization,
            tenant_weights=extras["tenant_weights"],
            bounce_suppression=sections["suppression"].bounce_expiry,
            list_unsubscribe=list_unsubscribe,
            tracked=tracked or {},
            campaign_metrics=sections["metrics"].campaign_labels,
        ),
        sessions=build(
            outbound_settings.SessionSettings,
            out,
            ehlo_hostname=out.ehlo_hostname or hostname,
            tls_required=tls.outbound == "required",
            max_messages=out.max_messages_per_session,
            max_per_host=out.max_sessions_per_host,
        ),
        nameservers=sections["dns"].nameservers,
        dns_timeout=sections["dns"].timeout,
        providers=extras["providers"],
        rules=extras["replies"],
        routes=extras["routes"],
        pools=extras["pools"],
        relay=build(
            mailbox_pools.Settings,
            keys,
            pools=extras["account_pools"],
            poll=out.poll_interval,
            ca_file=tls.ca_file,
            breaker=accounts.Breaker(
                failures=keys.breaker_failures,
                window=keys.breaker_window,
                min_successes=keys.breaker_min_successes,
                trip_for=keys.trip_duration,
                trips_per_day=keys.trips_to_disconnect,
            ),
        ),
        tls=build(
            outbound_settings.PolicySettings,
            tls,
            dane=tls.outbound == "dane",
            https_port=tls.mta_sts_port,
            fetch_timeout=tls.mta_sts_timeout,
        ),
        tls_reports=outbound_settings.ReportSettings(
            enabled=tls.reports,
            organization=tls.report_organization or hostname,
            contact=tls.report_contact,
            sender=tls.report_from or f"postmaster@{hostname}",
            tenant=tenant,
        ),
        dkim_processes=dkim.processes,
    )
