"""A memory job's lease: one worker extracts a conversation or consolidates a scope at a time, and renews the lease
while it works."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from threadkeeper.persistence import MemoryStore

log = logging.getLogger("threadkeeper.memory")


@asynccontextmanager
async def held(store: MemoryStore, workspace: str, name: str, seconds: float) -> AsyncIterator[str | None]:
    """The lease ``name`` of ``workspace`` while the block runs (its token), renewed every third of ``seconds`` and
    released after; None when another worker holds it."""
    token = await store.claim(workspace, name, seconds)
    if token is None:
        yield None
        return
    heartbeat = asyncio.create_task(_heartbeat(store, workspace, name, token, seconds))
    try:
        yield token
    finally:
        heartbeat.cancel()
        await store.release(workspace, name, token)


async def _heartbeat(store: MemoryStore, workspace: str, name: str, token: str, seconds: float) -> None:
    every = max(0.05, seconds / 3)
    while True:
        await asyncio.sleep(every)
        if not await store.renew(workspace, name, token, seconds):
            log.warning("memory lease %s of %s lost", name, workspace)
            return
