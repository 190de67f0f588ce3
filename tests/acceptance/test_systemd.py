"""systemd/mtad.service passes `systemd-analyze verify` and keeps its promises."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtad import config

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


def test_the_unit_passes_only_the_configuration_file() -> None:
    """The file is the one source of the spool: the tools, given the same file, reach
    the daemon's (tests/acceptance/test_one_spool.py), where the unit's environment
    would give the daemon one of its own."""
    unit = settings()
    [start] = unit["ExecStart"]
    assert start.split()[1:] == ["run", "--config", "/etc/mtad/mtad.toml"]
    assert not [e for e in unit.get("Environment", []) if e.startswith("MTAD_")]
    assert "EnvironmentFile" not in unit
    # Unset in the reference file, the data directory of a file in /etc/mtad/ is in the StateDirectory.
    assert config.default_data_dir(Path("/etc/mtad/mtad.toml")).parent == Path("/var/lib") / unit["StateDirectory"][0]
    assert "\ndata_dir = " not in (UNIT.parents[1] / "conf" / "mtad.toml").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_has_no_warnings(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at this checkout's mtad.
    mtad = Path(sys.executable).parent / "mtad"
    unit = tmp_path / "mtad.service"
    unit.write_text(UNIT.read_text().replace("/opt/mtad/bin/mtad", str(mtad)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
