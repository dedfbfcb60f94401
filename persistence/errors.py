"""Errors raised by Threadkeeper. Every message says what went wrong and what to do."""

from __future__ import annotations

import re


class ThreadkeeperError(Exception):
    """Base class of every error Threadkeeper raises on purpose."""


class StoreUnavailableError(ThreadkeeperError):
    """Redis cannot be reached, or refuses the connection ``REDIS_URL`` describes. The message is one line that
    names ``REDIS_URL``, says which of them it is (:func:`_redis_problem`) and how to fix it."""

    def __init__(self, url: str, cause: BaseException | None = None) -> None:
        shown = without_password(url)
        super().__init__(_redis_problem(url, shown, cause))
        self.url = shown


def _redis_problem(url: str, shown: str, cause: BaseException | None) -> str:
    """What went wrong connecting to ``url``, by the kind of error Redis (or the network) answered with."""
    from urllib.parse import urlsplit

    from redis.exceptions import AuthenticationError, ResponseError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    detail = without_password(str(cause).strip().splitlines()[0].rstrip(".")) if cause is not None and str(cause) \
        else ""
    said = f" ({detail})" if detail else ""
    where = f"Redis at REDIS_URL={shown}"
    parts = urlsplit(url)
    how = "redis://:PASSWORD@host:port/0, or redis://USER:PASSWORD@host:port/0 for an ACL user"
    if isinstance(cause, AuthenticationError):
        if parts.password:
            return f"{where} refused the password in REDIS_URL{said}: correct it ({how})."
        return f"{where} requires a password{said}: put it in REDIS_URL ({how})."
    database = parts.path.strip("/")
    if isinstance(cause, ResponseError) and database.isdigit() and int(database) > 0:
        return (f"{where} has no database {database}{said}: end REDIS_URL with a database that Redis has (/0 to /15 "
                "unless its `databases` setting allows more).")
    if isinstance(cause, (RedisTimeoutError, TimeoutError)) and parts.scheme == "rediss":
        return (f"{where} did not complete a TLS handshake{said}: if that server does not use TLS, write redis:// "
                "instead of rediss://; if it does, check that its host and port are right.")
    return (f"cannot reach {where}{said}. Start Redis or point REDIS_URL at a reachable server (or unset REDIS_URL "
            "to use the embedded Redis).")


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
