"""What a line a model wrote must be before it is kept: the one check for the summarizer's narrative lines, memory's
records proposed by a model, and the entries ``record_state`` accepts.

A line is kept only when it cites what it comes from, states no number or identifier its sources lack, is not an
instruction aimed at the assistant's future behaviour, and holds no secret (one its input carried, or one the
redaction rules find)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from .instructions import split_instructions
from .redact import redact

VALUES = re.compile(r"https?://[^\s<>|)]+|(?<![\w./:#@-])[\w./:#@-]*\d[\w./:#@-]*")
"""Numbers and identifiers (URLs, and every token with a digit in it: ticket keys, builds, versions, hashes,
amounts): what a model may only repeat, never make up. A token is checked whole ("Person3", "p99", "v2.1"), and read
from its start only, so a long token without a digit costs its length once."""

INSTRUCTION = ("it is aimed at the assistant's future behaviour, not a fact, decision or plan step; such "
               "instructions are not recorded (a person's stays their ask in the thread)")


def values(text: str) -> list[str]:
    """The numbers and identifiers ``text`` states (without the punctuation that ends a sentence after them)."""
    return [v for v in (m.rstrip(".,:;-/") for m in VALUES.findall(text)) if any(c.isdigit() for c in v)]


def holds_secret(text: str, secrets: Collection[str] = ()) -> bool:
    """Whether ``text`` repeats one of ``secrets`` (values redacted from what its writer read) or holds one the
    redaction rules find: such a line is dropped whole (a line about a secret, without it, tells a reader
    nothing)."""
    return any(s and s in text for s in secrets) or redact(text) != text


def rejected(text: str, sources: Sequence[str], *, secrets: Collection[str] = (),
             checked_against: str | None = None) -> str | None:
    """Why a model's line is not kept, in words a model (or a log) can act on; None when it is kept.

    ``sources``: the texts it cites (at least one); ``checked_against``: the text its numbers and identifiers must
    appear in (default: its sources; the summarizer's lines, which may combine several messages, are checked
    against its whole input); ``secrets``: values redacted from the input, which no line may repeat."""
    if not sources:
        return "it cites no message it comes from"
    if split_instructions(text)[1]:  # any of its sentences, not only the first
        return INSTRUCTION
    allowed = (checked_against if checked_against is not None else "\n".join(sources)).lower()
    made_up = [v for v in values(text) if v.lower() not in allowed]
    if made_up:
        return f"it states {', '.join(made_up[:3])}, which the cited messages do not"
    if holds_secret(text, secrets):
        return "it holds a secret"
    return None
