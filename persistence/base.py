"""What every store shares: the client, the key layout, the Lua scripts, error translation and retention."""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, overload

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import scripts
from .errors import InvalidTransitionError, LeaseLostError, NotFoundError, StoreUnavailableError, ThreadkeeperError
from .keys import ConversationKeys, directory_key

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
    "LEASE": LeaseLostError,  # the writer's lease is another worker's now (fencing)
}
"""The kind a script's refusal starts with, and the exception it raises."""


def _refused(name: str, exc: ResponseError) -> ThreadkeeperError:
    """A script's refusal as the error its kind names (``SCRIPT_ERRORS``), else as Redis said it."""
    kind, _, message = str(exc).partition(" ")
    error = SCRIPT_ERRORS.get(kind)
    if error is not None:
        return error(message)
    return ThreadkeeperError(f"Redis rejected {name.lower()}: {exc}")


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
            raise _refused(name, exc) from None
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(self.url, exc) from exc

    async def _fenced(self, name: str, conversation_id: str, token: str, args: Sequence[Any],
                      extra: Sequence[str] = (), then: Callable[[Any], None] | None = None) -> Any:
        """Run the fenced script ``name`` (one written on ``scripts._FENCED``) on the conversation's keys as the
        holder of the lease ``token``: refused with :class:`LeaseLostError` when another worker holds the lease
        now ("" writes unfenced: a process that opened no turn, such as the command line). ``extra``: keys of the
        conversation the script takes after its lease; ``then``: commands sent with it (:meth:`_run_then`)."""
        keys = self.keys(conversation_id)
        run = [*keys.durable, keys.lease, *extra], [token, *args]
        return await (self._run(name, *run) if then is None else self._run_then(name, *run, then))

    @property
    def clustered(self) -> bool:
        """Whether the client talks to a Redis Cluster (keys of different slots may live on different nodes)."""
        return isinstance(self.client, RedisCluster)

    async def _run_then(self, name: str, keys: Sequence[str], args: Sequence[Any],
                        then: Callable[[Any], None]) -> Any:
        """Run script ``name``, then the commands ``then`` adds to a pipeline, in one round trip where Redis keeps
        their order (one server); on a Cluster, where they may live on other nodes, the commands are sent after the
        script's answer. The commands must be harmless to repeat: when Redis lost its scripts (a restart), the
        script is loaded and run, and the commands sent again after it."""
        if self.clustered:
            result = await self._run(name, keys, args)
            await self._send(then)
            return result
        script = self._script(name)
        pipe = self.client.pipeline(transaction=False)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        then(pipe)
        try:
            results = await pipe.execute(raise_on_error=False)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(self.url, exc) from exc
        first = results[0]
        if isinstance(first, NoScriptError):
            result = await self._run(name, keys, args)
            await self._send(then)
            return result
        if isinstance(first, ResponseError):
            raise _refused(name, first)
        failed = next((r for r in results[1:] if isinstance(r, Exception)), None)
        if failed is not None:
            raise ThreadkeeperError(f"Redis rejected a command sent with {name.lower()}: {failed}")
        return first

    def _listing(self, pipe: Any, conversation_id: str, now: float) -> None:
        """Add to ``pipe`` what keeps the conversation in the directory (:func:`keys.directory_key`) at ``now``: sent
        with every write that changes its state, so listing the conversations reads one sorted set, never a scan."""
        pipe.zadd(directory_key(self.prefix), {conversation_id: now})
        pipe.expire(directory_key(self.prefix), self.retention_seconds)

    async def _send(self, commands: Callable[[Any], None]) -> None:
        pipe = self.client.pipeline(transaction=False)
        commands(pipe)
        await self._call(pipe.execute())

    # -- leases: one holder at a time, known by its token; a turn's opening takes its conversation's lease in the
    # same script as its reads (BEGIN), every other holder through these three.

    async def _take_lease(self, key: str, seconds: float) -> str | None:
        """Take the lease ``key`` for ``seconds`` if nobody holds it (or its holder's expired): its token, or None."""
        token = secrets.token_hex(12)
        ok = int(await self._run("TAKE_LEASE", [key], [token, max(1, int(seconds * 1000))]))
        return token if ok else None

    async def _renew_lease(self, key: str, token: str, seconds: float) -> bool:
        """Extend a held lease by ``seconds``; False when it is no longer ``token``'s."""
        return bool(int(await self._run("RENEW_LEASE", [key], [token, max(1, int(seconds * 1000))])))

    async def _release_lease(self, key: str, token: str) -> bool:
        """Release a held lease; a stale holder cannot release someone else's."""
        return bool(int(await self._run("RELEASE_LEASE", [key], [token])))

    async def reachable(self) -> bool:
        """Whether Redis answers now (a health check)."""
        return bool(await self._call(self.client.ping()))

    async def durability(self) -> str:
        """How Redis keeps what it acknowledged across its own restart (see :func:`persistence.durability`)."""
        from .connection import durability

        return await durability(self.client)

    async def eviction(self) -> str:
        """Redis's ``maxmemory-policy`` (see :func:`persistence.eviction`)."""
        from .connection import eviction

        return await eviction(self.client)

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError(self.url, exc) from exc
