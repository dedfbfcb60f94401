"""The stores a worker or a command needs, built from settings (Redis only: no model, no pipeline)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from .settings import Settings

if TYPE_CHECKING:  # the Redis client and the stores are imported when stores are built (6 MB a command may not need)
    import redis.asyncio as aioredis

    from threadkeeper.persistence import (
        CheckpointStore,
        EpochIndexStore,
        Forgetter,
        Inbox,
        LeaseManager,
        MemoryStore,
        NotesStore,
        Pace,
        Signals,
        VectorStore,
    )
    from threadkeeper.services import Pipeline

log = logging.getLogger("threadkeeper")


class _StoreOptions(TypedDict):
    """What every store is built with (:class:`threadkeeper.persistence.base.RedisStore`'s options)."""

    prefix: str
    retention_days: float
    url: str


@dataclass
class Stores:
    client: aioredis.Redis
    checkpoints: CheckpointStore
    inbox: Inbox
    leases: LeaseManager
    notes: NotesStore
    forget: Forgetter
    memory: MemoryStore
    signals: Signals
    pace: Pace
    vectors: VectorStore
    epochs: EpochIndexStore
    where: str = "Redis at REDIS_URL"
    """What the stores run on, for people: ``Redis at REDIS_URL`` or the embedded Redis and its data directory."""

    async def close(self) -> None:
        await self.client.aclose()


def build_stores(settings: Settings, *, client: aioredis.Redis | None = None, url: str | None = None) -> Stores:
    """The stores on ``client``, or on a new client of ``url`` (default ``REDIS_URL``; :func:`open_stores`
    passes the embedded Redis's when it is unset)."""
    from threadkeeper.persistence import (
        CheckpointStore,
        EpochIndexStore,
        Forgetter,
        Inbox,
        LeaseManager,
        MemoryStore,
        NotesStore,
        Pace,
        Signals,
        VectorStore,
        connect,
    )

    url = url or settings.redis_url
    if client is None:
        if not url:
            from threadkeeper.persistence import ThreadkeeperError

            raise ThreadkeeperError("REDIS_URL is not set: open the stores with open_stores(), which starts the "
                                    "embedded Redis, or pass a client")
        client = connect(url, cluster=settings.redis_cluster,
                         max_connections=settings.threadkeeper_redis_max_connections,
                         timeout_seconds=settings.threadkeeper_redis_timeout_seconds)
    common = _StoreOptions(prefix=settings.threadkeeper_key_prefix,
                           retention_days=settings.threadkeeper_retention_days, url=url or "")
    checkpoints = CheckpointStore(client, cache_bytes=settings.threadkeeper_cache_mb * 1024 * 1024, **common)
    return Stores(client=client, checkpoints=checkpoints, inbox=Inbox(client, **common),
                  leases=LeaseManager(client, **common), notes=NotesStore(client, **common),
                  forget=Forgetter(client, **common), memory=MemoryStore(client, **common),
                  signals=Signals(client, **common), pace=Pace(client, **common),
                  vectors=VectorStore(client, **common), epochs=EpochIndexStore(client, **common))


@asynccontextmanager
async def open_stores(settings: Settings, *, read_only: bool = False) -> AsyncIterator[Stores]:
    """The stores of ``settings`` with Redis checked first: the Redis at ``REDIS_URL``, or, when it is unset,
    the embedded Redis of ``THREADKEEPER_DATA_DIR`` (started if no other process runs it, and stopped on the
    way out if no other process uses it). ``read_only``: a command that only reads (or deletes) what is stored
    makes no embedded store where there is none; it fails with :class:`NothingStoredError` instead. A command
    that writes is warned, in one line, when Redis may evict what it stores (its ``maxmemory-policy``)."""
    from threadkeeper.persistence import eviction, eviction_warning, ping

    embedded = None
    url = settings.redis_url
    if not url:
        from .embedded import EmbeddedRedis, NothingStoredError

        embedded = EmbeddedRedis(settings.threadkeeper_data_dir)
        if read_only and not embedded.exists():
            raise NothingStoredError(embedded.data_dir)
        url = await asyncio.to_thread(embedded.start)
    try:
        stores = build_stores(settings, url=url)
        if embedded is not None:
            stores.where = embedded.describe()
        try:
            await ping(stores.client, url)
            warning = None if read_only else eviction_warning(await eviction(stores.client))
            if warning:
                log.warning("%s", warning)
            yield stores
        finally:
            await stores.close()
    finally:
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)


async def with_stores(settings: Settings, work: Callable[[Stores], Awaitable[int]], *,
                      read_only: bool = False) -> int:
    """Run ``work`` with the stores of ``settings`` (see :func:`open_stores`), closing them afterwards."""
    async with open_stores(settings, read_only=read_only) as stores:
        return await work(stores)


async def with_pipeline(settings: Settings, work: Callable[[Stores, Pipeline], Awaitable[int]], *,
                        model: str | None = None, context_window: int | None = None, read_only: bool = False) -> int:
    """Run ``work`` with the stores and the pipeline of ``settings`` (``model`` and ``context_window`` override;
    ``read_only``: see :func:`open_stores`)."""
    from .root import build_pipeline

    async def inner(stores: Stores) -> int:
        return await work(stores, build_pipeline(settings, stores, model=model, context_window=context_window))

    return await with_stores(settings, inner, read_only=read_only)
