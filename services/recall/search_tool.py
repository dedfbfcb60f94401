"""The ``thread_search`` tool: a model looks further back in its thread than the automatic recall.

It searches the same index as recall (every earlier message the context no longer holds, every epoch),
optionally by author and date range, and answers within a token bound with each message's id, author
and date. Arguments are validated; a bad one gets a reason the model can read, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, timezone
from typing import Any

from threadkeeper.persistence import CheckpointStore

from ..models import Tool, ToolContext
from ..text import search_terms
from .cards import Card
from .index import Recall

THREAD_SEARCH = "thread_search"
RESULTS_HEADER = "[thread_search results: earlier messages of this thread, best matches with their neighbours]"
MAX_QUERY_CHARS = 500

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words to look for (names, numbers, identifiers, topics)."},
        "author": {"type": "string", "description": "Only messages by this person (as shown in the thread)."},
        "after": {"type": "string", "description": "Only messages on or after this date (YYYY-MM-DD, UTC)."},
        "before": {"type": "string", "description": "Only messages before this date (YYYY-MM-DD, UTC)."},
    },
    "required": ["query"],
}


def _day(value: Any, name: str) -> tuple[float | None, str | None]:
    if value is None:
        return None, None
    if not isinstance(value, str):
        return None, f"{name} must be a date as YYYY-MM-DD"
    try:
        day = date.fromisoformat(value.strip())
    except ValueError:
        return None, f"{name} must be a date as YYYY-MM-DD, not {value[:40]!r}"
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp(), None


def parse_arguments(args: dict[str, Any]) -> tuple[list[str], Callable[[Card], bool] | None, str | None]:
    """Search terms and a filter from the tool's arguments, or the reason they are rejected."""
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return [], None, "query must be a non-empty string"
    if len(query) > MAX_QUERY_CHARS:
        return [], None, f"query must be at most {MAX_QUERY_CHARS} characters"
    terms = list(search_terms(query))
    if not terms:
        return [], None, "query has no words to search for (only common words)"
    author = args.get("author")
    if author is not None and (not isinstance(author, str) or not author.strip()):
        return [], None, "author must be a non-empty string"
    after, problem = _day(args.get("after"), "after")
    before, problem2 = _day(args.get("before"), "before")
    if problem or problem2:
        return [], None, problem or problem2
    if after is not None and before is not None and before <= after:
        return [], None, "before must be later than after"
    unknown = sorted(set(args) - set(PARAMETERS["properties"]))
    if unknown:
        return [], None, f"unknown argument(s): {', '.join(unknown)}"
    who = author.strip().lower() if author else None
    if who is None and after is None and before is None:
        return terms, None, None

    def keep(message: Card) -> bool:
        if who is not None and (message.author or "assistant").lower() != who:
            return False
        if after is not None and message.created_at < after:
            return False
        return before is None or message.created_at < before

    return terms, keep, None


def thread_search_tool(recall: Recall, checkpoints: CheckpointStore, cap_tokens: Callable[[], int]) -> Tool:
    """The tool over ``recall``'s index; results are bounded to ``cap_tokens()``."""

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        terms, keep, problem = parse_arguments(args)
        if problem:
            return f"rejected: {problem}"
        history = await checkpoints.load_history(ctx.conversation_id, ctx.checkpoint_id)
        found = await recall.search(ctx.conversation_id, history, ctx.messages, terms, cap_tokens(), keep=keep,
                                    header=RESULTS_HEADER)
        if not found.ids:
            return (f"no earlier message matches (searched {found.searched:,} messages the context no longer "
                    "holds; what the context holds is not repeated)")
        return found.text

    return Tool(THREAD_SEARCH, "Search the earlier messages of this thread that are no longer in view (every "
                "message since the thread began is kept). Returns the best matches with their neighbours, each "
                "with its message id, author and date.", PARAMETERS, handler, status="searching the thread…")
