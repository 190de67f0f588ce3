"""Every Prometheus metric mtad exports, in one place, each with its help text.

Metrics live in prometheus_client's default registry, next to its process and
platform collectors. Updating one is sync and costs about a microsecond.

A node's submission processes keep their own: `snapshot()` is what one of them
has counted so far, and `exposition()` renders this process's metrics with such
snapshots added in (counters, histograms and the open sessions add up).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from mtad.base.lifecycle import State

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# From a fast path's fraction of a second to [delivery] max_age (5 days).
_WAIT_BUCKETS = (0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 5 * 86400.0)

ACCEPTED = Counter(
    "mtad_submission_accepted_messages",
    "Messages accepted and committed to the spool (a 250 was sent after COMMIT).",
)
ACCEPTED_RECIPIENTS = Counter(
    "mtad_submission_accepted_recipients",
    "Deliveries (one per recipient) created by accepted messages.",
)
DUPLICATES = Counter(
    "mtad_submission_duplicate_messages",
    "Resubmissions recognised by Idempotency-Key or Message-ID and answered with the original queue id.",
)
REJECTED = Counter(
    "mtad_submission_rejected",
    "Commands and messages refused on the submission port, by reason.",
    ["reason"],
)
ACCEPT_LATENCY = Histogram(
    "mtad_submission_accept_seconds",
    "Time from the end of DATA to the 250 reply, including the group commit.",
    buckets=_LATENCY_BUCKETS,
)
SESSIONS = Gauge(
    "mtad_submission_sessions",
    "SMTP sessions open on the submission port.",
)
AUTH_FAILURES = Counter(
    "mtad_submission_auth_failures",
    "Failed AUTH attempts on the submission port.",
)
COMMIT_BATCH = Histogram(
    "mtad_spool_commit_batch_messages",
    "Messages written by one group commit.",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
)
COMMIT_LATENCY = Histogram(
    "mtad_spool_commit_seconds",
    "Duration of one group-commit transaction.",
    buckets=_LATENCY_BUCKETS,
)
COMMIT_FAILURES = Counter(
    "mtad_spool_commit_failures",
    "Group commits that failed, by kind (unavailable, unknown_outcome, error).",
    ["kind"],
)
DELIVERIES = Counter(
    "mtad_delivery_outcomes",
    "Outcomes of delivery attempts, per delivery (recipient), by outcome and provider group.",
    ["outcome", "group"],
)
DELIVERIES_BY_SOURCE = Counter(
    "mtad_delivery_source_outcomes",
    "Outcomes of delivery attempts, per delivery, by outcome and the source address they left from "
    "(-: none bound, or none reached).",
    ["outcome", "source"],
)
DELIVERIES_BY_CAMPAIGN = Counter(
    "mtad_delivery_campaign_outcomes",
    "Outcomes of delivery attempts, per delivery, by outcome, tenant and campaign ([metrics] campaign_labels).",
    ["outcome", "tenant", "campaign"],
)
DELIVERIES_BY_TENANT = Counter(
    "mtad_delivery_tenant_outcomes",
    "Outcomes of delivery attempts, per delivery, by outcome and tenant.",
    ["outcome", "tenant"],
)
QUEUE_WAIT = Histogram(
    "mtad_delivery_queue_wait_seconds",
    "Time from accept to the start of a delivery's first attempt, by provider group (other: no provider's).",
    ["group"],
    buckets=_WAIT_BUCKETS,
)
DELIVERY_LATENCY = Histogram(
    "mtad_delivery_latency_seconds",
    "Time from accept to a delivery's final outcome (delivered, bounced, failed), by outcome and provider "
    "group (other: no provider's).",
    ["outcome", "group"],
    buckets=_WAIT_BUCKETS,
)
BOUNCE_REASONS = Counter(
    "mtad_bounce_reasons",
    "Deliveries not delivered, per delivery and reply, by reason (mtad.base.reasons: userunknown, mailboxfull, "
    "blocked, ...), provider group (other: none of the providers') and kind (bounced or deferred in the SMTP "
    "session; async: a failure reported after the 250, delay notices not counted).",
    ["reason", "group", "kind"],
)
ATTEMPT_LATENCY = Histogram(
    "mtad_delivery_attempt_seconds",
    "Duration of one delivery attempt (one SMTP transaction, connection set-up included), by provider group.",
    ["group"],
    buckets=_LATENCY_BUCKETS,
)
TLS_POLICY_SESSIONS = Counter(
    "mtad_tls_policy_sessions",
    "SMTP sessions opened under a recipient domain's TLS policy, by policy (sts, tlsa) and result "
    "(success, or a result type of RFC 8460: starttls-not-supported, certificate-host-mismatch, ...).",
    ["policy", "result"],
)
SESSIONS_REUSED = Counter(
    "mtad_delivery_sessions_reused",
    "Transactions sent over an SMTP session opened for an earlier one, by provider group.",
    ["group"],
)
OUTBOUND_SESSIONS = Gauge(
    "mtad_delivery_sessions_open",
    "Outbound SMTP sessions open, by the provider group they were opened for.",
    ["group"],
)
LEASED = Counter(
    "mtad_delivery_leased",
    "Deliveries leased from the queue by this node (the accept path's fast path not included).",
)
REAPED = Counter(
    "mtad_delivery_leases_reaped",
    "Expired leases (of any node) this node returned to the queue.",
)
BUCKET_RATE = Gauge(
    "mtad_shaping_rate",
    "This node's share of a bucket's rate, messages per second (+Inf: unlimited), by provider group and source.",
    ["group", "source"],
)
BUCKET_TOKENS = Gauge(
    "mtad_shaping_tokens",
    "Tokens in this node's share of a bucket, by provider group and source address.",
    ["group", "source"],
)
BUCKET_SESSIONS_OPEN = Gauge(
    "mtad_shaping_sessions_open",
    "Attempts in flight under a bucket on this node, by provider group and source address.",
    ["group", "source"],
)
BUCKET_SESSIONS_ALLOWED = Gauge(
    "mtad_shaping_sessions_allowed",
    "This node's share of a bucket's session cap, by provider group and source address.",
    ["group", "source"],
)
BUCKET_DECREASES = Counter(
    "mtad_shaping_decreases",
    "Multiplicative decreases of a bucket (the receiver throttled us), by provider group and source address.",
    ["group", "source"],
)
BUCKET_INCREASES = Counter(
    "mtad_shaping_increases",
    "Additive increases of a bucket (a run of deliveries), by provider group and source address.",
    ["group", "source"],
)
EGRESS_CHOICES = Counter(
    "mtad_egress_choices",
    "Source addresses chosen from a pool, by pool and kind (ordinary; spill: past a full warming address; "
    "fallback: nothing was eligible, the pool's primary was used).",
    ["pool", "kind"],
)
ACCOUNT_SENDS = Counter(
    "mtad_account_sends",
    "Sends relayed through sending accounts, by what became of the reservation and of the account",
    ["pool", "slot", "effect"],
)
ACCOUNT_STATE_CHANGES = Counter(
    "mtad_account_state_changes",
    "Sending accounts moved to a state by mtad (cooling, parked, tripped, resting: its health fell below the "
    "pool's health_floor, ...)",
    ["pool", "state"],
)
ACCOUNT_POOL_PAUSED = Gauge(
    "mtad_account_pool_paused", "1 while no account of the pool can send (its mail waits)", ["pool"]
)
CAMPAIGNS_POOL_PAUSED = Gauge(
    "mtad_campaigns_pool_paused",
    "Campaigns that paused themselves because no account of the pool can send, as this node paused them",
    ["pool"],
)
DKIM_KEYS = Gauge("mtad_dkim_keys", "DKIM keys by state (pending, active, retiring, revoked)", ["state"])
DKIM_AWAITING_DNS = Gauge(
    "mtad_dkim_keys_awaiting_dns", "Pending DKIM keys whose record DNS does not publish yet (publish it: mtad dkim ls)"
)
EVENTS_CONSUMED = Counter("mtad_events_consumed", "Events an event consumer has processed", ["consumer"])
CONSUMER_LAG = Gauge(
    "mtad_event_consumer_lag_seconds",
    "Age of the oldest event a consumer has still to process (0: caught up), as of the last look",
    ["consumer"],
)
CONSUMER_FAILURES = Counter(
    "mtad_event_consumer_failures", "Batches an event consumer failed to process (retried)", ["consumer"]
)
INBOUND_REPORTS = Counter(
    "mtad_inbound_reports", "Reports received on the inbound listener, by kind and outcome", ["kind", "outcome"]
)
INBOX_MESSAGES = Counter(
    "mtad_inbox_messages", "Messages read from the sending mailboxes' inboxes, by kind and outcome", ["kind", "outcome"]
)
INBOX_FAILURES = Counter(
    "mtad_inbox_failures", "IMAP sessions to the sending mailboxes' inboxes that failed", ["account"]
)
WEBHOOKS_SENT = Counter(
    "mtad_webhooks_sent", "Webhook requests by endpoint and outcome (delivered, failed, dead)", ["endpoint", "outcome"]
)
TENANT_PAUSED = Gauge(
    "mtad_tenant_paused", "1 while a tenant is paused, by who paused it (auto, operator)", ["tenant", "by"]
)
TENANT_PROBATION = Gauge("mtad_tenant_probation", "1 while a tenant is on probation", ["tenant"])
QUOTA_REFUSALS = Counter(
    "mtad_tenant_quota_refusals", "Messages refused for a tenant's quota (hour, day, queued_bytes)", ["tenant", "quota"]
)
REPUTATION = Gauge(
    "mtad_reputation",
    "Outcomes in the sliding windows (1h, 24h) by scope (tenant, provider, source) and key",
    ["scope", "key", "window", "outcome"],
)
DB_POOL_CONNECTIONS = Gauge(
    "mtad_db_pool_connections",
    "Connections of the daemon's PostgreSQL pools, by pool (main, delivery) and state (in_use, idle), "
    "as of the last scrape.",
    ["pool", "state"],
)
DB_POOL_MAX = Gauge(
    "mtad_db_pool_max_connections",
    "Connections a PostgreSQL pool of the daemon opens at most ([database] pool_size), by pool.",
    ["pool"],
)
SPOOL_DEPTH = Gauge(
    "mtad_spool_deliveries",
    "Deliveries in the spool by state, as of the last scrape.",
    ["state"],
)


def provider(group: str | None) -> str:
    """A provider group as a bounded label: a receiver of no provider group (routing
    names it mx:HOSTS, one per set of MX hosts), or none, counts as `other`."""
    if group is None or group.startswith("mx:"):
        return "other"
    return group


def set_spool_depth(counts: dict[str, int]) -> None:
    """Set the depth gauge for every state, zero for states with no rows."""
    for state in State:
        SPOOL_DEPTH.labels(state=state.value).set(counts.get(state.value, 0))


class Pool(Protocol):
    """A connection pool as the pool gauges read it (db.Database)."""

    @property
    def name(self) -> str: ...

    def use(self) -> tuple[int, int, int]:
        """Connections in use, idle, and at most. Sync, no I/O."""
        ...


_watched: list[Pool] = []


def watch_pools(pools: Sequence[Pool]) -> None:
    """The pools exposition() reads into the pool gauges from now on: the daemon's
    (a submission process's pools are its own, not the node's)."""
    _watched[:] = pools


def set_pool_use() -> None:
    """The pool gauges as the watched pools are now; a pool no longer watched has none."""
    DB_POOL_CONNECTIONS.clear()
    DB_POOL_MAX.clear()
    for pool in _watched:
        in_use, idle, most = pool.use()
        DB_POOL_CONNECTIONS.labels(pool=pool.name, state="in_use").set(in_use)
        DB_POOL_CONNECTIONS.labels(pool=pool.name, state="idle").set(idle)
        DB_POOL_MAX.labels(pool=pool.name).set(most)


# --- several processes ------------------------------------------------------------

# (family, its type, sample name, labels as sorted pairs, value): one sample of another process.
Counted = tuple[str, str, str, tuple[tuple[str, str], ...], float]
_OWN = "mtad_"
CUMULATIVE = ("counter", "histogram")  # the types whose counts stay once their process is gone


def snapshot() -> list[Counted]:
    """This process's mtad samples (no `_created` ones), as another process adds
    them to its own when it renders them. Sync, no I/O."""
    taken: list[Counted] = []
    for family in REGISTRY.collect():
        if family.name.startswith(_OWN):
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    labels = tuple(sorted(sample.labels.items()))
                    taken.append((family.name, family.type, sample.name, labels, sample.value))
    return taken


def exposition(others: Iterable[Sequence[Counted]] = ()) -> bytes:
    """The text format of this process's metrics, each sample plus the same sample
    of the other processes; samples only they have are added to their family. The
    pool gauges are read first."""
    set_pool_use()
    extra: defaultdict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = defaultdict(dict)
    for taken in others:
        for family, _, name, labels, value in taken:
            into = extra[family]
            into[(name, labels)] = into.get((name, labels), 0.0) + value
    if not extra:
        return generate_latest(REGISTRY)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Summed(extra))
    return generate_latest(registry)


class _Summed:
    """REGISTRY's families with other processes' samples added (a collector)."""

    def __init__(self, extra: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]) -> None:
        self._extra = extra

    def collect(self) -> Iterator[Metric]:
        for family in REGISTRY.collect():
            extra = dict(self._extra.get(family.name, {}))
            if extra:
                summed = []
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    summed.append(sample._replace(value=sample.value + extra.pop(key, 0.0)))
                summed += [Sample(name, dict(labels), value) for (name, labels), value in extra.items()]
                family.samples = summed
            yield family
