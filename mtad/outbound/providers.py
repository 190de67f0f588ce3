"""The receiving providers of mtad/tables/providers.toml (or the file [delivery]
providers names): each recognised by its MX host names, with its shaping limits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mtad.base import datafiles, errors
from mtad.outbound import limits


@dataclass(frozen=True, slots=True)
class Provider:
    """A receiving provider, recognised by the suffixes of its MX host names."""

    name: str
    mx_suffixes: tuple[str, ...]
    limits: limits.Limits


@dataclass(frozen=True, slots=True)
class Providers:
    known: tuple[Provider, ...]
    default: limits.Limits = limits.DEFAULT

    def group_of(self, mx_hosts: Iterable[str]) -> tuple[str, limits.Limits]:
        """(group name, shaping limits) for a set of MX hosts: a known provider when every
        host matches one of its suffixes, else a group of these hosts alone."""
        hosts = sorted({h.lower().rstrip(".") for h in mx_hosts})
        for provider in self.known:
            if hosts and all(_under(h, provider.mx_suffixes) for h in hosts):
                return provider.name, provider.limits
        return "mx:" + ",".join(hosts), self.default


def _under(host: str, suffixes: tuple[str, ...]) -> bool:
    return any(host == s or host.endswith("." + s) for s in suffixes)


def load_providers(path: Path) -> Providers:
    """Read mtad/tables/providers.toml; ConfigError lists every problem."""
    document = datafiles.read_toml(path)
    return parse_providers(document, str(path))


def parse_providers(document: Mapping[str, Any], where: str = "providers") -> Providers:
    problems: list[str] = []
    default_table = document.get("default", {})
    default = limits.parse(default_table, limits.DEFAULT, f"{where}: [default]", problems)
    _unknown_keys(default_table, set(limits.KEYS), f"{where}: [default]", problems)
    known = []
    for name, table in document.get("providers", {}).items():
        suffixes = table.get("mx_suffixes")
        if not isinstance(suffixes, list) or not suffixes or not all(isinstance(s, str) and s for s in suffixes):
            problems.append(f"{where}: [providers.{name}] mx_suffixes: expected a non-empty list of domain names")
            suffixes = []
        provider_limits = limits.parse(table, default, f"{where}: [providers.{name}]", problems)
        _unknown_keys(table, {"mx_suffixes", *limits.KEYS}, f"{where}: [providers.{name}]", problems)
        known.append(Provider(name, tuple(s.lower().rstrip(".") for s in suffixes), provider_limits))
    unknown_sections = set(document) - {"default", "providers"}
    if unknown_sections:
        problems.append(f"{where}: unknown sections {', '.join(sorted(unknown_sections))}")
    if problems:
        raise errors.ConfigError(problems)
    return Providers(tuple(known), default)


def _unknown_keys(table: Mapping[str, Any], allowed: set[str], where: str, problems: list[str]) -> None:
    unknown = set(table) - allowed
    if unknown:
        problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))} (known: {', '.join(sorted(allowed))})")
