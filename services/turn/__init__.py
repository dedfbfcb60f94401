"""A turn: the reply executor that runs a conversation's turns under its lease, and what it is composed of: the
turn's input (inbox items → a prepared turn), its runtime context (recall and memory within their shares), the
model and tool loop, and the preview of the next turn built by those same three."""

from .assembler import FOCUS_NOTE, ContextAssembler, RuntimeContext
from .effects import NoteEffects
from .executor import ReplyExecutor
from .input import PreparedTurn, TurnInput
from .loop import ModelLoop, tool_tokens
from .preview import ContextReport, Preview
from .seams import CheckpointStore, Compactor, Model
from .types import (
    COMPACTING,
    THINKING,
    Clock,
    ExecutorConfig,
    InboxEffects,
    Intake,
    Preparation,
    RuntimeHeader,
    SilentEvents,
    Spend,
    TurnEvents,
    TurnResult,
    default_runtime_context,
)

__all__ = [
    "COMPACTING", "FOCUS_NOTE", "THINKING", "CheckpointStore", "Clock", "Compactor", "ContextAssembler", "ContextReport",
    "ExecutorConfig", "InboxEffects", "Intake", "Preparation", "Model", "ModelLoop", "NoteEffects", "PreparedTurn", "Preview",
    "ReplyExecutor", "RuntimeContext", "RuntimeHeader", "SilentEvents", "Spend", "TurnEvents", "TurnInput",
    "TurnResult", "default_runtime_context", "tool_tokens",
]
