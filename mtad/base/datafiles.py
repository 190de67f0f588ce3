"""Reading the TOML files mtad is configured with. Blocking file I/O; read at load."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from mtad.base import errors


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed document; ConfigError naming the file when it cannot be read or parsed."""
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise errors.ConfigError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise errors.ConfigError([f"{path}: not valid TOML: {exc}"]) from None
