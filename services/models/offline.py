"""The offline model: an in-process stand-in that answers deterministically and honestly.

It is selected by ``AI_MODEL=offline`` (the default). It never pretends to be a language model: it
acknowledges the latest ask, says what it can see of the thread and how many tokens of context it
received, and reports usage like a real provider, counted with the same tokenizer.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from threadkeeper.persistence import Usage

from ..context import HANDOFF_HEADER
from .tokens import Tokenizer

HANDOFF_MARK = HANDOFF_HEADER


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _excerpt(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def offline_answer(messages: list[dict[str, Any]], prompt_tokens: int) -> str:
    """What the offline model says, given the request's messages."""
    convo = [m for m in messages if m.get("role") != "system"]
    user = [m for m in convo if m.get("role") == "user" and not _text(m.get("content")).startswith(HANDOFF_MARK)]
    handoffs = [m for m in convo if _text(m.get("content")).startswith(HANDOFF_MARK)]
    tools = [m for m in convo if m.get("role") == "tool"]
    latest, who = "(no message from a person)", ""
    if user:
        raw = _text(user[-1]["content"])
        author = re.match(r"^(?:\[#\d+\] )?([^:\n]{1,60}): ", raw)
        if author:
            who, raw = f" from {author.group(1)}", raw[author.end():]
        latest = _excerpt(raw)
    replies = len(convo) - len(user) - len(handoffs) - len(tools)
    parts = [f"Offline model here (not a language model; set AI_MODEL to a real model for real answers). "
             f"Latest message{who}: \u201c{latest}\u201d.",
             f"I can see {_count(len(convo), 'message')} of this thread ({len(user)} from people, "
             f"{_count(replies, 'reply', 'replies')}, {_count(len(tools), 'tool result')}) "
             f"in {prompt_tokens:,} tokens of context."]
    if handoffs:
        handoff = _text(handoffs[-1]["content"])
        asks = [line.strip() for line in handoff.splitlines() if line.strip().startswith("- [ask")]
        parts.append(f"Earlier messages are carried by a handoff of {len(handoff):,} characters"
                     + (f"; its first open ask: {_excerpt(asks[0], 120)}" if asks else "") + ".")
    return " ".join(parts)


class OfflineModel:
    """A deterministic stand-in for a chat model, called in the worker's own process.

    It is not a provider, so it is not reached through litellm: no thread hop, no import of the provider
    stack (which costs a worker about 200 MB and most of its start-up). Every real model goes through litellm.
    ``latency`` makes each answer wait that long, standing in for a real model's time to answer (the bench's
    concurrency run uses it)."""

    def __init__(self, latency: float = 0.0) -> None:
        self.tokenizer = Tokenizer("gpt-4o")
        self.latency = latency

    async def answer(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                     ) -> tuple[str, Usage]:
        """The reply's text and its usage; like a real provider's, the prompt count includes the tool schemas
        sent with the request."""
        if self.latency:
            await asyncio.sleep(self.latency)
        prompt_tokens = self.tokenizer.count_chat(messages) + self.tokenizer.count_tools(tools or [])
        text = offline_answer(messages, prompt_tokens)
        return text, Usage(input_tokens=prompt_tokens, output_tokens=self.tokenizer.count(text))
