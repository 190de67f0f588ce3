"""[admin]: where the admin API and the status page listen, and the file of their token.
A declaration only, no I/O (config reads the token file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtad.base import values
from mtad.base.endpoints import HostPort
from mtad.base.settings import key


@dataclass(frozen=True, slots=True)
class Admin:
    listen: HostPort = key(values.host_port, "127.0.0.1:9110", "Address of the admin HTTP API.")
    token_file: Path | None = key(values.optional_path, "", "The file of its bearer token; empty: no admin API.")
    token: str | None = None  # read from token_file when the configuration is loaded
