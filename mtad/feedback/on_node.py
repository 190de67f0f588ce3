"""What the feedback layer runs on a node, built from its sections: the event
consumers' handlers (suppression, webhooks' first attempts, non-delivery reports,
reputation), the webhook sender, the reputation metrics, the inbox readers. The
daemon runs `loops` in its TaskGroup and reconfigures it on a reload."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mtad import db
from mtad.base import vault
from mtad.base.tasks import Loop
from mtad.feedback import (
    consumers,
    inbox,
    nondelivery,
    reputation,
    suppression,
    webhook_outbox,
    webhook_sender,
)
from mtad.mailboxes import relay
from mtad.outbound import outcomes


@dataclass(frozen=True, slots=True)
class Sections:
    """What the feedback layer reads of the configuration."""

    suppression: suppression.Settings
    consumers: bool  # [consumers] enabled: this node runs the event consumers
    webhooks: webhook_sender.Settings
    reputation: reputation.Settings
    inbox: inbox.Settings
    relay: relay.Settings  # how the inbox readers log in as the accounts
    hostname: str  # the reports' sender's
    delayed_after: float | None  # a notice of mail still retried this long after it came


@dataclass(slots=True)
class Feedback:
    reputation: reputation.Reputation | None
    loops: list[Loop] = field(default_factory=list)

    def reconfigure(self, sections: Sections) -> None:
        """A reload: the reputation limits (the rest is read anew where it is used)."""
        if self.reputation is not None:
            self.reputation.settings = sections.reputation


def on_node(
    database: db.Database, sections: Sections, node: str, sealer: vault.Vault | None, rules: outcomes.Rules,
    reports_to: Callable[[str], bool],
) -> Feedback:  # fmt: skip
    """The feedback layer of node `node`; `reports_to(tenant)`: whether a tenant's
    senders get non-delivery reports (read at each report: a reload may change it)."""
    sending = None  # webhook requests: written by the outbox consumer, sent by every node
    if sections.webhooks.enabled and sealer is not None:
        sending = webhook_sender.Sender(database, sealer, sections.webhooks, node)
    reporter = nondelivery.Reporter(sections.hostname, reports_to, delayed_after=sections.delayed_after)
    handlers: list[consumers.Handler] = [
        suppression.Suppressor(sections.suppression), webhook_outbox.Outbox(sending), reporter,
    ]  # fmt: skip
    feedback = Feedback(reputation.Reputation(sections.reputation) if sections.reputation.enabled else None)
    if feedback.reputation is not None:
        handlers.append(feedback.reputation)
        feedback.loops.append(("reputation-metrics", reputation.Publisher(database, sections.reputation.publish).run))
    # Each event is handled once per consumer, by whichever node that runs them holds its position.
    if sections.consumers:
        feedback.loops.append(("event-consumers", consumers.Consumers(database, handlers).run))
    if sending is not None:
        feedback.loops.append(("webhooks", sending.run))
    if sections.inbox.enabled and sealer is not None:  # the mailboxes' inboxes: one node reads each
        reading = inbox.Reading(database, relay.Mailboxes(database, sections.relay, sealer), sections.inbox, node,
                                rules=rules)  # fmt: skip
        feedback.loops.append(("inboxes", inbox.Inboxes(reading).run))
    return feedback
