"""The JSON log records: stable keys, an ISO UTC timestamp, exceptions rendered."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from mtad.base import log


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


def test_times_are_written_as_iso_8601() -> None:
    at = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)
    [record] = records(lambda: structlog.get_logger().info("later", retry_at=at, day=at.date()))
    assert (record["retry_at"], record["day"]) == ("2026-12-01T12:30:00+00:00", "2026-12-01")


def test_values_json_cannot_encode_are_written_as_their_repr() -> None:
    [record] = records(lambda: structlog.get_logger().info("odd", value={1, 2}))
    assert record["value"] == "{1, 2}"


def test_a_batch_is_written_in_pieces_of_whole_lines_each_at_most_pipe_buf() -> None:
    lines = [f"line {i} " + "x" * (i % 700) + "\n" for i in range(400)]
    text = "".join(lines)
    pieces = list(log._pieces(text, 1000))
    assert "".join(pieces) == text
    assert all(len(piece) <= 1000 and piece.endswith("\n") for piece in pieces)
    assert len(pieces) < len(lines) / 2  # lines go together
    long = "y" * 2500 + "\n"
    assert list(log._pieces("a\n" + long + "b\n", 1000)) == ["a\n", long, "b\n"]  # a long line alone
    assert list(log._pieces("no newline at the end", 5)) == ["no newline at the end"]


async def test_lines_logged_in_one_loop_iteration_reach_the_stream_whole() -> None:
    class Writes(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.writes: list[str] = []

        def write(self, text: str) -> int:
            self.writes.append(text)
            return super().write(text)

    stream = Writes()
    log.configure("json", "info", stream=stream)
    logger = structlog.get_logger("test")
    for n in range(200):
        logger.info("accepted", n=n, padding="p" * 100)
    assert stream.writes == []  # held until the end of this loop iteration
    log.flush()
    assert all(len(w) <= log._ATOMIC and w.endswith("\n") for w in stream.writes)
    assert [json.loads(line)["n"] for line in stream.getvalue().splitlines()] == list(range(200))


def test_auto_writes_json_lines_to_a_pipe_or_file() -> None:
    stream = io.StringIO()
    log.configure("auto", "info", stream=stream)
    structlog.get_logger().info("ready", smtp=["127.0.0.1:2525"])
    log.flush()
    assert json.loads(stream.getvalue())["event"] == "ready"


def test_auto_writes_console_lines_to_a_terminal() -> None:
    main, terminal = os.openpty()
    with open(terminal, "w", closefd=True) as stream, open(main, "rb", buffering=0, closefd=True) as reading:
        log.configure("auto", "info", stream=stream)
        structlog.get_logger().info("ready", smtp=["127.0.0.1:2525"])
        log.flush()
        stream.flush()
        line = reading.read(4096).decode()
    assert not line.lstrip().startswith("{")
    assert "ready" in line
    assert "smtp" in line
    assert "127.0.0.1:2525" in line
