"""Shared fixtures: a fakeredis client and the real Redis at ``REDIS_URL``, each with its own key prefix."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import fakeredis
import pytest
import redis.asyncio as aioredis

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


async def real_redis() -> aioredis.Redis:
    """The real Redis, or a skip outside CI / a failure in CI when it cannot be reached."""
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        await client.ping()
    except (OSError, aioredis.RedisError) as exc:
        await client.aclose()
        if IN_CI:
            pytest.fail(f"real Redis required in CI but unreachable at {REDIS_URL}: {exc}")
        pytest.skip(f"real Redis unreachable at {REDIS_URL}")
    return client


async def drop_prefix(client: aioredis.Redis, prefix: str) -> None:
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        await client.delete(key)


@pytest.fixture
def prefix() -> str:
    return f"tktest-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["fakeredis", "redis"])
async def client(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[aioredis.Redis]:
    """Runs the test once on fakeredis (with Lua) and once on the real Redis."""
    if request.param == "fakeredis":
        c: aioredis.Redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        c = await real_redis()
    try:
        yield c
    finally:
        await drop_prefix(c, prefix)
        await c.aclose()


@pytest.fixture
async def fake_client(prefix: str) -> AsyncIterator[aioredis.Redis]:
    c = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    yield c
    await c.aclose()


@pytest.fixture
async def redis_client(prefix: str) -> AsyncIterator[aioredis.Redis]:
    c = await real_redis()
    try:
        yield c
    finally:
        await drop_prefix(c, prefix)
        await c.aclose()
