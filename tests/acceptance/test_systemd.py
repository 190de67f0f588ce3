"""systemd/mtad.service passes `systemd-analyze verify` and keeps its promises."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).parents[2] / "systemd" / "mtad.service"


def settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_is_hardened_and_notifies() -> None:
    unit = settings()
    assert unit["Type"] == ["notify"]
    assert unit["User"] == ["mtad"]
    assert unit["ExecStart"][0].endswith("mtad run --config /etc/mtad/mtad.toml")
    for key, value in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes"),
                       ("StateDirectory", "mtad"), ("CapabilityBoundingSet", "CAP_NET_BIND_SERVICE")]:  # fmt: skip
        assert unit[key] == [value], key
    assert int(unit["LimitNOFILE"][0]) >= 65536
    assert "MTAD_DATABASE_DATA_DIR=/var/lib/mtad/pgdata" in unit["Environment"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_has_no_warnings(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at this checkout's mtad.
    mtad = Path(sys.executable).parent / "mtad"
    unit = tmp_path / "mtad.service"
    unit.write_text(UNIT.read_text().replace("/opt/mtad/bin/mtad", str(mtad)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
