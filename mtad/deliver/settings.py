"""The delivery engine's settings: `[delivery]` and the routes, as the engine takes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mtad.outbound import outcomes


@dataclass(frozen=True, slots=True)
class Settings:
    node: str
    retry: outcomes.RetrySchedule = field(
        default_factory=lambda: outcomes.RetrySchedule((300, 600, 1800, 3600, 7200, 14400))
    )
    max_age: float = 5 * 86400.0
    max_failures: int = 5  # mtad's own failures before a delivery is a dead letter
    max_recipients_per_transaction: int = 50
    lease_duration: float = 300.0
    lease_batch: int = 500
    max_held: int = 20_000  # deliveries held in memory at once
    body_cache: int = 64 * 1024 * 1024  # bytes of message bodies held for sending; beyond, read when sent
    poll_interval: float = 5.0
    shutdown_timeout: float = 30.0
    checkpoint_interval: float = 5.0  # buckets and warm-up to and from PostgreSQL, and the live node count
    node_timeout: float = 30.0  # a node whose heartbeat is older is not counted as live
    default_pool: str | None = None  # the source IP pool of mail that names none (None: source_address)
    probation_pool: str | None = None  # the source IP pool of the tenants on probation (None: as any other)
    route_pools: Mapping[str, str] = field(default_factory=dict)  # domain -> pool, over what the message says
    route_account_pools: Mapping[str, str] = field(
        default_factory=dict
    )  # domain -> account pool, if the message has none
    tenant_weights: Mapping[str, int] = field(default_factory=dict)  # turns per round in a ready queue (default 1)
    tenant_dkim_domains: Mapping[str, str] = field(default_factory=dict)  # tenant -> its signing domain
    dkim_canonicalization: str = "relaxed/relaxed"  # c= of the signatures (header/body)
    bounce_suppression: float | None = None  # seconds a recipient bounced as unknown stays suppressed (None: ever)
    list_unsubscribe: frozenset[str] = frozenset()  # tenants whose mail gets List-Unsubscribe fields
