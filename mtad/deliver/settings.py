"""[delivery], declared (mtad.base.settings), and the delivery engine's settings: what
it takes of [delivery], the routes and the tenants."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from mtad.base import values
from mtad.base.settings import key
from mtad.outbound import outcomes
from mtad.outbound import settings as outbound_settings
from mtad.signing import settings as signing_settings


def retry_schedule(value: Any) -> outcomes.RetrySchedule:
    """ "5m, 10m, 30m, 1h, 2h, 4h" (the last repeats); "2h*3" is 2h three times."""
    return outcomes.RetrySchedule(values.schedule(value))


def shipped_table(name: str) -> Path:
    """The reference table `name` ("providers", "replies") shipped with mtad, the
    default when the configuration names none."""
    return Path(str(resources.files("mtad").joinpath("tables", f"{name}.toml")))


@dataclass(frozen=True, slots=True)
class Delivery(outbound_settings.Sessions):
    """[delivery]: the engine's keys, beside the sessions' (outbound.settings.Sessions)."""

    enabled: bool = key(values.boolean, True, "false: this node only accepts.")
    providers: Path | None = key(values.optional_path, "", "Providers by MX host; empty: the shipped table.")
    replies: Path | None = key(values.optional_path, "", "How replies are classified; empty: the shipped table.")
    max_recipients_per_transaction: int = key(values.integer(1, 1000), 50, "Recipients of one transaction.")
    retry: outcomes.RetrySchedule = key(retry_schedule, "5m, 10m, 30m, 1h, 2h, 4h", "Delays before each retry.")
    max_age: float = key(values.positive_duration, "5d", "A delivery not done this long after its accept bounces.")
    max_failures: int = key(values.integer(1, 1000), 5, "mtad's own failures before a dead letter.")
    lease_duration: float = key(values.positive_duration, "5m", "How long a lease lasts (renewed every third).")
    lease_batch: int = key(values.integer(1, 100_000), 500, "Deliveries leased in one statement.")
    max_held: int = key(values.integer(1, 10_000_000), 20_000, "Deliveries one node holds in memory.")
    body_cache: int = key(values.size, "64MiB", "Message bodies held in memory for them.")
    poll_interval: float = key(values.positive_duration, "5s", "How often to look for due deliveries unwoken.")
    shutdown_timeout: float = key(values.duration, "30s", "At SIGTERM, how long sends on the wire may take.")
    checkpoint_interval: float = key(values.positive_duration, "5s", "Buckets and warm-up to and from PostgreSQL.")
    default_pool: str | None = key(values.optional_string, "", "The source IP pool of mail that names none.")
    probation_pool: str | None = key(values.optional_string, "", "The source IP pool of tenants on probation.")


_DECLARED = Delivery()  # the declared defaults, of an engine made without a configuration


@dataclass(frozen=True, slots=True)
class Settings:
    """What the engine takes: [delivery]'s keys of the same names (their defaults are the
    declared ones), and what config gives from the other sections and tables."""

    node: str
    retry: outcomes.RetrySchedule = _DECLARED.retry
    max_age: float = _DECLARED.max_age
    max_failures: int = _DECLARED.max_failures  # mtad's own failures before a delivery is a dead letter
    max_recipients_per_transaction: int = _DECLARED.max_recipients_per_transaction
    lease_duration: float = _DECLARED.lease_duration
    lease_batch: int = _DECLARED.lease_batch
    max_held: int = _DECLARED.max_held  # deliveries held in memory at once
    body_cache: int = _DECLARED.body_cache  # bytes of message bodies held for sending; beyond, read when sent
    poll_interval: float = _DECLARED.poll_interval
    shutdown_timeout: float = _DECLARED.shutdown_timeout
    # Buckets and warm-up to and from PostgreSQL, and the live node count.
    checkpoint_interval: float = _DECLARED.checkpoint_interval
    node_timeout: float = 30.0  # a node whose heartbeat is older is not counted as live
    default_pool: str | None = _DECLARED.default_pool  # of mail that names none (None: source_address)
    probation_pool: str | None = _DECLARED.probation_pool  # of the tenants on probation (None: as any other)
    route_pools: Mapping[str, str] = field(default_factory=dict)  # domain -> pool, over what the message says
    route_account_pools: Mapping[str, str] = field(
        default_factory=dict
    )  # domain -> account pool, if the message has none
    tenant_weights: Mapping[str, int] = field(default_factory=dict)  # turns per round in a ready queue (default 1)
    tenant_dkim_domains: Mapping[str, str] = field(default_factory=dict)  # tenant -> its signing domain
    dkim_canonicalization: str = signing_settings.Dkim().canonicalization  # c= of the signatures (header/body)
    bounce_suppression: float | None = None  # seconds a recipient bounced as unknown stays suppressed (None: ever)
    list_unsubscribe: frozenset[str] = frozenset()  # tenants whose mail gets List-Unsubscribe fields
    tracked: Mapping[str, tuple[bool, bool]] = field(default_factory=dict)  # tenant -> (opens, clicks) tracked
    campaign_metrics: bool = False  # [metrics] campaign_labels: outcomes counted by campaign too
