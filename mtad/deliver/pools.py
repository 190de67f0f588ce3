"""The [pools.NAME] tables of mtad.toml, parsed into egress.PoolSettings."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from mtad.base import values
from mtad.deliver import egress, warmup


def parse(raw: Mapping[str, Any], problems: list[str]) -> dict[str, egress.PoolSettings]:
    """Parse the `[pools.NAME]` tables; every problem is appended to `problems`,
    naming its table and key. Only pools without a problem are returned; a caller
    that finds problems must refuse the configuration (nothing falls back)."""
    if not isinstance(raw, Mapping):
        problems.append("[pools]: expected tables such as [pools.bulk]")
        return {}
    pools: dict[str, egress.PoolSettings] = {}
    owner: dict[str, str] = {}
    for name, table in raw.items():
        where = f"[pools.{name}]"
        if not _POOL_NAME.fullmatch(name):
            problems.append(f"{where}: a pool name is 1-64 letters, digits, '.', '_' or '-'")
            continue
        if not isinstance(table, Mapping):
            problems.append(f"{where}: expected a table of pool settings")
            continue
        settings = _parse_pool(name, table, problems)
        if settings is None:
            continue
        shared = [a for a in settings.addresses if a in owner]
        for address in shared:
            problems.append(
                f"{where} addresses: {address} is also in [pools.{owner[address]}];"
                " an address belongs to one pool (its reputation is the pool's)"
            )
        for address in settings.addresses:
            owner.setdefault(address, name)
        if not shared:
            pools[name] = settings
    return pools


_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _policy(value: Any) -> egress.Policy:
    if isinstance(value, str) and value.lower() in {p.value for p in egress.Policy}:
        return egress.Policy(value.lower())
    options = ", ".join(f'"{p.value}"' for p in egress.Policy)
    raise ValueError(f"expected one of {options}, got {value!r}")


# key -> (parser, the PoolSettings or Warmup field it sets). Defaults are the dataclasses'.
_KEYS: Mapping[str, tuple[Callable[[Any], Any], str]] = {
    "addresses": (values.ip_addresses(allow_empty=False), "addresses"),
    "policy": (_policy, "policy"),
    "rotate_after": (values.range_pair, "rotate_after"),
    "park": (values.positive_duration, "park"),
    "ehlo": (values.table_of(values.ip_address, values.hostname, '{ "192.0.2.10" = "mta1.example.com" }'), "ehlo"),
    "ehlo_default": (values.optional_hostname, "ehlo_default"),
    "warming": (values.ip_addresses(allow_empty=True), "warming"),
    "warmup_start": (values.integer(1, 10_000_000), "start"),
    "warmup_growth": (values.number(1.0, 10.0, what="a growth factor such as 1.5"), "growth"),
    "warmup_target": (values.integer(1, 1_000_000_000), "target"),
    "warmup_max_deferral_rate": (values.number(0.0, 1.0, what="a fraction such as 0.10 (10%)"), "max_deferral_rate"),
    "warmup_max_complaint_rate": (
        values.number(0.0, 1.0, what="a fraction such as 0.003 (0.3%)"),
        "max_complaint_rate",
    ),
    "unhealthy_after": (values.integer(1, 1000), "unhealthy_after"),
    "cool_off": (values.positive_duration, "cool_off"),
}
_ROTATE_KEYS = ("rotate_after", "park")
_WARMUP_BOUNDS = (("warmup_start", "start"), ("warmup_target", "target"))


def _parse_pool(name: str, table: Mapping[str, Any], problems: list[str]) -> egress.PoolSettings | None:
    where = f"[pools.{name}]"
    before = len(problems)
    parsed: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _KEYS:
            problems.append(f"{where} {key}: unknown key{values.did_you_mean(key, _KEYS)}")
            continue
        parse, attribute = _KEYS[key]
        try:
            parsed[attribute] = parse(value)
        except ValueError as exc:
            problems.append(f"{where} {key}: {exc}")
    if "addresses" not in table:
        problems.append(f"{where} addresses: missing; list the pool's source IP addresses, the primary first")
    addresses = parsed.get("addresses")
    if addresses is not None:
        for key, listed in (("warming", parsed.get("warming", ())), ("ehlo", parsed.get("ehlo", {}))):
            for address in listed:
                if address not in addresses:
                    problems.append(f"{where} {key}: {address} is not one of the pool's addresses")
    policy = parsed.get("policy", egress.Policy.STICKY if "policy" not in table else None)
    if policy is not None and policy is not egress.Policy.ROTATE:
        # A key with no effect under the chosen policy is a mistake to point out,
        # not something to ignore. (The warm-up keys are different: keeping the
        # schedule after the last address warmed up is normal.)
        for key in _ROTATE_KEYS:
            if key in table:
                problems.append(f'{where} {key}: only used with policy = "rotate" (this pool is "{policy.value}")')
    warmup_fields = ("start", "growth", "target", "max_deferral_rate", "max_complaint_rate")
    schedule = warmup.Warmup(**{k: parsed[k] for k in warmup_fields if k in parsed})
    bounded = all(key not in table or attribute in parsed for key, attribute in _WARMUP_BOUNDS)
    if bounded and schedule.target <= schedule.start:
        problems.append(
            f"{where} warmup_target: must be larger than warmup_start ({schedule.start}), got {schedule.target}"
        )
    if len(problems) > before:
        return None
    fields = {k: v for k, v in parsed.items() if k not in warmup_fields}
    fields["warming"] = frozenset(parsed.get("warming", ()))
    return egress.PoolSettings(name=name, warmup=schedule, **fields)
