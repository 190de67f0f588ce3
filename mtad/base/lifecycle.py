"""The delivery state machine, as a table.

`State` mirrors the Postgres enum `delivery_state` and `Reason` mirrors
`delivery_reason` (migrations/0001_spool.sql); tests/unit/test_lifecycle.py and
tests/integration/test_schema.py check that they agree. Sync, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from mtad.base import errors


class State(enum.StrEnum):
    QUEUED = "queued"  # waiting for next_attempt_at; leasable
    LEASED = "leased"  # owned by lease_owner until lease_expires_at
    DEFERRED = "deferred"  # a transient outcome; due again at next_attempt_at
    DELIVERED = "delivered"  # the receiver said 2xx (final)
    BOUNCED = "bounced"  # permanent reply, older than max age, or bounced by an operator (final)
    FAILED = "failed"  # non-SMTP failure after repeated tries: dead letter (final)
    CANCELLED = "cancelled"  # suppressed, cancelled by tenant or admin (final)
    # Its send through a sending mailbox may have gone out and nobody knows: not sent
    # again until found in the mailbox's Sent folder, its wait ends, or an operator retries.
    UNKNOWN = "unknown"
    # Kept from every attempt by an operator (`mtad queue hold`) until released (`release`).
    HELD = "held"


class Reason(enum.StrEnum):
    """Why a delivery was deferred, bounced, failed, cancelled or requeued."""

    THROTTLED = "throttled"  # the receiver asked us to slow down (421, 4.7.x)
    MX_TEMPFAIL = "mx_tempfail"  # a transient reply from the receiver
    DNS_TEMPFAIL = "dns_tempfail"  # SERVFAIL or timeout resolving the route
    CONNECT_FAILED = "connect_failed"  # no MX host accepted a connection
    TLS_FAILED = "tls_failed"  # STARTTLS failed or was required and absent
    TIMEOUT = "timeout"  # the receiver stopped answering
    DISCONNECTED = "disconnected"  # the connection dropped mid-transaction
    RECIPIENT_REJECTED = "recipient_rejected"  # 5.1.x: no such mailbox
    CONTENT_REJECTED = "content_rejected"  # 5.7.x policy or content refusal
    PERMANENT_REPLY = "permanent_reply"  # any other 5xx
    NO_ROUTE = "no_route"  # NXDOMAIN, null MX, no address at all
    EXPIRED = "expired"  # older than max age
    LEASE_EXPIRED = "lease_expired"  # the owning node stopped renewing
    RELEASED = "released"  # handed back unstarted at shutdown
    MAILBOX_COOLDOWN = "mailbox_cooldown"  # the sending mailbox must wait
    SUPPRESSED = "suppressed"  # the recipient is on the suppression list
    ADMIN = "admin"  # an operator acted on it
    INTERNAL = "internal"  # mtad itself failed (never counts as throttling)
    RECLAIMED = "reclaimed"  # its node started again after its previous life died holding it
    ASYNC_BOUNCE = "async_bounce"  # a hard bounce came back after the receiver's 250
    MAYBE_SENT = "maybe_sent"  # a relayed send may have gone out (a crash, a connection lost after the data)


TRANSITIONS: Mapping[State, frozenset[State]] = {
    # A waiting delivery may be cancelled, bounced or held by an operator (`mtad queue
    # cancel`, `bounce`, `hold`: reason admin), or cancelled at accept (suppressed); one in flight may not.
    State.QUEUED: frozenset({State.LEASED, State.CANCELLED, State.BOUNCED, State.HELD}),
    # A leased delivery found suppressed just before its attempt is cancelled, unsent.
    # A relayed send that may have gone out is held unknown, never sent again unseen.
    # An operator's hold takes one whose attempt has not begun from its node's lease.
    State.LEASED: frozenset(
        {
            State.DELIVERED,
            State.DEFERRED,
            State.BOUNCED,
            State.FAILED,
            State.QUEUED,
            State.CANCELLED,
            State.UNKNOWN,
            State.HELD,
        }
    ),
    State.DEFERRED: frozenset({State.QUEUED, State.LEASED, State.CANCELLED, State.BOUNCED, State.HELD}),
    # A receiver that said 250 may bounce the message later (a DSN that comes back).
    State.DELIVERED: frozenset({State.BOUNCED}),
    State.BOUNCED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
    # Found in the mailbox's Sent folder; not found once its wait is over, or retried by
    # an operator (sent again); or cancelled by an operator.
    State.UNKNOWN: frozenset({State.DELIVERED, State.QUEUED, State.CANCELLED}),
    # Released (queued, due now), or cancelled or bounced by an operator.
    State.HELD: frozenset({State.QUEUED, State.CANCELLED, State.BOUNCED}),
}

# No attempt follows: the delivery is done (a delivered one may still be bounced later).
FINAL: frozenset[State] = frozenset({State.DELIVERED, State.BOUNCED, State.FAILED, State.CANCELLED})

# Moves that must say why.
_NEEDS_REASON = frozenset(
    {
        (State.LEASED, State.DEFERRED),
        (State.LEASED, State.BOUNCED),
        (State.LEASED, State.FAILED),
        (State.LEASED, State.QUEUED),
        (State.LEASED, State.CANCELLED),
        (State.QUEUED, State.CANCELLED),
        (State.QUEUED, State.BOUNCED),
        (State.DEFERRED, State.CANCELLED),
        (State.DEFERRED, State.BOUNCED),
        (State.DELIVERED, State.BOUNCED),
        (State.LEASED, State.UNKNOWN),
        (State.UNKNOWN, State.CANCELLED),
        (State.QUEUED, State.HELD),
        (State.DEFERRED, State.HELD),
        (State.LEASED, State.HELD),
        (State.HELD, State.CANCELLED),
        (State.HELD, State.BOUNCED),
    }
)


def can_move(old: State, new: State) -> bool:
    return new in TRANSITIONS[old]


# Moves made for one reason only: a delivery in hand is cancelled only when found
# suppressed just before its attempt (never by an operator under the sender), a
# delivered one bounced only when its bounce comes back, and one held unknown only
# when its relayed send may have gone out; one in hand is held only by an operator.
ONLY_FOR: Mapping[tuple[State, State], Reason] = {
    (State.LEASED, State.CANCELLED): Reason.SUPPRESSED,
    (State.DELIVERED, State.BOUNCED): Reason.ASYNC_BOUNCE,
    (State.LEASED, State.UNKNOWN): Reason.MAYBE_SENT,
    (State.UNKNOWN, State.CANCELLED): Reason.ADMIN,
    (State.LEASED, State.HELD): Reason.ADMIN,
}


def transition(old: State, new: State, reason: Reason | None = None) -> State:
    """Return `new` if the table allows old -> new for `reason`, else raise IllegalTransition."""
    if new not in TRANSITIONS[old]:
        raise errors.IllegalTransition(f"{old} -> {new} is not allowed")
    if reason is None and (old, new) in _NEEDS_REASON:
        raise errors.IllegalTransition(f"{old} -> {new} needs a reason")
    only = ONLY_FOR.get((old, new))
    if only is not None and reason is not only:
        raise errors.IllegalTransition(f"{old} -> {new} is only for reason {only}")
    return new
