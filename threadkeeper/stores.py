"""The stores a worker or a command needs, built from settings (Redis only: no model, no pipeline)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from threadkeeper.persistence import CheckpointStore, Forgetter, Inbox, LeaseManager, NotesStore, connect, ping

from .settings import Settings

if TYPE_CHECKING:
    from threadkeeper.services import Pipeline


@dataclass
class Stores:
    client: aioredis.Redis
    checkpoints: CheckpointStore
    inbox: Inbox
    leases: LeaseManager
    notes: NotesStore
    forget: Forgetter

    async def close(self) -> None:
        await self.client.aclose()


def build_stores(settings: Settings, *, client: aioredis.Redis | None = None, server: Any = None) -> Stores:
    client = client or connect(settings.redis_url, server=server, cluster=settings.redis_cluster,
                               max_connections=settings.threadkeeper_redis_max_connections,
                               timeout_seconds=settings.threadkeeper_redis_timeout_seconds)
    common = dict(prefix=settings.threadkeeper_key_prefix, retention_days=settings.threadkeeper_retention_days,
                  url=settings.redis_url or "")
    checkpoints = CheckpointStore(client, cache_bytes=settings.threadkeeper_cache_mb * 1024 * 1024, **common)
    return Stores(client=client, checkpoints=checkpoints, inbox=Inbox(client, **common),
                  leases=LeaseManager(client, **common), notes=NotesStore(client, **common),
                  forget=Forgetter(client, **common))


async def with_stores(settings: Settings, work: Callable[[Stores], Awaitable[int]]) -> int:
    """Run ``work`` with the stores of ``settings`` (Redis checked first), closing them afterwards."""
    stores = build_stores(settings)
    try:
        await ping(stores.client, settings.redis_url or "(in-process)")
        return await work(stores)
    finally:
        await stores.close()


async def with_pipeline(settings: Settings, work: Callable[[Stores, Pipeline], Awaitable[int]], *,
                        model: str | None = None, context_window: int | None = None) -> int:
    """Run ``work`` with the stores and the pipeline of ``settings`` (``model`` and ``context_window`` override)."""
    from .root import build_pipeline

    async def inner(stores: Stores) -> int:
        return await work(stores, build_pipeline(settings, stores, model=model, context_window=context_window))

    return await with_stores(settings, inner)
