"""What the model sees: history messages rendered to chat format, and the context entries reported."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from threadkeeper.persistence import (
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

if TYPE_CHECKING:
    from threadkeeper.persistence import Notes

from . import refs

HANDOFF_HEADER = "[Threadkeeper handoff"
"""How the handoff message begins: what the system prompt tells the model to look for, what the view writes, what the
offline model and the evals recognise it by."""


def quote(text: str) -> str:
    """Words a person wrote, as a handoff shows them: between quotation marks on the line that names them, so that
    nothing inside can pass for the handoff's own structure or for a rule of its own (a curly quotation mark of the
    writer's becomes a straight one, so a quotation ends only where the handoff ends it)."""
    return "“" + text.replace("“", '"').replace("”", '"') + "”"


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
    """Messages a request carries: runtime context only for the current turn, the rest as stored, except a
    handoff whose notes the current runtime context stands in for (it cites the handoff among its sources: its
    recalled messages are what the new message is about), which is shown without its notes."""
    runtime = next((m for m in reversed(messages) if m.id == current_runtime_id), None) if current_runtime_id else None
    focused = set(runtime.source_ids) if runtime is not None else set()
    out = []
    for m in messages:
        if m.flags.runtime and m.id != current_runtime_id:
            continue
        if m.flags.handoff and m.id in focused:
            m = standing_part(m)
        out.append(m)
    return out


def standing_part(handoff: Message) -> Message:
    """A handoff without its notes part (``note_tokens`` counts that part)."""
    if len(handoff.parts) < 2 or not handoff.note_tokens:
        return handoff
    return handoff.model_copy(update={"parts": handoff.parts[:1],
                                      "tokens": max(0, handoff.tokens - handoff.note_tokens[0])})


def current_text(message: Message, notes: Notes) -> str | None:
    """A message's text as it reads now: the edited text (marked), or ``None`` once it was deleted.

    The one rule for what compaction retains and what recall shows of a changed message."""
    change = notes.changes.get(message.id)
    if change is None:
        return message.text
    if change.kind == "deleted":
        return None
    return f"{change.text or ''} (edited)"


def render_text(message: Message) -> str:
    """A message's text as the model reads it (people's messages carry their author)."""
    text = "\n".join(p.text for p in message.parts if isinstance(p, TextPart))
    images = [p for p in message.parts if isinstance(p, ImagePart)]
    if images:
        text += "".join(f"\n[image: {p.url or 'inline image omitted'}]" for p in images)
    if message.role == "user" and message.author and not message.flags.handoff:
        return f"{refs.prefix(message)}{refs.speaker(message)}: {text}"
    return text


CHAT_KEPT = 4_096
"""Messages whose chat-completion entries are kept (:func:`to_chat`): a turn's request repeats the history the last
one sent, a few hundred messages, so each is rendered once while it stays in the window."""
_chat: dict[int, tuple[Message, list[dict[str, Any]]]] = {}
"""id of a message → the message (held, so its id is not reused meanwhile) and its chat-completion entries."""


def to_chat(system_prompt: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat-completion messages for litellm: system prompt first, tool calls and results paired. A message does not
    change once made (its model is frozen), so its entries are made once and kept (:data:`CHAT_KEPT`); each request
    gets copies of them."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    for m in messages:
        held = _chat.get(id(m))
        if held is None or held[0] is not m:
            if len(_chat) >= CHAT_KEPT:
                _chat.clear()
            held = _chat[id(m)] = (m, _chat_entries(m))
        chat.extend(copy.deepcopy(entry) if "tool_calls" in entry else entry.copy() for entry in held[1])
    return chat


def _chat_entries(m: Message) -> list[dict[str, Any]]:
    """One message's chat-completion entries (a tool step's results are one entry each)."""
    results = [p for p in m.parts if isinstance(p, ToolResultPart)]
    if results:
        return [{"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in results]
    calls = [p for p in m.parts if isinstance(p, ToolCallPart)]
    entry: dict[str, Any] = {"role": m.role if m.role != "tool" else "user", "content": render_text(m)}
    if calls:
        entry["content"] = entry["content"] or None
        entry["tool_calls"] = [{"id": c.call_id, "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    return [entry]


def entries(messages: Sequence[Message]) -> list[ContextEntry]:
    out = []
    for m in messages:
        text = render_text(m) if not any(isinstance(p, (ToolCallPart, ToolResultPart)) for p in m.parts) else m.text
        # A handoff: every id it cites; a runtime context: the messages it recalled.
        ids = list(m.source_ids) if (m.flags.handoff or m.flags.runtime) and m.source_ids else [m.id]
        out.append(ContextEntry(role=m.role, text=text, source_ids=ids, tokens=m.tokens))
    return out
