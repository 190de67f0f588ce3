"""The JSON log records: stable keys, an ISO UTC timestamp, exceptions rendered."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from mtad import log


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    yield
    log.configure("json", "info")  # back to stdout for the tests that follow


def records(emit: object) -> list[dict[str, object]]:
    stream = io.StringIO()
    log.configure("json", "info", stream=stream)
    assert callable(emit)
    emit()
    log.flush()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_record_has_its_keys_a_level_and_a_utc_timestamp() -> None:
    before = datetime.now(UTC)
    [record] = records(lambda: structlog.get_logger().info("delivered", delivery=7, reply=None))
    assert {k: record[k] for k in ("event", "delivery", "reply", "level")} == {
        "event": "delivered",
        "delivery": 7,
        "reply": None,
        "level": "info",
    }
    stamp = str(record["timestamp"])
    assert stamp.endswith("Z")
    assert len(stamp) == len("2026-01-01T00:00:00.000000Z")
    at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert before - timedelta(seconds=1) <= at <= datetime.now(UTC)


def test_levels_are_named_as_structlog_names_them() -> None:
    def emit() -> None:
        logger = structlog.get_logger()
        logger.warning("w")
        logger.error("e")
        logger.debug("hidden at info")

    assert [r["level"] for r in records(emit)] == ["warning", "error"]


def test_an_exception_is_rendered_into_the_record() -> None:
    def emit() -> None:
        try:
            raise ValueError("broken")
        except ValueError:
            structlog.get_logger().exception("failed")

    [record] = records(emit)
    assert record["level"] == "error"
    assert "ValueError: broken" in str(record["exception"])


def test_standard_library_records_share_the_format() -> None:
    [record] = records(lambda: logging.getLogger("mtad.test").warning("from %s", "stdlib"))
    assert (record["event"], record["level"], record["logger"]) == ("from stdlib", "warning", "mtad.test")


def test_values_json_cannot_encode_are_written_as_their_repr() -> None:
    [record] = records(lambda: structlog.get_logger().info("odd", value={1, 2}))
    assert record["value"] == "{1, 2}"
