"""Small builders for test data."""

from __future__ import annotations

import itertools

from threadkeeper.persistence import Message, MessageFlags, TextPart

_ids = itertools.count(1)


def msg(text: str = "hello", *, role: str = "user", id: str | None = None, tokens: int | None = None,
        author: str | None = "U1", **flags: bool) -> Message:
    return Message(id=id or f"m{next(_ids)}", role=role, parts=[TextPart(text=text)], author=author,  # type: ignore[arg-type]
                   flags=MessageFlags(**flags), tokens=tokens if tokens is not None else max(1, len(text) // 4))
