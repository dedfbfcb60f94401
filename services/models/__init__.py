"""Models and their budgets: token counting, the window and the budget derived from it, the litellm client (and
the offline model, which never imports litellm), the prompts and the tools a model may call."""

from .budget import (
    OFFLINE_WINDOW_TOKENS,
    BudgetError,
    BudgetPolicy,
    ContextBudget,
    is_offline,
    offers_tools,
    resolve_max_output,
    resolve_window,
)
from .embeddings import Embedder, EmbeddingClient, EmbeddingError
from .llm import (
    Draft,
    ModelClient,
    ModelContextError,
    ModelError,
    ModelReply,
    ModelSetupError,
    ModelTimeoutError,
    RateLimitedError,
    ToolCall,
)
from .offline import OfflineModel
from .prompts import HANDOFF_PROMPT, HANDOFF_UPDATE, SYSTEM_PROMPT
from .tokens import MESSAGE_OVERHEAD, Tokenizer, bound_text
from .tools import RECORDS, Tool, ToolContext, ToolRegistry

__all__ = [
    "bound_text",
    "BudgetError",
    "BudgetPolicy",
    "ContextBudget",
    "Draft",
    "Embedder",
    "EmbeddingClient",
    "EmbeddingError",
    "HANDOFF_PROMPT",
    "HANDOFF_UPDATE",
    "is_offline",
    "MESSAGE_OVERHEAD",
    "ModelClient",
    "ModelContextError",
    "ModelError",
    "ModelReply",
    "ModelSetupError",
    "ModelTimeoutError",
    "offers_tools",
    "OFFLINE_WINDOW_TOKENS",
    "OfflineModel",
    "RateLimitedError",
    "RECORDS",
    "resolve_max_output",
    "resolve_window",
    "SYSTEM_PROMPT",
    "Tokenizer",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolRegistry",
]
