"""[database], declared (mtad.base.settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtad.base import values
from mtad.base.settings import key

CONNECT_TIMEOUT = 5.0  # seconds to connect to PostgreSQL, or to take a pooled connection


@dataclass(frozen=True, slots=True)
class Database:
    dsn: str | None = key(values.optional_string, "", "PostgreSQL connection string; empty: the embedded one.")
    # "": found beside the configuration file (config.default_data_dir)
    data_dir: Path = key(values.path, "", "The embedded PostgreSQL's data directory.",
                         factory=lambda: Path("var") / "pgdata")  # fmt: skip
    pool_size: int = key(values.integer(2, 500), 10, "Connections in mtad's pool.")
    wait: float = key(values.positive_duration, "30s", "How long a tool waits for the embedded PostgreSQL.")
