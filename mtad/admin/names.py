"""The names an operator gives the command line and the admin API, checked against
what exists before anything is done with them, so that a typo is refused rather
than done to nothing.

What exists: tenants are rows (`mtad tenants add`), and [submission] default_tenant,
which mail without AUTH goes to, needs none; accounts and webhook endpoints are
rows; source pools, their addresses ([delivery] source_address too) and account
pools are the configuration's (`Configured`, which config.names builds); provider
groups are the configured providers, static routes (relay:HOST:PORT) and account
pools (accounts:POOL), and the groups the spool has seen (an mx:HOSTS group exists
once mail was routed to it). A suspension or reroute to take back must be in force.

An unknown name raises `Unknown` (a NotFound: a command exits 1, the API answers
404, or 422 naming the field of a body or query), with the closest known name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from mtad import db
from mtad.base import errors, values
from mtad.spool import settings as spool_settings
from mtad.spool import suspensions

SHOWN = 10  # the known names an error lists when none is close to the one given


@dataclass(frozen=True, slots=True)
class Configured:
    """The names the configuration makes."""

    pools: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # source pool -> its addresses
    account_pools: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()  # providers, relay:HOST:PORT, accounts:POOL
    default_source: str | None = None  # [delivery] source_address: mail of no pool leaves from it

    @property
    def sources(self) -> frozenset[str]:
        found = {a for addresses in self.pools.values() for a in addresses}
        return frozenset(found | ({self.default_source} if self.default_source else set()))


class Unknown(errors.NotFound):
    """A name that names nothing: `field` is the field of a request's body or query that
    gave it (None: its path, or a command's argument), `suggestion` the closest known
    name. The text says which that is, else the known names when they are few."""

    def __init__(self, text: str, name: str, known: Iterable[str], field: str | None = None) -> None:
        known = sorted(set(known))
        self.field = field
        self.suggestion = values.closest(name, known)
        if self.suggestion is not None:
            text += f" (did you mean {self.suggestion!r}?)"
        elif 0 < len(known) <= SHOWN:
            text += f" (known: {', '.join(known)})"
        super().__init__(text)


async def tenant(database: db.Database, name: str, default_tenant: str, *, field: str | None = None) -> str:
    """`name`, a tenant's: a row, or the default tenant."""
    spool_settings.check_tenant_name(name)
    if name == default_tenant:
        return name
    known = [row["name"] for row in await database.fetch("names/tenants")]
    if name not in known:
        raise Unknown(f"no tenant {name!r}", name, [*known, default_tenant], field)
    return name


async def account(database: db.Database, name: str, *, field: str | None = None) -> str:
    known = [row["name"] for row in await database.fetch("names/accounts")]
    if name not in known:
        raise Unknown(f"no account {name!r}", name, known, field)
    return name


async def webhook(database: db.Database, endpoint: int, tenant: str | None = None, *, field: str | None = None) -> int:
    """`endpoint`, an endpoint's id (of `tenant`, when given)."""
    rows = await database.fetch("names/webhooks")
    known = [str(row["id"]) for row in rows if tenant is None or row["tenant"] == tenant]
    if str(endpoint) not in known:
        of = f" of tenant {tenant}" if tenant is not None else ""
        raise Unknown(f"no webhook endpoint {endpoint}{of}", str(endpoint), known, field)
    return endpoint


def pool(name: str, configured: Configured, *, field: str | None = None) -> str:
    """`name`, a source pool's ([pools.NAME])."""
    if name not in configured.pools:
        raise Unknown(f"no source pool {name!r}{_none(configured.pools, 'pools')}", name, configured.pools, field)
    return name


def account_pool(name: str, configured: Configured, *, field: str | None = None) -> str:
    """`name`, an account pool's ([account_pools.NAME])."""
    if name not in configured.account_pools:
        raise Unknown(f"no account pool {name!r}{_none(configured.account_pools, 'account_pools')}", name,
                      configured.account_pools, field)  # fmt: skip
    return name


def source(address: str, configured: Configured, *, field: str | None = None) -> str:
    """`address`, a source address of a configured pool (or [delivery] source_address), as
    an IP address is written."""
    address = suspensions.check("source", address)
    if address not in configured.sources:
        raise Unknown(f"no source pool has the address {address}{_none(configured.sources, 'pools')}", address,
                      configured.sources, field)  # fmt: skip
    return address


async def group(database: db.Database, name: str, configured: Configured, *, field: str | None = None) -> str:
    """`name`, a provider group's: configured, or seen in the spool (an mx:HOSTS group is
    known once mail was routed to it)."""
    if name in configured.groups:
        return name
    seen = [row["route_group"] for row in await database.fetch("names/groups")]
    if name in seen or await database.fetchval("names/group_routed", name):
        return name
    raise Unknown(f"no provider group {name!r} is configured or was routed to", name, [*configured.groups, *seen],
                  field)  # fmt: skip


async def suspendable(
    database: db.Database,
    kind: str,
    key: str,
    configured: Callable[[], Configured],
    default_tenant: str,
    *,
    field: str | None = None,
) -> str:
    """The key of a suspension of `kind` (suspensions.KINDS), checked as that kind's name
    (`configured` is asked only for a provider group, a pool or a source address)."""
    key = suspensions.check(kind, key)
    if kind == "provider":
        return await group(database, key, configured(), field=field)
    if kind == "tenant":
        return await tenant(database, key, default_tenant, field=field)
    if kind == "pool":
        return pool(key, configured(), field=field)
    if kind == "source":
        return source(key, configured(), field=field)
    return await account(database, key, field=field)


async def suspended(database: db.Database, kind: str, key: str, now: datetime) -> str:
    """The key of a suspension of `kind` in force at `now`."""
    key = suspensions.check(kind, key)
    found, _ = await suspensions.listing(database, now)
    known = [s.key for s in found if s.kind == kind]
    if key not in known:
        raise Unknown(f"{kind} {key} is not suspended", key, known)
    return key


async def rerouted(database: db.Database, provider: str, now: datetime) -> str:
    """A provider group rerouted at `now`."""
    _, found = await suspensions.listing(database, now)
    known = [r.provider for r in found]
    if provider not in known:
        raise Unknown(f"provider group {provider} is not rerouted", provider, known)
    return provider


def _none(names: Iterable[str], section: str) -> str:
    """What the text of an unknown pool or address says when the configuration has none."""
    return "" if any(True for _ in names) else f" (no [{section}] are configured)"
