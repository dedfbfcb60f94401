"""Log lines for people and for log pipelines: ``key=value`` (default) or JSON, one line per record.

Every record goes through structlog's formatter, Threadkeeper's own and its libraries' (Bolt, litellm, redis)
alike, with its time, level and logger; the fields a record carries (``extra``, such as the conversation
id and trace id of the per-turn and per-compaction lines of :mod:`services.tracing`) become keys of
their own.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any, Literal

import structlog

FORMATS = ("text", "json")


def configure(level: str = "INFO", fmt: Literal["text", "json"] = "text", stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (default stderr) as one ``key=value`` or JSON line."""
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else \
        structlog.processors.LogfmtRenderer(key_order=["timestamp", "level", "logger", "event"], drop_missing=True)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name,
                           structlog.processors.TimeStamper(fmt="iso", utc=True), structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer])
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def quiet_turn_lines(level: str) -> None:
    """For commands that report turns themselves (console, replay, eval): the one line per turn and per
    compaction is logged only at DEBUG."""
    if level != "DEBUG":
        for name in ("threadkeeper.turn", "threadkeeper.compaction"):
            logging.getLogger(name).setLevel(logging.WARNING)


def stderr_console() -> Any:
    """A rich console on stderr, for progress bars that must not mix with a command's output. Lines it prints are
    never cut to the terminal's width (a path stays one word to copy)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)
