"""Durability: the bot says how Redis keeps acknowledged messages across a restart of Redis itself."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from fakes import free_port

from threadkeeper.persistence import durability

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to start its own")


async def _started(tmp: Path, *args: str) -> tuple[subprocess.Popen[bytes], aioredis.Redis]:
    port = free_port()
    process = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp),
                                *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = aioredis.Redis(host="127.0.0.1", port=port)
    for _ in range(100):
        try:
            await client.ping()
            return process, client
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("redis-server did not start")


@pytest.mark.parametrize("args, expected", [(("--appendonly", "yes", "--save", ""), "aof"),
                                            (("--appendonly", "no", "--save", "3600 1"), "rdb"),
                                            (("--appendonly", "no", "--save", ""), "none")])
async def test_durability_is_read_from_the_redis_settings(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    process, client = await _started(tmp_path, *args)
    try:
        assert await durability(client) == expected
    finally:
        await client.aclose()
        process.terminate()
        process.wait(timeout=10)


async def test_durability_is_unknown_when_redis_will_not_say(tmp_path: Path) -> None:
    process, client = await _started(tmp_path, "--rename-command", "CONFIG", "")
    try:
        assert await durability(client) == "unknown"
    finally:
        await client.aclose()
        process.terminate()
        process.wait(timeout=10)
