"""Settings declared once. A package declares each mtad.toml section it owns as a
frozen dataclass whose fields are the section's keys, each made by `key(parse,
default, help)`: its parser (mtad.base.values), its default as mtad.toml writes
it, one line of help. config reads the file and the environment and builds every
section from its declaration alone; conf/mtad.toml and docs/ are checked against
the declarations by the tests. Pure, no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from mtad.base import errors, values

T = TypeVar("T")
_KEY = "mtad.key"


@dataclasses.dataclass(frozen=True, slots=True)
class Key:
    """A key of a section: how its value parses, its default as mtad.toml writes it,
    and what it does."""

    parse: Callable[[Any], Any]
    default: Any
    help: str


def key(parse: Callable[[Any], Any], default: Any, help: str, *, factory: Callable[[], Any] | None = None) -> Any:
    """A dataclass field declaring a key; an instance made without it holds the default
    parsed (or factory(), for a default that depends on where the file is)."""
    made = factory if factory is not None else functools.partial(parse, default)
    return dataclasses.field(default_factory=made, metadata={_KEY: Key(parse, default, help)})


def keys(section: type[Any]) -> dict[str, Key]:
    """The keys a section's dataclass declares, in their order."""
    return {f.name: f.metadata[_KEY] for f in dataclasses.fields(section) if _KEY in f.metadata}


def build(cls: Callable[..., T], section: object, **more: Any) -> T:
    """A component's settings from a parsed section: each field of `cls` named as a key
    of the section takes its value; `more` gives the rest."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    given = {name: getattr(section, name) for name in keys(type(section)) if name in names and name not in more}
    return cls(**given, **more)


def parsed(section: type[T], given: Mapping[str, Any]) -> T:
    """A section's dataclass from its keys' parsed values (those absent take their default)."""
    return section(**{name: given[name] for name in keys(section) if name in given})


def named_tables(
    table: Mapping[str, Any],
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
        for given in keys:
            if given not in known:
                problems.append(f"{here} {given}: unknown key{values.did_you_mean(given, known)}")
        yield name, here, keys


def pools_known(pools: Mapping[str, Any], section: str = "pools") -> str:
    return f" (configured: {', '.join(sorted(pools))})" if pools else f" (no [{section}] are configured)"


def pool_name(value: Any, known: Mapping[str, Any], at: str, section: str, problems: list[str]) -> str | None:
    """A pool name given at `at` (a route's, a tenant's), one of the [section] tables
    ("pools" or "account_pools"); "" is none. None, and a problem, when it is not."""
    kind = "account pool" if section == "account_pools" else "pool"
    if not isinstance(value, str):
        problems.append(f"{at}: expected {'an' if section == 'account_pools' else 'a'} {kind} name, got {value!r}")
        return None
    if value and value not in known:
        problems.append(f"{at}: no {kind} named {value!r}{pools_known(known, section)}")
        return None
    return value or None
