"""Opens and clicks that a machine made, told from people's: marked, never dropped.

- Apple Mail Privacy Protection fetches every image of a message through Apple's
  proxies as it arrives, whether or not anyone reads it: a fetch from
  `machine_networks` (by default Apple's own 17.0.0.0/8), or an open whose
  User-Agent is the proxies' bare "Mozilla/5.0".
- Security scanners (Microsoft Defender's Safe Links, Proofpoint, Mimecast,
  Barracuda) follow every link of a message within seconds of its delivery: a
  click less than `scanner_window` after the delivery, or less than
  `burst_window` after another click of the same delivery; a request made with
  HEAD; a User-Agent that names a scanner, a bot or an HTTP library.
- Prefetchers (mailbox providers' image proxies fetching at arrival): an open less
  than `prefetch_window` after the delivery.
Sync, no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from mtad.base import values
from mtad.feedback import settings
from mtad.feedback.tracking import Kind

MPP_AGENT = "Mozilla/5.0"  # the whole User-Agent of Apple's Mail Privacy Protection proxies
# Words of a User-Agent (lower case) that only a machine's has.
MACHINE_AGENTS = ("bot", "spider", "crawler", "scanner", "python-requests", "curl/", "wget/", "go-http-client",
                  "java/", "okhttp", "headlesschrome", "barracuda", "mimecast", "proofpoint", "safelinks")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Fetch:
    """One request of a tracking link, and what is known of its delivery."""

    kind: Kind
    at: datetime
    address: str | None  # the client's IP address
    user_agent: str
    head: bool = False  # a HEAD request
    delivered_at: datetime | None = None
    last_click: datetime | None = None  # the delivery's last click recorded before this one


def machine(fetch: Fetch, rules: settings.Tracking) -> str | None:
    """Why the fetch is a machine's ("apple_privacy_proxy", "network", "scanner",
    "prefetch", "user_agent", "head"), or None: a person's, as far as can be told."""
    if fetch.address is not None and within(fetch.address, rules.machine_networks):
        return "apple_privacy_proxy" if within(fetch.address, (_APPLE,)) else "network"
    agent = fetch.user_agent.strip()
    if fetch.kind is Kind.OPEN and agent == MPP_AGENT:
        return "apple_privacy_proxy"
    if fetch.head:
        return "head"
    if not agent or any(word in agent.lower() for word in MACHINE_AGENTS):
        return "user_agent"
    since = (fetch.at - fetch.delivered_at).total_seconds() if fetch.delivered_at is not None else None
    if fetch.kind is Kind.CLICK:
        if since is not None and since < rules.scanner_window:
            return "scanner"
        if fetch.last_click is not None and (fetch.at - fetch.last_click).total_seconds() < rules.burst_window:
            return "scanner"
    elif since is not None and since < rules.prefetch_window:
        return "prefetch"
    return None


_APPLE = ipaddress.ip_network("17.0.0.0/8")


def within(address: str, networks: Sequence[values.Network]) -> bool:
    """Whether an IP address (as text) is in one of `networks`; False for one that is not an address."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)
