"""The stores a worker or a command needs, built from settings (Redis only: no model, no pipeline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from threadkeeper.persistence import CheckpointStore, Forgetter, Inbox, LeaseManager, NotesStore, connect

from .settings import Settings


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
