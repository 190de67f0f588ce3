"""Event records for the append-only `events` table.

An event is written in the same transaction as the state change it reports, by
the module that owns that transaction; consumers (suppression, webhooks,
reputation) read the table in id order. Sync, no I/O.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Kind(enum.StrEnum):
    """Every kind of event; tests/integration/test_sql_lifecycle.py checks that the SQL writes no other."""

    RECEIVED = "received"  # a message and its deliveries were accepted
    DELIVERED = "delivered"
    DEFERRED = "deferred"
    BOUNCED = "bounced"  # in the SMTP session, or after a 250 (a DSN: "async": true)
    FAILED = "failed"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"  # a lease expired or was released
    UNKNOWN = "unknown"  # a relayed send may have gone out: held, not sent again until known
    HELD = "held"  # an operator put it on hold (`mtad queue hold`); a release is a requeued event
    ACCOUNT_STATE = "account_state"  # a sending account moved from one state to another
    ACCOUNT_FAILURE = "account_failure"  # a send failed on the account's side (the breaker counts these)
    ACCOUNT_BOUNCE = "account_bounce"  # a send was refused for its recipient or content (its health drops)
    ACCOUNT_POOL = "account_pool"  # an account pool paused (no account can send) or resumed
    DKIM_KEY = "dkim_key"  # a DKIM key was generated or changed state
    # What comes back after delivery; each names the original message and delivery when it can.
    COMPLAINED = "complained"  # a feedback-loop report (ARF): the recipient called it spam
    AUTH_FAILURE = "auth_failure"  # an ARF auth-failure report (RFC 6591): a DMARC failure, no complaint
    UNSUBSCRIBED = "unsubscribed"  # the recipient asked for no more (one-click, or mailto)
    REPLIED = "replied"  # a person answered
    AUTO_REPLIED = "auto_replied"  # an automatic answer (out of office, RFC 3834)
    OPENED = "opened"  # a tracked message's image was fetched ("machine": true when not by a person)
    CLICKED = "clicked"  # a tracked link was followed ("url"; "machine" as opened)
    # A tenant's state (mtad.spool.tenants); no message.
    TENANT_PAUSED = "tenant_paused"  # by an operator, or by its complaint or bounce rate ("by": "auto")
    TENANT_RESUMED = "tenant_resumed"
    TENANT_GRADUATED = "tenant_graduated"  # off probation: enough mail sent within the rates
    # A campaign's state (mtad.spool.campaigns), by an operator; no message.
    CAMPAIGN_PAUSED = "campaign_paused"
    CAMPAIGN_RESUMED = "campaign_resumed"
    CAMPAIGN_CANCELLED = "campaign_cancelled"


@dataclass(frozen=True, slots=True)
class Event:
    kind: Kind
    tenant: str
    message: uuid.UUID | None = None
    delivery: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def data_json(self) -> str:
        return encode(self.data)


# An event's data as stored: compact JSON, anything JSON cannot say as its str().
# One encoder for every writer of events (json.dumps with options makes one per call).
encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
