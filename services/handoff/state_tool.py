"""The ``record_state`` tool: the model proposes ledger entries; the host validates them.

Each entry must cite an existing message as evidence, by its reference (``#N``) or id; a message folded
into a handoff is found too. An entry must be supported by the words of the messages it cites: at least half
of its content words (words that are not among the most common of English, German, French, Spanish,
Portuguese or Italian; numbers and identifiers count; compared by their first five letters, so "deploys" and
"deployment" match) must appear in them, so citing any message of the thread is not enough; an entry with no such
word ("We keep coming back") must have every one of its words there. Entries without
evidence or support are rejected with a reason the model sees, and so is anything that is not a fact a person
stated: an entry with a sentence in a language the checks do not read (:func:`services.safety.readable`: only
English, German, French, Spanish, Portuguese and Italian; anything else stays its author's quoted words in the
thread); evidence that is not a person's message (the assistant's replies and tools' output are not evidence); an
entry with a sentence that is a question, an instruction of any kind or about the assistant itself (a second-person
pronoun, the bot as subject; :func:`services.safety.stated_as_fact`); and an entry whose words the cited message
holds only in what it asked or told the assistant, not in the sentences it states as facts. Accepted entries are stored as structured data
on the tool result (and shown in its text, which may be cut to fit), and the ledger folds them from that
data at the next compaction.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from threadkeeper.persistence import Message

from ..context import parse
from ..lexicon import common
from ..models import RECORDS, Tool, ToolContext
from ..safety import (
    addresses_the_assistant,
    readable,
    rejected,
    sentences,
    statements,
    unstated,
    without_instructions,
)
from ..text import extract as x
from .ledger import ACCEPTED_MARK, RECORD_STATE

KINDS = ("fact", "decision", "plan_step")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entries": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": list(KINDS)},
                    "text": {"type": "string", "description": "One sentence stating the fact, decision or step."},
                    "evidence": {"type": "array", "items": {"type": "string"},
                                 "description": "References (#N) of the thread messages this comes from."},
                },
                "required": ["kind", "text", "evidence"],
            },
        }
    },
    "required": ["entries"],
}


Resolver = Callable[[ToolContext, str], Awaitable[Message | None]]
"""Finds a message the history no longer holds (folded into a handoff) by ``#N`` or id."""


def validate_entry(entry: Any, messages: Mapping[str, Message]) -> tuple[dict[str, Any] | None, str | None]:
    """An accepted entry (evidence as message ids, with the first one's content hash) or the reason it is
    rejected; ``messages`` maps each evidence value as cited (``#N``, ``N`` or an id) to its message."""
    if not isinstance(entry, dict):
        return None, "each entry must be an object with kind, text and evidence"
    kind, text, evidence = entry.get("kind"), entry.get("text"), entry.get("evidence")
    if kind not in KINDS:
        return None, f"kind must be one of {', '.join(KINDS)}"
    if not isinstance(text, str) or not text.strip():
        return None, "text must be a non-empty sentence"
    if len(text) > 500:
        return None, "text must be at most 500 characters"
    if not isinstance(evidence, list) or not evidence or not all(isinstance(e, str) for e in evidence):
        return None, "evidence must list at least one message reference (#N) or id"
    missing = [e for e in evidence if e not in messages]
    if missing:
        return None, f"evidence {', '.join(missing)} is not a message of this thread"
    found = [messages[e] for e in evidence]
    others = [e for e in evidence if messages[e].role != "user" or messages[e].flags.handoff]
    if others:
        return None, (f"evidence {', '.join(others)} is not a person's message; only what people stated is recorded "
                      "(a reply or a tool's output is not evidence)")
    why = rejected(text, [m.text for m in found])  # the one check of a model's lines
    if why is not None:
        return None, f"this entry is not recorded: {why}"
    unread = [s for s in sentences(text) if not readable(s)]
    if unread:
        return None, (f"this entry is not recorded: it is not in a language these checks read ({_short(unread[0])}); "
                      "only English, German, French, Spanish, Portuguese and Italian are recorded, anything else "
                      "stays its author's words in the thread")
    # a fact is a statement; a decision or plan step may be an imperative for the team ("Ship the canary"), but
    # none speaks to or about the assistant
    said = unstated(text) if kind == "fact" else [s for s in sentences(text) if addresses_the_assistant(s)]
    if said:
        return None, (f"this entry is not recorded: it is not a statement of fact ({_short(said[0])}); questions, "
                      "instructions and words about the assistant are not recorded (a person's ask stays theirs "
                      "in the thread)")
    stated = [" ".join(statements(m.text)) if kind == "fact" else without_instructions(m.text) for m in found]
    shared, needed, words = support(text, stated)
    if shared < needed and support(text, [m.text for m in found])[0] >= needed:
        return None, ("this entry is not recorded: the cited message asks or tells it, it does not state it as a "
                      "fact; what a person asked of the assistant stays their ask")
    if shared < needed:
        refs_cited = ", ".join(evidence)
        return None, (f"the cited message{'s' if len(found) > 1 else ''} {refs_cited} do{'' if len(found) > 1 else 'es'} "
                      f"not say this: {shared} of its {words} content words appear there, at least {needed} needed; "
                      "cite the message that states it and keep to its words")
    return {"kind": kind, "text": " ".join(text.split()), "evidence": [m.id for m in found],
            "refs": [m.ref for m in found], "hash": x.content_hash(found[0].text)}, None


