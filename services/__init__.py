"""The domain: token accounting, budgets, the reply executor, compaction, the model wrapper.

Public entry points: :class:`Pipeline` (what the bot, console, CLI and evals call),
:class:`ReplyExecutor`, :class:`ModelClient`, :class:`ContextBudget`, :class:`Tokenizer`.
"""

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
from .replay import ReplayInputError, load_thread, parse_thread, replay
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
