"""What comes back, and what acts on it: the feedback package's sections, declared
(mtad.base.settings). suppression.Settings and inbox.Settings are these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mtad.base import values
from mtad.base.endpoints import HostPort
from mtad.base.settings import key

_ADDRESSES = values.list_of(values.host_port, allow_empty=True)


@dataclass(frozen=True, slots=True)
class Suppression:
    bounce_expiry: float | None = key(values.optional_duration, "", "How long a bounce suppresses; empty: ever.")
    soft_after: int = key(values.integer(0, 1000), 3, "Soft bounces within soft_window that suppress (0: never).")
    soft_window: float = key(values.positive_duration, "30d", "The window of soft_after.")


@dataclass(frozen=True, slots=True)
class Consumers:
    """The event consumers (suppression, webhooks, reports, reputation) on this node."""

    enabled: bool = key(values.boolean, True, "false: this node runs no event consumer (another node does).")


@dataclass(frozen=True, slots=True)
class Reputation:
    """The windows of outcomes, the auto-pause and probation ([tenants] sets the limits)."""

    enabled: bool = key(values.boolean, True, "false: nothing is counted, no tenant is paused or graduates.")
    publish: float = key(values.positive_duration, "30s", "How often the windows' metrics are read again.")


@dataclass(frozen=True, slots=True)
class Reports:
    """The non-delivery reports to envelope senders."""

    delayed_after: float | None = key(values.optional_duration, "", "A notice of mail deferred this long; empty: none.")


@dataclass(frozen=True, slots=True)
class Bounces:
    domain: str | None = key(values.optional_domain, "", "The domain of the VERP senders of MX mail; empty: no VERP.")
    key_file: Path | None = key(values.optional_path, "", "The key of their HMAC.")
    make: bool = False  # key_file is mtad's own (embedded database, no key named): made when missing


@dataclass(frozen=True, slots=True)
class Inbound:
    listen: tuple[HostPort, ...] = key(_ADDRESSES, [], "The SMTP listener for bounces and complaints; []: none.")
    complaints: str | None = key(values.optional_address, "", "The address the feedback loops send reports to.")
    max_message_size: int = key(values.size, "10MiB", "Largest message taken.")
    max_per_minute: int = key(values.integer(1, 1_000_000), 600, "Messages a client IP may start in a minute.")


@dataclass(frozen=True, slots=True)
class Inbox:
    """How the sending mailboxes' inboxes are read over IMAP."""

    enabled: bool = key(values.boolean, True, "false: this node reads no inbox (another does).")
    poll: float = key(values.positive_duration, "60s", "Between reads without IDLE, and looks in the Sent folder.")
    idle: float = key(values.positive_duration, "10m", "An IDLE is renewed this often.")
    lease: float = key(values.positive_duration, "60s", "A node's hold on an inbox, renewed every third of it.")
    timeout: float = key(values.positive_duration, "60s", "One IMAP command.")
    max_message_size: int = key(values.size, "1MiB", "Octets fetched of a message.")
    mark_seen: bool = key(values.boolean, False, "Mark the reports and automatic replies read as \\Seen.")


@dataclass(frozen=True, slots=True)
class Webhooks:
    """How the tenants' webhook requests are sent."""

    enabled: bool = key(values.boolean, True, "false: this node sends no webhook request (another does).")
    timeout: float = key(values.positive_duration, "10s", "One request, answer included.")
    max_response: int = key(values.size, "64KiB", "Octets of an answer read.")
    retry_base: float = key(values.positive_duration, "5s", "Before the first retry; doubling.")
    retry_max: float = key(values.positive_duration, "1h", "Between two retries at most.")
    max_age: float = key(values.positive_duration, "24h", "After the event, a failing request is given up.")
    per_endpoint: int = key(values.integer(1, 1000), 4, "Requests in flight to one endpoint.")
    in_flight: int = key(values.integer(1, 10_000), 64, "Requests in flight from this node.")
    first_wait: float = key(values.duration, "2s", "The consumer's wait for first attempts (0: all by the outbox).")
    poll: float = key(values.positive_duration, "1s", "Between looks for due requests.")
    allow_networks: tuple[values.Network, ...] = key(values.list_of(values.network, allow_empty=True), [],
                                                     "Inside networks an endpoint may resolve to.")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    listen: tuple[HostPort, ...] = key(_ADDRESSES, [], "The public one-click endpoint; []: none on this node.")
    url: str | None = key(values.https_url, "", "Its public base URL, https; empty: no List-Unsubscribe.")
    key_file: Path | None = key(values.optional_path, "", "The HMAC key of the links' tokens.")
    make: bool = False  # key_file is mtad's own (embedded database, no key named): made when missing


