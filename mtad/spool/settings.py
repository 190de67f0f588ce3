"""[spool], [node] and [retention]: the spool's sections, declared (mtad.base.settings)."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from mtad.base import errors, values
from mtad.base.settings import key


@dataclass(frozen=True, slots=True)
class Spool:
    """The group commit of accepted messages (spool.commit)."""

    commit_window: float = key(values.duration, "0s", "How long a batch is held open for more messages.")
    commit_max_batch: int = key(values.integer(1, 10_000), 200, "Messages of a batch at most.")
    commit_max_batch_bytes: int = key(values.size, "1MiB", "Octets of a batch's bodies at most.")
    commit_timeout: float = key(values.positive_duration, "15s", "A message not committed in this time gets 451.")
    idempotency_window: float = key(values.positive_duration, "24h", "How long a resubmission is recognised.")


def node_id(value: object) -> str:
    """A node id; "": the host name."""
    text = values.string(value) or socket.gethostname()
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", text):
        raise ValueError(f"{text!r} is not a valid node id (letters, digits, '.', '_', '-')")
    return text


@dataclass(frozen=True, slots=True)
class Node:
    id: str = key(node_id, "", "This node's id in the shared database; empty: the host name.")
    heartbeat_interval: float = key(values.positive_duration, "10s", "How often the node says it is alive.")


@dataclass(frozen=True, slots=True)
class Retention:
    """What the spool no longer needs, deleted in batches (spool.retention)."""

    enabled: bool = key(values.boolean, True, "false: nothing is deleted by this node.")
    messages: float = key(values.positive_duration, "7d", "A message goes this long after it came, once final.")
    events: float = key(values.positive_duration, "30d", "How long an event is kept.")
    interval: float = key(values.positive_duration, "1m", "Between rounds.")
    batch: int = key(values.integer(10, 100_000), 500, "Rows per statement.")
    pause: float = key(values.duration, "0s", "Between two batches.")
    reindex: bool = key(values.boolean, True, "Rebuild the indexes that deleting left mostly empty.")


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's quotas; None: no limit."""

    max_per_hour: int | None = None  # messages accepted in a clock hour
    max_per_day: int | None = None  # messages accepted in a UTC day
    max_queued_bytes: int | None = None  # octets of its messages the spool holds, not final yet

    @property
    def counts_messages(self) -> bool:
        return self.max_per_hour is not None or self.max_per_day is not None


NO_QUOTA = Quota()
TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_tenant_name(name: str) -> str:
    if not TENANT_NAME.match(name):
        raise errors.MtadError(
            f"invalid tenant name {name!r}: 1-64 characters of letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name
