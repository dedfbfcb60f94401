"""Slack reply limits: split long replies into parts, repairing code fences across parts."""

from __future__ import annotations

TEXT_LIMIT = 3_900
"""Slack truncates message text past 40,000 characters and renders best under 4,000 per message."""
FENCE = "```"


def split_reply(text: str, limit: int = TEXT_LIMIT) -> list[str]:
    """Split ``text`` at paragraph, line or word boundaries into parts of at most ``limit`` characters.

    A code block cut by a split is closed at the end of one part and reopened at the start of the next,
    so every part renders on its own.
    """
    text = text.strip()
    if not text:
        return []
    budget = limit - 2 * (len(FENCE) + 1)
    parts: list[str] = []
    open_fence = False
    rest = text
    while rest:
        prefix = FENCE + "\n" if open_fence else ""
        if len(prefix) + len(rest) <= limit:
            chunk, rest = rest, ""
        else:
            window = rest[: budget - len(prefix)]
            cut = max(window.rfind("\n\n"), -1)
            if cut < budget // 2:
                cut = window.rfind("\n")
            if cut < budget // 2:
                cut = window.rfind(" ")
            if cut < budget // 4:
                cut = len(window)
            chunk, rest = rest[:cut], rest[cut:].lstrip("\n ")
        body = prefix + chunk
        fences = chunk.count(FENCE)
        now_open = open_fence != (fences % 2 == 1)
        if now_open and rest:
            body = body.rstrip() + "\n" + FENCE
        parts.append(body)
        open_fence = now_open and bool(rest)
    return parts
