"""Shared fixtures: a fakeredis client, the real Redis at ``THREADKEEPER_TEST_REDIS_URL`` and a loopback Redis
Cluster, each with its own key prefix."""

from __future__ import annotations

import os

# Whichever test module imports litellm first, it must not try to download its price map (no network here).
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import asyncio  # noqa: E402
import uuid  # noqa: E402
from collections.abc import AsyncIterator, Iterator  # noqa: E402
from contextlib import asynccontextmanager  # noqa: E402

import fakeredis  # noqa: E402
import pytest  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402

REDIS_URL = os.environ.get("THREADKEEPER_TEST_REDIS_URL") or "redis://127.0.0.1:6379/15"
"""The Redis the suite uses: its own variable, so a ``REDIS_URL`` exported for the product never points the
tests at someone's data."""
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
    """Removes the test's keys, once the compactions its pipelines planned ahead have ended (a job still planning
    would write its plan after the keys were removed, and leave it behind)."""
    await planned_ahead()
    batch: list[bytes] = []
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
    for start in range(0, len(batch), 500):
        await client.delete(*batch[start:start + 500])


async def planned_ahead() -> None:
    """Wait for the compactions being planned ahead in this event loop (the product's ``prepare:<conversation>``
    jobs, which a test that ran turns may leave running), whichever pipeline started them; one still planning after
    30 s (held by a test that failed before letting its summarizer answer) is cancelled."""
    me = asyncio.current_task()
    while True:
        jobs = [t for t in asyncio.all_tasks() if t is not me and not t.done() and t.get_name().startswith("prepare:")]
        if not jobs:
            return
        _, stuck = await asyncio.wait(jobs, timeout=30)
        for job in stuck:
            job.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)


def pytest_configure(config: pytest.Config) -> None:
    # Test processes (pytest-xdist, ``--dist load``) are handed one test at a time, not a block of the collection
    # each: the slowest tests, first in the collection (below), go to whichever process is free, and none waits
    # queued behind another's block.
    if config.getoption("dist", "no") == "load" and config.getoption("maxschedchunk", None) is None:
        config.option.maxschedchunk = 1


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow(seconds)`` run first, the slowest first, so that in several test processes none of
    them starts near the end and the run ends with the quick ones, spread over the processes."""
    def seconds(item: pytest.Item) -> float:
        mark = item.get_closest_marker("slow")
        return float(mark.args[0]) if mark is not None else 0.0

    items.sort(key=seconds, reverse=True)  # stable: the others keep their order


@pytest.fixture
def prefix() -> str:
    return f"tktest-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A 3-master Redis Cluster on free loopback ports, started once for the session and stopped after it."""
    import redis_cluster

    if not redis_cluster.available():
        message = "redis-server is needed to start a Redis Cluster on loopback"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    cluster = redis_cluster.start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@asynccontextmanager
async def client_of(kind: str, request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[aioredis.Redis]:
    """A client of ``kind``, whose keys under ``prefix`` are removed afterwards: ``fakeredis`` (with Lua),
    ``redis`` (the real one) or ``cluster`` (the loopback Redis Cluster, through the client the product
    uses for one)."""
    if kind == "fakeredis":
        c: aioredis.Redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    elif kind == "cluster":
        from threadkeeper.persistence import connect

        c = connect(request.getfixturevalue("redis_cluster_url"), cluster=True, max_connections=32)
    else:
        c = await real_redis()
    try:
        yield c
    finally:
        await drop_prefix(c, prefix)
        await c.aclose()


@pytest.fixture(params=["fakeredis", "redis"])
async def client(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[aioredis.Redis]:
    """Runs the test once on fakeredis (with Lua) and once on the real Redis."""
    async with client_of(request.param, request, prefix) as c:
        yield c


@pytest.fixture
async def cluster_client(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[aioredis.Redis]:
    async with client_of("cluster", request, prefix) as c:
        yield c


@pytest.fixture
async def fake_client(prefix: str) -> AsyncIterator[aioredis.Redis]:
    c = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    yield c
    await c.aclose()


@pytest.fixture
async def redis_client(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[aioredis.Redis]:
    async with client_of("redis", request, prefix) as c:
        yield c


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch):
    """A loopback model server (OpenAI- and Ollama-compatible) that litellm's provider routes are pointed at."""
    from model_server import ModelServer

    srv = await ModelServer().start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{srv.url}/v1")
    monkeypatch.setenv("OPENAI_API_BASE", f"{srv.url}/v1")
    monkeypatch.setenv("OLLAMA_API_BASE", srv.url)
    yield srv
    await srv.stop()
