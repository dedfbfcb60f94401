"""Models and their budgets: token counting, the window and the budget derived from it, the litellm client (and
the offline model, which never imports litellm), the prompts and the tools a model may call."""

from typing import TYPE_CHECKING

from threadkeeper.persistence.faces import lazy_names

if TYPE_CHECKING:
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
    from .tokens import MESSAGE_OVERHEAD, OFFLINE_COUNTED_AS, Tokenizer, bound_text, tokenizer_for
    from .tools import RECORDS, Tool, ToolContext, ToolRegistry

_HOMES: dict[str, tuple[str, ...]] = {
    ".budget": (
        "OFFLINE_WINDOW_TOKENS", "BudgetError", "BudgetPolicy", "ContextBudget", "is_offline", "offers_tools",
        "resolve_max_output", "resolve_window",
    ),
    ".embeddings": ("Embedder", "EmbeddingClient", "EmbeddingError"),
    ".llm": (
        "Draft", "ModelClient", "ModelContextError", "ModelError", "ModelReply", "ModelSetupError", "ModelTimeoutError",
        "RateLimitedError", "ToolCall",
    ),
    ".offline": ("OfflineModel",),
    ".prompts": ("HANDOFF_PROMPT", "HANDOFF_UPDATE", "SYSTEM_PROMPT"),
    ".tokens": ("MESSAGE_OVERHEAD", "OFFLINE_COUNTED_AS", "Tokenizer", "bound_text", "tokenizer_for"),
    ".tools": ("RECORDS", "Tool", "ToolContext", "ToolRegistry"),
}
"""Where each public name lives, imported when first asked for: the tokenizer without the model client, the
offline model's text rules or the embedding client's numpy."""

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
    "OFFLINE_COUNTED_AS",
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
    "tokenizer_for",
]


__getattr__ = lazy_names(__name__, _HOMES)