_WORD = re.compile(r"[^\W_]+(?:[-.'][^\W_]+)*")


def _short(text: str, limit: int = 80) -> str:
    return f"“{text}”" if len(text) <= limit else f"“{text[:limit - 1]}…”"


@lru_cache(maxsize=8192)
def _content(word: str) -> str | None:
    """The word's stem when it carries content (a number, an identifier, or not one of the most common words of
    the six languages), else None."""
    if any(c.isdigit() for c in word):
        return word
    if len(word) < 3 or common(word, 5.5):
        return None
    return word[:5]


def _terms(text: str) -> set[str]:
    return {t for w in _WORD.findall(text.lower()) if (t := _content(w)) is not None}


def _plain(text: str) -> set[str]:
    return {w[:5] for w in _WORD.findall(text.lower())}


def support(text: str, cited: Sequence[str]) -> tuple[int, int, int]:
    """(content words of ``text`` found in ``cited``, how many must be, how many it has). An entry made only of common
    words ("Wir kommen immer wieder", "Will never use again") has no content word to compare: every one of its words
    must be there instead."""
    words = _terms(text)
    if not words:
        words = _plain(text)
        found = set().union(*(_plain(c) for c in cited)) if cited else set()
        return len(words & found), max(1, len(words)), len(words)
    found = set().union(*(_terms(c) for c in cited)) if cited else set()
    return len(words & found), max(1, math.ceil(len(words) / 2)), len(words)


def record_state_tool(resolve: Resolver | None = None) -> Tool:
    """The tool; ``resolve`` finds cited messages that only a handoff still mentions."""

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        entries = args.get("entries")
        if not isinstance(entries, list) or not entries:
            return "rejected: 'entries' must be a non-empty list"
        held = [m for m in ctx.messages if not m.flags.runtime and not m.flags.handoff]
        by_id = {m.id: m for m in held}
        by_ref = {m.ref: m for m in held if m.ref}
        cited: dict[str, Message] = {}
        for entry in entries:
            evidence = entry.get("evidence") if isinstance(entry, dict) else None
            for value in evidence if isinstance(evidence, list) else []:
                if not isinstance(value, str) or value in cited:
                    continue
                ref = parse(value)
                found = by_ref.get(ref) if ref is not None else by_id.get(value.strip())
                if found is None and resolve is not None:
                    found = await resolve(ctx, value)
                if found is not None:
                    cited[value] = found
        accepted, rejected = [], []
        for i, entry in enumerate(entries):
            ok, reason = validate_entry(entry, cited)
            if ok is not None:
                accepted.append(ok)
            else:
                rejected.append(f"entry {i}: {reason}")
        lines = [f"recorded {len(accepted)} of {len(entries)} entries"]
        if accepted:
            ctx.extras[RECORDS] = accepted  # stored whole on the tool result; the text below may be cut
            lines.append(ACCEPTED_MARK + json.dumps(accepted, sort_keys=True, separators=(",", ":")))
        lines.extend(f"rejected {r}" for r in rejected)
        return "\n".join(lines)

    return Tool(RECORD_STATE, "Record a fact, decision or plan step from this thread so it survives when older "
                "messages are compacted. Cite the messages it comes from by their references (#N).", PARAMETERS,
                handler, status="noting what the thread settled…")
