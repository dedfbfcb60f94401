"""What every store shares: the client, the key layout, the Lua scripts, error translation and retention."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Sequence
from typing import Any, overload

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import scripts
from .errors import InvalidTransitionError, NotFoundError, StoreUnavailableError, ThreadkeeperError
from .keys import ConversationKeys

DAY = 86_400


def new_id(prefix: str = "cp") -> str:
    """A sortable unique id: milliseconds since the epoch, then randomness."""
    return f"{prefix}_{int(time.time() * 1000):013x}{uuid.uuid4().hex[:12]}"


@overload
def _text(raw: bytes | str) -> str: ...
@overload
def _text(raw: None) -> None: ...
@overload
def _text(raw: bytes | str | None) -> str | None: ...
def _text(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    return raw.decode() if isinstance(raw, bytes) else raw


_GLOB = re.compile(r"([*?\[\]\\])")


def glob_escape(text: str) -> str:
    """``text`` matched literally in a ``SCAN MATCH`` pattern."""
    return _GLOB.sub(r"\\\1", text)


SCRIPT_ERRORS: dict[str, type[ThreadkeeperError]] = {
    "NOTFOUND": NotFoundError,  # a checkpoint (or the parent a new one names) does not exist
    "TRANSITION": InvalidTransitionError,  # a checkpoint's status does not allow the change
    "EXISTS": ThreadkeeperError,  # a new checkpoint's id is taken
}
"""The kind a script's refusal starts with, and the exception it raises."""


class RedisStore:
    """Shared plumbing for the stores: key layout, scripts, error translation, retention."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "tk", retention_days: float = 30,
                 url: str = "") -> None:
        self.client = client
        self.prefix = prefix
        self.retention_seconds = max(1, int(retention_days * DAY))
        self.url = url or "(in-process)"
        self._scripts: dict[str, Any] = {}

    def keys(self, conversation_id: str) -> ConversationKeys:
        return ConversationKeys(self.prefix, conversation_id)

    def _script(self, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.client.register_script(getattr(scripts, name))
        return script

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        script = self._script(name)
        try:
            return await script(keys=list(keys), args=list(args))
        except ResponseError as exc:
            kind, _, message = str(exc).partition(" ")
            error = SCRIPT_ERRORS.get(kind)
            if error is not None:
                raise error(message) from None
            raise ThreadkeeperError(f"Redis rejected {name.lower()}: {exc}") from exc
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(self.url, exc) from exc

    async def reachable(self) -> bool:
        """Whether Redis answers now (a health check)."""
        return bool(await self._call(self.client.ping()))

    async def durability(self) -> str:
        """How Redis keeps what it acknowledged across its own restart (see :func:`persistence.durability`)."""
        from .connection import durability

        return await durability(self.client)

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(self.url, exc) from exc
