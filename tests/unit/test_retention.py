"""[retention] settings and the times an operator gives `mtad queue purge`. Sync, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from mtad import config
from mtad.base import errors
from mtad.spool import retention

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_the_defaults_keep_a_week_of_messages_and_a_month_of_events(tmp_path: Path) -> None:
    path = tmp_path / "mtad.toml"
    path.write_text("")
    assert config.load(path, environ={}).retention == retention.Settings(
        enabled=True, messages=7 * 86400.0, events=30 * 86400.0, interval=60.0, batch=500, pause=0.0
    )


def test_bad_values_are_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "mtad.toml"
    path.write_text('[retention]\nmessages = "0s"\nevents = "a month"\ninterval = 0\nbatch = 1\npause = "-1s"\n')
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    named = [p.split(":")[0] for p in info.value.problems]
    assert named == [f"[retention] {key}" for key in ("messages", "events", "interval", "batch", "pause")]
    with pytest.raises(errors.ConfigError, match="MTAD_RETENTION_ENABLED: expected true or false"):
        config.load(None, environ={"MTAD_RETENTION_ENABLED": "maybe"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3d", NOW - timedelta(days=3)),
        ("12h30m", NOW - timedelta(hours=12, minutes=30)),
        ("0s", NOW),
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11-01T08:00", datetime(2026, 11, 1, 8, tzinfo=UTC)),
        ("2026-11-01T08:00+01:00", datetime(2026, 11, 1, 8, tzinfo=timezone(timedelta(hours=1)))),
    ],
)
def test_a_time_is_an_iso_date_or_a_duration_ago(text: str, expected: datetime) -> None:
    assert retention.moment(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "3", "2026-13-01", "-3d"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected an ISO date or time"):
        retention.moment(text, NOW)
