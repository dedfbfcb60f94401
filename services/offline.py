"""The offline model: a litellm custom provider that answers deterministically and honestly.

It is selected by ``AI_MODEL=offline`` (the default). It never pretends to be a language model: it
acknowledges the latest ask, says what it can see of the thread and how many tokens of context it
received, and reports usage like a real provider, counted with the same tokenizer.
"""

from __future__ import annotations

import re
from typing import Any

from ._litellm import litellm, register_provider
from .budget import OFFLINE_WINDOW_TOKENS
from .tokens import Tokenizer

HANDOFF_MARK = "[Threadkeeper handoff"
_registered = False


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


class OfflineModel(litellm.CustomLLM):
    """A deterministic stand-in for a chat model, behind litellm's custom provider interface."""

    def __init__(self) -> None:
        super().__init__()
        self.tokenizer = Tokenizer("gpt-4o")

    def _respond(self, model: str, messages: list[dict[str, Any]], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> litellm.ModelResponse:
        # Like a real provider, the prompt count includes the tool schemas sent with the request.
        optional = kwargs.get("optional_params") or (args[7] if len(args) > 7 else {}) or {}
        prompt_tokens = self.tokenizer.count_chat(messages) + self.tokenizer.count_tools(optional.get("tools") or [])
        text = offline_answer(messages, prompt_tokens)
        completion = self.tokenizer.count(text)
        return litellm.ModelResponse(model=f"offline/{model}", choices=[{"index": 0, "finish_reason": "stop",
                                                                 "message": {"role": "assistant", "content": text}}],
                             usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                                    "total_tokens": prompt_tokens + completion})

    def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> litellm.ModelResponse:  # type: ignore[override]
        return self._respond(model, messages, args, kwargs)

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> litellm.ModelResponse:  # type: ignore[override]
        return self._respond(model, messages, args, kwargs)


def register() -> None:
    """Route ``threadkeeper-offline/offline`` to the offline model and tell litellm what it is.

    Registering its model info (window, zero cost) also spares litellm's cost tracking a slow search
    for an unknown model on every call.
    """
    global _registered
    if not _registered:
        register_provider("threadkeeper-offline", OfflineModel())
        litellm.register_model({"threadkeeper-offline/offline": {
            "max_input_tokens": OFFLINE_WINDOW_TOKENS, "max_tokens": OFFLINE_WINDOW_TOKENS,
            "max_output_tokens": 4096, "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
            "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0,
            "litellm_provider": "threadkeeper-offline", "mode": "chat"}})
        _registered = True
