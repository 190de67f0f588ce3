"""The sections of how a node is watched: [http] (/metrics and /healthz), [metrics]
(what is counted beyond the bounded labels) and [log]. Declarations only, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from mtad.base import values
from mtad.base.endpoints import HostPort
from mtad.base.settings import key


@dataclass(frozen=True, slots=True)
class Http:
    listen: HostPort | None = key(
        values.optional_host_port, "127.0.0.1:9108", "Address of /metrics and /healthz; empty: none."
    )


@dataclass(frozen=True, slots=True)
class Metrics:
    """[metrics]: what delivery's outcomes are counted by, beyond the bounded labels."""

    campaign_labels: bool = key(
        values.boolean, False,
        "Count delivery outcomes by campaign too (mtad_delivery_campaign_outcomes): a label with no bound.",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Log:
    format: str = key(
        values.choice("auto", "json", "console"), "auto",
        "auto (console on a terminal, else json), json (one object per line) or console.",
    )  # fmt: skip
    level: str = key(values.choice("debug", "info", "warning", "error"), "info", "debug, info, warning or error.")
