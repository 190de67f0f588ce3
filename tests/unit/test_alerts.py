"""conf/alerts.yml: valid rules for promtool, and the alerts fire on the series of
tests/unit/alerts_test.yml (and stay quiet on the others)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus) missing")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_promtool_accepts_the_rules() -> None:
    checked = promtool("check", "rules", "conf/alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 10 rules found" in checked.stdout


def test_the_alerts_fire_on_the_series_they_are_about() -> None:
    tested = promtool("test", "rules", "tests/unit/alerts_test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
