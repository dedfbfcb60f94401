"""The composition root: builds the real object graph from settings.

Tests build their graphs at this same seam (passing a fake Redis or a scripted model) instead of
patching globals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from persistence import CheckpointStore, Inbox, LeaseManager, connect

from .settings import Settings


@dataclass
class Stores:
    client: aioredis.Redis
    checkpoints: CheckpointStore
    inbox: Inbox
    leases: LeaseManager

    async def close(self) -> None:
        await self.client.aclose()


def build_stores(settings: Settings, *, client: aioredis.Redis | None = None, server: Any = None) -> Stores:
    client = client or connect(settings.redis_url, server=server)
    common = dict(prefix=settings.threadkeeper_key_prefix, retention_days=settings.threadkeeper_retention_days,
                  url=settings.redis_url or "")
    return Stores(client=client, checkpoints=CheckpointStore(client, **common), inbox=Inbox(client, **common),
                  leases=LeaseManager(client, **common))
