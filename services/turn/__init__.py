"""A turn: the reply executor that runs a conversation's turns under its lease, and what it is composed of."""

from .effects import NoteEffects
from .executor import ReplyExecutor
from .pipeline import ContextReport, Pipeline
from .seams import CheckpointStore
from .types import THINKING, ExecutorConfig, SilentEvents, Spend, TurnEvents, TurnResult

__all__ = [
    "CheckpointStore",
    "ContextReport",
    "ExecutorConfig",
    "NoteEffects",
    "Pipeline",
    "ReplyExecutor",
    "SilentEvents",
    "Spend",
    "THINKING",
    "TurnEvents",
    "TurnResult",
]
