"""The [tenants] tables of mtad.toml: [tenants] itself (every tenant's quotas and
reputation limits, probation_default) and each [tenants."NAME"] (what a tenant's
messages get when they say nothing, its weight and signing domain, its own limits).
Its imports are light: `load_basics` reads the limits for the tools."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from mtad.base import settings as declared
from mtad.base import values
from mtad.feedback import settings as feedback_settings
from mtad.spool import settings as spool_settings
from mtad.submission import settings as submission_settings

_TENANT_KEYS = {
    "dkim_domain": "a domain with DKIM keys",
    "priority": "a whole number",
    "pool": "a pool name",
    "account_pool": "an account pool name",
    "weight": "a whole number",
    "suppressed": '"cancel" or "refuse"',
    "list_unsubscribe": "true or false",
    "track_opens": "true or false",
    "track_clicks": "true or false",
    "dsn": "true or false",
    "max_per_hour": "a whole number of messages",
    "max_per_day": "a whole number of messages",
    "max_queued_bytes": 'a size such as "2GiB"',
    "max_complaint_rate": "a fraction such as 0.003",
    "max_bounce_rate": "a fraction such as 0.05",
    "reputation_min_volume": "a whole number of deliveries",
    "graduate_after": "a whole number of deliveries",
    "campaign_max_per_hour": "a whole number of sends",
    "campaign_max_per_day": "a whole number of sends",
}
# Keys of [tenants] itself: the limits of every tenant without its own, and probation_default.
_TENANTS_SHARED = frozenset(
    {"probation_default", *(k for k in _TENANT_KEYS if k.startswith(("max_", "reputation_", "graduate_")))}
)


# key -> (parser, where it goes: "quota" or "guard", the field)
_LIMITS: Mapping[str, tuple[Callable[[Any], Any], str, str]] = {
    "max_per_hour": (values.integer(1, 1_000_000_000), "quota", "max_per_hour"),
    "max_per_day": (values.integer(1, 1_000_000_000), "quota", "max_per_day"),
    "max_queued_bytes": (values.size, "quota", "max_queued_bytes"),
    "max_complaint_rate": (values.fraction, "guard", "max_complaint_rate"),
    "max_bounce_rate": (values.fraction, "guard", "max_bounce_rate"),
    "reputation_min_volume": (values.integer(1, 1_000_000_000), "guard", "min_volume"),
    "graduate_after": (values.integer(1, 1_000_000_000), "guard", "graduate_after"),
}


def limits(keys: Mapping[str, Any], where: str, quota: Any, guard: Any, problems: list[str]) -> tuple[Any, Any]:
    """A quota and a guard: those given, with what `keys` sets in place of theirs."""
    changes: dict[str, dict[str, Any]] = {"quota": {}, "guard": {}}
    for key, (parse, part, name) in _LIMITS.items():
        if key in keys:
            try:
                changes[part][name] = parse(keys[key])
            except ValueError as exc:
                problems.append(f"{where} {key}: {exc}")
    return dataclasses.replace(quota, **changes["quota"]), dataclasses.replace(guard, **changes["guard"])


def common(table: Any, problems: list[str]) -> dict[str, Any]:
    """[tenants]' own keys, parsed: "quota", "guard", "probation_default"."""
    keys = (
        {k: v for k, v in table.items() if k in _TENANTS_SHARED and not isinstance(v, dict)}
        if isinstance(table, dict)
        else {}
    )
    quota, guard = limits(keys, "[tenants]", spool_settings.NO_QUOTA, feedback_settings.Guard(), problems)
    probation = keys.get("probation_default", False)
    if not isinstance(probation, bool):
        problems.append(f"[tenants] probation_default: expected true or false, got {probation!r}")
    return {"quota": quota, "guard": guard, "probation_default": probation is True}


