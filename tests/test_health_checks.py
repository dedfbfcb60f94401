"""What ``/healthz`` and the start-up lines say about two settings that fail silently otherwise: an encryption key
that cannot open the stored installations (every event of an installed workspace would fail), and a Redis whose
``maxmemory-policy`` evicts keys (stored history could vanish without an error)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cryptography.fernet import Fernet
from fakes import Step, free_port, scripted
from fakes import settings as make_settings
from slack_sdk.oauth.installation_store.models import Installation
from test_slack_bot import ENCRYPTION_KEY, make_harness

from threadkeeper.bot.server import build_web_app
from threadkeeper.bot.workspaces import KEY_WRONG, EncryptionKeyError
from threadkeeper.persistence import eviction
from threadkeeper.persistence.connection import connect
from threadkeeper.stores import open_stores

OAUTH = {"slack_client_id": "111.222", "slack_client_secret": "oauth-secret"}


@pytest.fixture
def model():
    m = scripted()
    m.default = Step(text="noted")
    return m


async def _healthz(h) -> tuple[int, dict]:
    response = await h.http.get("/healthz")
    return response.status, await response.json()


async def test_healthz_fails_when_the_key_cannot_decrypt_stored_installations(model, prefix, redis_client) -> None:
    right, http = await make_harness(prefix, redis_client, **OAUTH)
    wrong = wrong_http = None
    try:
        status, body = await _healthz(right)
        assert status == 200 and body["encryption_key"] == "no installations", "no installs yet: nothing to open"
        await right.bot.workspaces.installations.async_save(
            Installation(app_id="A1", team_id="T7", bot_token="xoxb-seven", bot_id="B7", bot_user_id="U7",
                         user_id="U1"))
        right.bot.workspaces.key_seconds = 0.0  # ask Redis again at once
        status, body = await _healthz(right)
        assert status == 200 and body["ok"] and body["encryption_key"] == "ok", body
        other = Fernet.generate_key().decode()
        wrong, wrong_http = await make_harness(prefix, redis_client, threadkeeper_encryption_key=other, **OAUTH)
        status, body = await _healthz(wrong)
        assert status == 503 and not body["ok"] and body["encryption_key"] == KEY_WRONG, body
        assert body["redis"] == "reachable", "only the key is wrong"
        assert other not in json.dumps(body)
        with pytest.raises(EncryptionKeyError, match="not the key it was stored with"):
            await wrong.bot.preflight()  # and at start: one line naming the setting, before any event is taken
        rotated, rotated_http = await make_harness(prefix, redis_client,
                                                   threadkeeper_encryption_key=f"{other},{ENCRYPTION_KEY}", **OAUTH)
        try:
            status, body = await _healthz(rotated)
            assert status == 200 and body["encryption_key"] == "ok", "the old key listed after the new one opens it"
        finally:
            await rotated_http.close()
            await rotated.slack.close()
    finally:
        for h, client in ((right, http), (wrong, wrong_http)):
            if h is not None and client is not None:
                await h.settle()
                await client.close()
                await h.slack.close()


async def test_a_bot_token_bot_says_the_key_is_not_used(model, prefix, redis_client) -> None:
    h, http = await make_harness(prefix, redis_client)
    try:
        status, body = await _healthz(h)
        assert status == 200 and body["encryption_key"] == "not used" and body["eviction"] == "unknown"
    finally:
        await http.close()
        await h.slack.close()


def _start_redis(*options: str) -> tuple[subprocess.Popen, str, str]:
    import redis

    server = shutil.which("redis-server")
    assert server
    directory = tempfile.mkdtemp(prefix="threadkeeper-evict-")
    deadline = time.monotonic() + 20
    while True:
        port = free_port()
        process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", directory, *options],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
        try:
            while process.poll() is None:
                try:
                    # the server answering is this test's own, not another run's that took the port meanwhile
                    if int(probe.info("server")["process_id"]) == process.pid:
                        return process, f"redis://127.0.0.1:{port}/0", directory
                    assert time.monotonic() < deadline, "another process's Redis answers on every port tried"
                    time.sleep(0.05)
                except (redis.RedisError, OSError):
                    assert time.monotonic() < deadline, "redis-server did not start"
                    time.sleep(0.05)
        except BaseException:
            process.kill()  # never left running when it is not handed to the caller
            process.wait()
            raise
        finally:
            probe.close()
        assert time.monotonic() < deadline, "redis-server did not start"  # the port was taken meanwhile: next one


@pytest.fixture
def redis_servers() -> Iterator[dict[str, str]]:
    """Three redis-servers of this test's own on loopback ports: one that evicts (allkeys-lru), one that does not,
    and one that refuses ``CONFIG`` (as some managed services do)."""
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server")
    started = {}
    try:
        for name, options in (("lru", ("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")),
                              ("none", ("--maxmemory-policy", "noeviction")),
                              ("closed", ("--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", ""))):
            started[name] = _start_redis(*options)
        yield {name: url for name, (_, url, _) in started.items()}
    finally:
        for process, _, directory in started.values():
            process.terminate()
            process.wait(timeout=10)
            shutil.rmtree(directory, ignore_errors=True)


async def _eviction_of(url: str) -> str:
    client = connect(url)
    try:
        return await eviction(client)
    finally:
        await client.aclose()


async def _start_lines(url: str, caplog: pytest.LogCaptureFixture, *, read_only: bool = False) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="threadkeeper"):
        async with open_stores(make_settings("tkevict", redis_url=url), read_only=read_only):
            pass
    return [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]


async def test_a_redis_that_evicts_keys_is_named_at_start_and_in_healthz(redis_servers, model, caplog) -> None:
    assert await _eviction_of(redis_servers["lru"]) == "allkeys-lru"
    assert await _eviction_of(redis_servers["none"]) == "noeviction"
    assert await _eviction_of(redis_servers["closed"]) == "unknown", "CONFIG refused: unknown, never a crash"
    lines = await _start_lines(redis_servers["lru"], caplog)
    assert len(lines) == 1 and "allkeys-lru" in lines[0] and "Set maxmemory-policy noeviction" in lines[0], lines
    assert await _start_lines(redis_servers["none"], caplog) == []
    assert await _start_lines(redis_servers["closed"], caplog) == [], "a Redis that cannot tell: nothing said"
    assert await _start_lines(redis_servers["lru"], caplog, read_only=True) == [], "a command that only reads"
    client = connect(redis_servers["lru"])
    try:
        h, http = await make_harness("tkevict", client)
        health = TestClient(TestServer(build_web_app(h.bot, lambda: h.stores.client.ping(),
                                                     eviction=await h.pipeline.eviction()), host="127.0.0.1"))
        await health.start_server()
        try:  # as `serve` builds it: the policy asked of the store at start
            response = await health.get("/healthz")
            body = await response.json()
            assert response.status == 200 and body["eviction"] == "allkeys-lru", body
        finally:
            await health.close()
            await http.close()
            await h.slack.close()
    finally:
        await client.aclose()
