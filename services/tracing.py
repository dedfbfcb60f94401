"""One structured log line per turn and per compaction, tied together by the turn's trace id.

Lines go through the standard ``logging`` module with their fields as ``extra``; the command line renders
them as key=value or JSON (``THREADKEEPER_LOG_FORMAT``, see ``threadkeeper.logs``). The trace id of the turn
being run is a context variable, so a compaction that a turn starts logs the same trace id as the turn.
"""

from __future__ import annotations

import logging
import uuid
from contextvars import ContextVar
from typing import Any

TRACE: ContextVar[str | None] = ContextVar("threadkeeper_trace_id", default=None)
TURNS = logging.getLogger("threadkeeper.turn")
COMPACTIONS = logging.getLogger("threadkeeper.compaction")


def new_trace_id() -> str:
    return uuid.uuid4().hex[:12]


def event(logger: logging.Logger, name: str, **fields: Any) -> None:
    """Log ``name`` with ``fields`` (and the current trace id) as one structured line at INFO."""
    if logger.isEnabledFor(logging.INFO):
        logger.info(name, extra={"trace_id": TRACE.get(), **fields})
