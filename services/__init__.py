"""The domain: token accounting, budgets, the reply executor, compaction, the model wrapper.

Public entry points: :class:`Pipeline` (what the bot, console, CLI and evals call),
:class:`ReplyExecutor`, :class:`ModelClient`, :class:`ContextBudget`, :class:`Tokenizer`.
"""

from typing import TYPE_CHECKING

from threadkeeper.persistence.faces import lazy_names

if TYPE_CHECKING:
    from .app import Forgotten, OwedReply, Pipeline, Turns, as_conversation
    from .context import ContextEntry, measure, to_chat, visible
    from .conversation import LOCAL, PRIVACY, Conversation, ConversationIdError, Privacy
    from .models import (
                         SYSTEM_PROMPT,
                         BudgetError,
                         BudgetPolicy,
                         ContextBudget,
                         Draft,
                         ModelClient,
                         ModelContextError,
                         ModelError,
                         ModelReply,
                         ModelSetupError,
                         ModelTimeoutError,
                         Tokenizer,
                         Tool,
                         ToolCall,
                         ToolContext,
                         ToolRegistry,
                         is_offline,
                         offers_tools,
                         resolve_max_output,
                         resolve_window,
    )
    from .turn import (
        THINKING,
        ContextReport,
        ExecutorConfig,
        Preparation,
        ReplyExecutor,
        Spend,
        TurnEvents,
        TurnResult,
    )

# imported at once: ``replay`` is also the name of its module, which would otherwise shadow the function once
# the module is imported (replay.py itself imports the application only when a replay runs)
from .replay import ReplayInputError, load_thread, parse_thread, replay  # noqa: E402

_HOMES: dict[str, tuple[str, ...]] = {
    ".app": ("Forgotten", "OwedReply", "Pipeline", "Turns", "as_conversation"),
    ".context": ("ContextEntry", "measure", "to_chat", "visible"),
    ".conversation": ("LOCAL", "PRIVACY", "Conversation", "ConversationIdError", "Privacy"),
    ".models": (
        "SYSTEM_PROMPT", "BudgetError", "BudgetPolicy", "ContextBudget", "Draft", "ModelClient", "ModelContextError",
        "ModelError", "ModelReply", "ModelSetupError", "ModelTimeoutError", "Tokenizer", "Tool", "ToolCall",
        "ToolContext", "ToolRegistry", "is_offline", "offers_tools", "resolve_max_output", "resolve_window",
    ),
    ".turn": (
        "THINKING", "ContextReport", "ExecutorConfig", "Preparation", "ReplyExecutor", "Spend", "TurnEvents",
        "TurnResult",
    ),
}
"""Where each public name lives. A name is imported when first asked for, so that importing one part of the
domain (the tokenizer, the budget) does not import all of it (the executor, recall, memory, safety: 30 MB and a
second); ``import threadkeeper.services`` alone imports only the reader of replay files."""

__all__ = [
    "LOCAL", "PRIVACY", "Conversation", "ConversationIdError", "Forgotten", "OwedReply", "Privacy", "Turns",
    "as_conversation",
    "SYSTEM_PROMPT", "THINKING", "BudgetError", "BudgetPolicy", "ContextBudget", "ContextEntry", "ContextReport", "Draft",
    "ExecutorConfig", "ModelClient", "ModelContextError", "ModelError", "ModelReply", "ModelSetupError", "ModelTimeoutError",
    "Pipeline",
    "ReplayInputError", "ReplyExecutor", "Spend", "Tokenizer", "Tool", "ToolCall", "ToolContext", "ToolRegistry",
    "Preparation", "TurnEvents", "TurnResult", "is_offline", "offers_tools", "load_thread", "measure", "parse_thread", "replay",
    "resolve_max_output", "resolve_window", "to_chat", "visible",
]


__getattr__ = lazy_names(__name__, _HOMES)