# Apple's own network (AS714, 17.0.0.0/8), where Mail Privacy Protection's proxies fetch from.
APPLE_NETWORKS = ["17.0.0.0/8"]


@dataclass(frozen=True, slots=True)
class Tracking:
    """Opens and clicks of the tenants that turn them on ([tenants."NAME"] track_opens,
    track_clicks), answered by the [unsubscribe] listener, tokens under its key."""

    url: str | None = key(values.https_url, "", "The public https base of /o/ and /c/; empty: no tracking.")
    scanner_window: float = key(values.duration, "30s", "A click this soon after delivery is a machine's.")
    burst_window: float = key(values.duration, "2s", "A click this soon after another of the delivery's: a machine's.")
    prefetch_window: float = key(values.duration, "10s", "An open this soon after delivery is a machine's.")
    machine_networks: tuple[values.Network, ...] = key(values.list_of(values.network, allow_empty=True),
                                                       APPLE_NETWORKS, "Fetches from these are machines'.")  # fmt: skip
    proxies: tuple[values.Network, ...] = key(values.list_of(values.network, allow_empty=True), [],
                                              "Proxies whose X-Forwarded-For is believed.")  # fmt: skip


def problems(leaving: Unsubscribe, tracking: Tracking, *, listing: list[str], tracked: list[str]) -> list[str]:
    """What is missing for the tenants that want List-Unsubscribe (`listing`) or
    tracking (`tracked`): the URLs, and the key that signs both kinds of token."""
    found = []
    if (leaving.url is not None or leaving.listen or tracking.url is not None) and leaving.key_file is None:
        found.append(
            "[unsubscribe] key_file: with a DSN, name the key of the unsubscribe links' and tracking "
            "links' tokens (make one: mtad accounts key > FILE)"
        )
    if listing and leaving.url is None:
        found.append(
            f"[unsubscribe] url: tenants {', '.join(listing)} ask for list_unsubscribe; give the "
            "public https URL of the one-click endpoint"
        )
    if tracked and tracking.url is None:
        found.append(
            f"[tracking] url: tenants {', '.join(tracked)} ask for track_opens or track_clicks; give the "
            "public https URL of the tracking host (served by the [unsubscribe] listener)"
        )
    return found


_INBOUND = Inbound()


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundPort:
    listen: tuple[HostPort, ...]
    bounce_domain: str | None  # None: no bounce address is taken (but the VERP domain's, when VERP is on)
    complaints: str | None  # the address feedback loops send their reports to (None: none)
    max_message_size: int = _INBOUND.max_message_size
    max_per_minute: int = _INBOUND.max_per_minute  # messages a client IP address may start in any minute
    hostname: str


_WEBHOOKS = Webhooks()


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookSending:
    """[webhooks]: how the requests are sent (the keys' defaults are the declared ones)."""

    enabled: bool = _WEBHOOKS.enabled  # this node sends webhook requests
    timeout: float = _WEBHOOKS.timeout  # seconds for one request, answer included
    max_response: int = _WEBHOOKS.max_response  # octets of an answer read
    retry_base: float = _WEBHOOKS.retry_base  # seconds before the first retry; doubling
    retry_max: float = _WEBHOOKS.retry_max  # seconds between retries at most
    max_age: float = _WEBHOOKS.max_age  # seconds after the event a failing request is given up (dead)
    per_endpoint: int = _WEBHOOKS.per_endpoint  # requests in flight to one endpoint at most
    in_flight: int = _WEBHOOKS.in_flight  # requests in flight from this node at most
    poll: float = _WEBHOOKS.poll  # seconds between looks for due requests
    lease: float = 60.0  # seconds a node holds a request it sends
    allow_networks: tuple[values.Network, ...] = _WEBHOOKS.allow_networks  # inside addresses an endpoint may have
    first_wait: float = _WEBHOOKS.first_wait  # seconds the consumer waits for first attempts; 0: all written


@dataclass(frozen=True, slots=True)
class Guard:
    """A tenant's limits ([tenants] and [tenants."NAME"])."""

    max_complaint_rate: float = 0.003  # the bulk-sender threshold Gmail and Yahoo publish
    max_bounce_rate: float = 0.05
    min_volume: int = 1000  # deliveries in a window before its rates count
    graduate_after: int = 1000  # deliveries on probation before it ends


_REPUTATION = Reputation()


@dataclass(frozen=True, slots=True)
class Guarding:
    enabled: bool = _REPUTATION.enabled  # false: nothing is counted, no tenant is paused or graduates by itself
    default: Guard = Guard()
    tenants: Mapping[str, Guard] = field(default_factory=dict)
    publish: float = _REPUTATION.publish  # seconds between updates of the windows' metrics

    def guard(self, tenant: str) -> Guard:
        return self.tenants.get(tenant, self.default)
