"""What the model sees: history messages rendered to chat format, context entries and their measure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from persistence import History, ImagePart, Message, TextPart, ToolCallPart, ToolResultPart


@dataclass(frozen=True)
class ContextEntry:
    """One message of the next request, as reported by ``context``, ``replay`` and the console."""

    role: str
    text: str
    source_ids: list[str]
    tokens: int

    def as_dict(self) -> dict[str, Any]:
        return {"role": self.role, "text": self.text, "source_ids": self.source_ids, "tokens": self.tokens}


def visible(messages: Sequence[Message], current_runtime_id: str | None = None) -> list[Message]:
    """Messages a request carries: runtime context only for the current turn, the rest as stored."""
    return [m for m in messages if not m.flags.runtime or m.id == current_runtime_id]


def render_text(message: Message) -> str:
    """A message's text as the model reads it (people's messages carry their author)."""
    text = "\n".join(p.text for p in message.parts if isinstance(p, TextPart))
    images = [p for p in message.parts if isinstance(p, ImagePart)]
    if images:
        text += "".join(f"\n[image: {p.url or 'inline image omitted'}]" for p in images)
    if message.role == "user" and message.author and not message.flags.handoff:
        return f"{message.author}: {text}"
    return text


def to_chat(system_prompt: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat-completion messages for litellm: system prompt first, tool calls and results paired."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for m in messages:
        calls = [p for p in m.parts if isinstance(p, ToolCallPart)]
        results = [p for p in m.parts if isinstance(p, ToolResultPart)]
        if results:
            for r in results:
                chat.append({"role": "tool", "tool_call_id": r.call_id, "content": r.content})
            continue
        entry: dict[str, Any] = {"role": m.role if m.role != "tool" else "user", "content": render_text(m)}
        if calls:
            entry["content"] = entry["content"] or None
            entry["tool_calls"] = [{"id": c.call_id, "type": "function",
                                    "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
        chat.append(entry)
    return chat


def entries(messages: Sequence[Message]) -> list[ContextEntry]:
    out = []
    for m in messages:
        text = render_text(m) if not any(isinstance(p, (ToolCallPart, ToolResultPart)) for p in m.parts) else m.text
        # A handoff: every id it cites; a runtime context: the messages it recalled.
        ids = list(m.source_ids) if (m.flags.handoff or m.flags.runtime) and m.source_ids else [m.id]
        out.append(ContextEntry(role=m.role, text=text, source_ids=ids, tokens=m.tokens))
    return out


def measure(history: History | None, *, fixed_prompt_tokens: int, extra: Sequence[Message] = ()) -> int:
    """Tokens of history the next request carries (fixed prompt excluded), plus ``extra`` new messages.

    When the head checkpoint's last model call reported usage, that number (less the runtime context that
    call carried) is the ground truth for the prefix it covered; only messages after that prefix are
    estimated from stored counts.
    Cumulative usage of a turn is never used.
    """
    extra_tokens = sum(m.tokens for m in extra if not m.flags.runtime)
    if history is None:
        return extra_tokens
    messages = history.messages
    outcome = history.checkpoint.outcome
    if outcome and outcome.usage and 0 < outcome.usage_covered_messages <= len(messages):
        covered = outcome.usage_covered_messages
        # That call also carried its turn's runtime context (recalled messages included), which is never
        # sent again: it does not count toward what the next request carries.
        sent_runtime = next((m.tokens for m in reversed(messages[:covered]) if m.flags.runtime), 0)
        prefix = max(0, outcome.usage.input_tokens - fixed_prompt_tokens - sent_runtime)
        rest = sum(m.tokens for m in visible(messages[covered:]))
        return prefix + rest + extra_tokens
    return sum(m.tokens for m in visible(messages)) + extra_tokens
