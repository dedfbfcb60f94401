"""Errors raised by Threadkeeper. Every message says what went wrong and what to do."""

from __future__ import annotations

import re


class ThreadkeeperError(Exception):
    """Base class of every error Threadkeeper raises on purpose."""


class StoreUnavailableError(ThreadkeeperError):
    """Redis cannot be reached."""

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        detail = f": {cause}" if cause else ""
        shown = without_password(url)
        super().__init__(
            f"cannot reach Redis at REDIS_URL={shown}{without_password(detail)}. Start Redis or point REDIS_URL "
            "at a reachable server (or unset REDIS_URL to use the embedded Redis)."
        )
        self.url = shown


def without_password(text: str) -> str:
    """``redis://user:secret@host`` → ``redis://user:***@host`` (error messages and logs never show it)."""
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@", r"\1***@", text)


class CorruptRecordError(ThreadkeeperError):
    """A stored record does not parse or validate. It is never silently replaced."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"stored record {key!r} is unreadable: {detail}. It was left untouched.")
        self.key = key


class NotFoundError(ThreadkeeperError):
    """A conversation or checkpoint does not exist."""


class InvalidTransitionError(ThreadkeeperError):
    """A checkpoint was asked to do something its status forbids."""


class LeaseLostError(ThreadkeeperError):
    """A writer's lease on the conversation is held by another worker now: what it writes is refused (fencing), so
    a worker that stalled past its lease can never overwrite, fork or trim what the new holder does."""


class HeadConflictError(ThreadkeeperError):
    """The head moved since the writer started; nothing was overwritten."""

    def __init__(self, conversation_id: str, expected: str | None, actual: str | None) -> None:
        super().__init__(
            f"head of {conversation_id} moved: expected {expected or '(none)'}, found {actual or '(none)'}"
        )
        self.expected = expected
        self.actual = actual
