"""Short stable references: ``#N``, the number a message gets when its turn takes it.

A Slack id such as ``1703896670.000009`` costs about nine tokens every time a handoff, a recall block or
a search result cites it; ``#9`` costs two. Every person's message and every reply is numbered in the
order turns take them (per conversation, never reused: a handoff carries the highest number it covers),
the model sees each person's message as ``[#N] Name: text``, handoff lines cite ``[#N]``, and the tools
accept ``#N`` (or ``N``, or the full id) wherever they take a message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone

from threadkeeper.persistence import Message, messages_so_far

REF = re.compile(r"(?<![\w#])#(\d{1,9})\b")
"""A reference in text: ``#`` and the number."""


def label(ident: str, ref: int | None) -> str:
    """How a message is cited: ``#N`` when it has a reference, else its id."""
    return f"#{ref}" if ref else ident


def parse(value: str) -> int | None:
    """The number in ``#N`` or ``N`` (what a model or a person may write for a reference); None otherwise."""
    text = value.strip().strip("[]").removeprefix("#")
    return int(text) if text.isdigit() and 0 < len(text) <= 9 and int(text) > 0 else None


def numbered(message: Message) -> bool:
    """Whether a message gets a reference: people's messages and replies, not tool steps, runtime context or
    handoffs."""
    return message.role in ("user", "assistant") and not message.flags.runtime and not message.flags.handoff \
        and not any(p.type in ("tool_call", "tool_result") for p in message.parts)


def next_ref(messages: Sequence[Message]) -> int:
    """The next free number after ``messages`` (a history: its handoff carries what earlier epochs used)."""
    return 1 + messages_so_far(messages)


def shown(message: Message) -> bool:
    """Whether the model sees the reference in front of the message (people's messages with an author)."""
    return bool(message.ref) and message.role == "user" and bool(message.author) and not message.flags.handoff \
        and not message.flags.runtime


def prefix(message: Message) -> str:
    """What goes in front of a person's message the model reads: ``[#N] `` (see :func:`shown`)."""
    return f"[#{message.ref}] " if shown(message) else ""


def speaker(message: Message) -> str:
    """Who a person's message is from, as the model reads it: the author, and for a message read late (said
    before messages that precede it in the history: the bot was catching up on its thread) when it was said."""
    author = message.author or ""
    if message.flags.late:
        at = datetime.fromtimestamp(message.created_at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return f"{author} (said earlier, {at})"
    return author