def defaults(
    table: Any,
    pools: Mapping[str, Any],
    account_pools: Mapping[str, Any],
    weights: dict[str, int],
    problems: list[str],
    dkim_domains: dict[str, str] | None = None,
    shared: Mapping[str, Any] | None = None,
    guards: dict[str, Any] | None = None,
) -> dict[str, submission_settings.TenantDefaults]:
    """The [tenants."NAME"] tables: the priority and source IP pool of a tenant's
    messages when they name none (X-Mtad-Priority, Priority, X-Mtad-Pool), and the
    tenant's weight in delivery's ready queues (put in `weights`)."""
    if not isinstance(table, dict):
        problems.append('[tenants]: expected tables such as [tenants."shop"]')
        return {}
    shared = shared if shared is not None else common(table, problems)
    table = {k: v for k, v in table.items() if not (k in _TENANTS_SHARED and not isinstance(v, dict))}
    priority = values.integer(submission_settings.MIN_PRIORITY, submission_settings.MAX_PRIORITY)
    defaults: dict[str, submission_settings.TenantDefaults] = {}
    example = 'priority = 10, pool = "bulk"'
    for name, where, keys in declared.named_tables(
        table, '[tenants."{}"]', spool_settings.check_tenant_name, example, _TENANT_KEYS, problems
    ):
        found = len(problems)
        chosen = 0
        try:
            chosen = priority(keys.get("priority", 0))
        except ValueError as exc:
            problems.append(f"{where} priority: {exc}")
        try:
            weights[name] = values.integer(1, 100)(keys.get("weight", 1))
        except ValueError as exc:
            problems.append(f"{where} weight: {exc}")
        pool = declared.pool_name(keys.get("pool", ""), pools, f"{where} pool", "pools", problems)
        account_pool = declared.pool_name(
            keys.get("account_pool", ""), account_pools, f"{where} account_pool", "account_pools", problems
        )
        signing = keys.get("dkim_domain", "")
        if not isinstance(signing, str) or (signing and not _is_domain(signing.lower().rstrip("."))):
            problems.append(f"{where} dkim_domain: expected a domain name, got {signing!r}")
        elif signing and dkim_domains is not None:
            dkim_domains[name] = signing.lower().rstrip(".")
        refusing = keys.get("suppressed", "cancel")
        if refusing not in ("cancel", "refuse"):
            problems.append(
                f'{where} suppressed: expected "cancel" (the delivery is cancelled) or "refuse" '
                f"(550 5.7.1 at RCPT), got {refusing!r}"
            )
        leaving = keys.get("list_unsubscribe", False)
        if not isinstance(leaving, bool):
            problems.append(f"{where} list_unsubscribe: expected true or false, got {leaving!r}")
        tracking = {k: keys.get(k, False) for k in ("track_opens", "track_clicks")}
        for k, on in tracking.items():
            if not isinstance(on, bool):
                problems.append(f"{where} {k}: expected true or false, got {on!r}")
        reporting = keys.get("dsn", True)
        if not isinstance(reporting, bool):
            problems.append(f"{where} dsn: expected true or false, got {reporting!r}")
        quota, guard = limits(keys, where, shared["quota"], shared["guard"], problems)
        campaign_limits: dict[str, int | None] = {}
        for k in ("campaign_max_per_hour", "campaign_max_per_day"):
            try:  # as a campaign's own (campaigns.Limits): above 0, within PostgreSQL's integer
                campaign_limits[k] = values.integer(1, 2**31 - 1)(keys[k]) if k in keys else None
            except ValueError as exc:
                problems.append(f"{where} {k}: {exc}")
        if guards is not None and any(k in keys for k, (_, part, _) in _LIMITS.items() if part == "guard"):
            guards[name] = guard
        if len(problems) == found:
            defaults[name] = submission_settings.TenantDefaults(
                chosen, pool, account_pool, refusing == "refuse", leaving is True, reporting is not False, quota,
                track_opens=tracking["track_opens"] is True, track_clicks=tracking["track_clicks"] is True,
                campaign_max_per_hour=campaign_limits.get("campaign_max_per_hour"),
                campaign_max_per_day=campaign_limits.get("campaign_max_per_day"),
            )  # fmt: skip
    return defaults


def _is_domain(text: str) -> bool:
    return bool(values.HOSTNAME.fullmatch(text)) and "." in text
