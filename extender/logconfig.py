"""Logging setup: the one ``structlog.configure`` call of the program.

``json`` is the production chain (structlog's performance guide): merged context variables, level,
ISO UTC timestamp, formatted exceptions, rendered by orjson straight to bytes on stdout. ``console``
is the human-readable renderer. ``auto`` picks console when stdout is a terminal, JSON otherwise.
Modules log with ``log = structlog.get_logger()``; event names are dotted and past tense.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, Literal

import orjson
import structlog

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "configure_logging"]

LogFormat = Literal["json", "console", "auto"]
LOG_FORMATS: tuple[str, ...] = ("json", "console", "auto")
LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")


def configure_logging(fmt: LogFormat | str = "auto", level: str | int = "info") -> None:
    """Configure structlog globally. ValueError for an unknown format or level."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    numeric = _level(level)
    if fmt == "auto":
        fmt = "console" if sys.stdout.isatty() else "json"
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    processors: list[structlog.types.Processor]
    factory: Callable[..., Any]
    if fmt == "json":
        processors = [
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ]
        factory = structlog.BytesLoggerFactory()
    else:
        processors = [*shared, structlog.dev.ConsoleRenderer()]
        factory = structlog.PrintLoggerFactory()
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    # cel-python logs every evaluation error it returns as a value at ERROR, and its parser chats
    # at DEBUG; our selectors report CEL failures themselves (spec/libraries.md).
    logging.getLogger("celpy").setLevel(logging.CRITICAL)
    # aiohttp's own loggers go through stdlib logging at the same threshold.
    logging.basicConfig(level=numeric, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    name = level.strip().lower()
    if name not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    numeric: int = getattr(logging, name.upper())
    return numeric
