"""The offline model: an in-process stand-in that answers deterministically and honestly.

It is selected by ``AI_MODEL=offline`` (the default). It never pretends to be a language model: it
acknowledges the latest ask, quotes what its context holds that shares the most words with it (a message
recalled from earlier in the thread, a memory record from another conversation, an earlier message still in
view; with its reference, author and day), says what it can see of the thread and how many tokens of context it
received, and reports usage like a real provider, counted with the same tokenizer.
"""

from __future__ import annotations

import asyncio
import re
from datetime import date
from typing import Any

from threadkeeper.persistence import Usage

from ..context import HANDOFF_HEADER
from ..text import search_terms
from .tokens import OFFLINE_COUNTED_AS, Tokenizer

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


_DAY = re.compile(r"^(\d{4})-(\d{2})-(\d{2}):$")
_RECALLED = re.compile(r"^\[#(?P<ref>\d+)\] (?P<who>[^:\n]{1,60}): (?P<text>.+)$")
_REMEMBERED = re.compile(r"^- (?P<who>[^:\n]{1,60}): (?P<entries>M\d+ .+)$")
_ENTRY = re.compile(r"(?:^|; )M(?P<mark>\d+) (?:\((?:decision|constraint|outcome)\) )?")
_IN_VIEW = re.compile(r"^\[#(?P<ref>\d+)\] (?P<who>[^:\n]{1,60}): ", re.DOTALL)
QUOTED = 2
"""At most this many passages are quoted."""


def _day(match: re.Match[str] | None) -> str:
    if match is None:
        return ""
    return date(int(match[1]), int(match[2]), int(match[3])).strftime("%-d %b %Y")


def _passages(convo: list[dict[str, Any]], system: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(how it is introduced, its text)`` of every passage the context holds: recalled lines and memory records
    (in the runtime context, under their day lines) and earlier messages of people still in view."""
    out: list[tuple[str, str]] = []
    for message in system:
        day = ""
        for line in _text(message.get("content")).splitlines():
            line = line.strip()
            if heading := _DAY.match(line):
                day = _day(heading)
                continue
            if found := _RECALLED.match(line):
                out.append((f"Earlier in this thread, {found['who']} ({day}, #{found['ref']})", found["text"]))
            elif found := _REMEMBERED.match(line):
                entries = found["entries"]
                marks = list(_ENTRY.finditer(entries))
                for this, after in zip(marks, [*marks[1:], None], strict=True):
                    text = entries[this.end(): after.start() if after else len(entries)]
                    out.append((f"From memory, M{this['mark']}: {found['who']} ({day})", text))
    for message in convo:
        if message.get("role") == "user" and (found := _IN_VIEW.match(_text(message.get("content")))):
            out.append((f"Earlier in this thread, {found['who']} (#{found['ref']})",
                        _text(message.get("content"))[found.end():]))
    return out


def _quotes(ask: str, passages: list[tuple[str, str]]) -> list[str]:
    """The passages that share the most search terms with ``ask`` (at least one), best first."""
    asked = set(search_terms(ask))
    scored = [(len(asked & set(search_terms(text))), -i, intro, text) for i, (intro, text) in enumerate(passages)
              if text.strip() and " ".join(text.split()) != " ".join(ask.split())]
    best = sorted((s for s in scored if s[0] > 0), reverse=True)[:QUOTED]
    return [f"{intro}: \u201c{_excerpt(text, 200)}\u201d" for _, _, intro, text in best]


def offline_answer(messages: list[dict[str, Any]], prompt_tokens: int) -> str:
    """What the offline model says, given the request's messages."""
    convo = [m for m in messages if m.get("role") != "system"]
    user = [m for m in convo if m.get("role") == "user" and not _text(m.get("content")).startswith(HANDOFF_MARK)]
    handoffs = [m for m in convo if _text(m.get("content")).startswith(HANDOFF_MARK)]
    tools = [m for m in convo if m.get("role") == "tool"]
    latest, who, quotes = "(no message from a person)", "", []
    if user:
        raw = _text(user[-1]["content"])
        author = re.match(r"^(?:\[#\d+\] )?([^:\n]{1,60}): ", raw)
        if author:
            who, raw = f" from {author.group(1)}", raw[author.end():]
        latest = _excerpt(raw)
        quotes = _quotes(raw, _passages(convo[:-1], [m for m in messages if m.get("role") == "system"]))
    replies = len(convo) - len(user) - len(handoffs) - len(tools)
    parts = [f"Offline model here (not a language model; set AI_MODEL to a real model for real answers). "
             f"Latest message{who}: \u201c{latest}\u201d.",
             f"I can see {_count(len(convo), 'message')} of this thread ({len(user)} from people, "
             f"{_count(replies, 'reply', 'replies')}, {_count(len(tools), 'tool result')}) "
             f"in {prompt_tokens:,} tokens of context."]
    if quotes:
        parts.insert(1, "What my context holds that matches it: " + "; ".join(quotes) + ".")
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
        self.tokenizer = Tokenizer(OFFLINE_COUNTED_AS)
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
