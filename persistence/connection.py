"""Redis connections: the server at ``REDIS_URL`` or the embedded one, a Redis Cluster, the retry policy."""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import StoreUnavailableError, ThreadkeeperError

log = logging.getLogger("threadkeeper.persistence")


def _retry() -> Retry:
    """A command that finds its pooled connection dead (Redis restarted, a failover, a dropped socket) is sent
    again on a new connection, up to three times within about two seconds, so a Redis restart costs no
    request. A command Redis ran just before the connection dropped, or a stalled Redis runs once it goes on,
    may run twice: the stores' scripts are deduplicated (enqueue) or recognise a copy of their own write
    (``persistence.scripts``: a lease taken, a checkpoint started, appended to, committed, forked or changed) and
    answer as the first copy did."""
    # redis-py types supported_errors as Redis errors only; it retries on any exception class it is given
    errors = (RedisConnectionError, RedisTimeoutError, ConnectionResetError)
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3, supported_errors=errors)  # type: ignore[arg-type]


def connect(url: str, *, max_connections: int = 128, cluster: bool = False,
            timeout_seconds: float = 5.0) -> aioredis.Redis:
    """Return an async Redis client for ``url`` (``redis://``, ``rediss://`` or ``unix://``).

    Connections come from a blocking pool of at most ``max_connections``. With ``cluster``, ``url``
    names one node of a Redis Cluster and redis-py's cluster client routes each command to the node that
    holds its keys (every key of a conversation shares one hash slot, so every script runs on one node).

    ``timeout_seconds`` bounds each command (sending and reading its reply; 0 waits forever): a Redis that
    stops answering fails a command, which is retried on a new connection, instead of hanging a turn.
    """
    if not url:
        raise ThreadkeeperError("no Redis to connect to: set REDIS_URL, or leave it unset to use the embedded Redis")
    if cluster:
        from redis.asyncio.cluster import RedisCluster

        # redis-py's cluster client offers Redis's commands but is not typed as a Redis client
        return RedisCluster.from_url(url, max_connections=max_connections, socket_connect_timeout=5,
                                     socket_timeout=timeout_seconds or None,
                                     health_check_interval=30, retry=_retry())  # type: ignore[return-value]
    # A bounded, blocking pool: a burst of turns waits briefly for a connection instead of failing with
    # "too many connections" or opening one socket per turn (1,000 concurrent turns: 3.8 s with 128
    # connections, 5.0 s with one connection each, in ``threadkeeper bench``).
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=30,
                                                    socket_connect_timeout=5, health_check_interval=30,
                                                    socket_timeout=timeout_seconds or None,
                                                    retry=_retry(), retry_on_error=[RedisConnectionError,
                                                                                    RedisTimeoutError])
    return aioredis.Redis(connection_pool=pool)


PROBE_SECONDS = 3.0
"""How long the start-up check gives Redis to accept a connection (and a TLS handshake) and answer ``PING``."""


async def ping(client: aioredis.Redis, url: str) -> None:
    """Fail with one clear message naming ``REDIS_URL`` when Redis cannot be reached or refuses the connection (a
    password, a database, TLS: see :class:`StoreUnavailableError`).

    The first connection is a probe made once, within :data:`PROBE_SECONDS`: what the client's retries are for (a
    pooled connection that died) does not apply to a Redis never reached, so a wrong setting fails in seconds
    instead of after every retry of a connect timeout."""
    try:
        if isinstance(client, aioredis.Redis):
            await _probe(client)
        await client.ping()
    except (RedisConnectionError, RedisTimeoutError, ResponseError, OSError) as exc:
        raise StoreUnavailableError(url, exc) from exc


async def _probe(client: aioredis.Redis) -> None:
    """One connection of the client's pool, made without retries and with a short timeout, and one ``PING``."""
    pool = client.connection_pool
    options = {**pool.connection_kwargs, "retry": Retry(NoBackoff(), 0), "socket_connect_timeout": PROBE_SECONDS,
               "socket_timeout": PROBE_SECONDS}
    connection = pool.connection_class(**options)
    try:
        await connection.connect()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        await connection.send_command("PING")
        await connection.read_response()
    finally:
        await connection.disconnect()


async def durability(client: Any) -> str:
    """How Redis keeps acknowledged messages across a restart: ``aof`` (every write appended to a log),
    ``rdb`` (periodic snapshots: the writes since the last one are lost), ``none`` (a restart loses
    everything), or ``unknown`` (``CONFIG GET`` is not allowed, as on some managed services)."""
    try:
        aof = await client.config_get("appendonly")
        save = await client.config_get("save")
    except Exception:  # noqa: BLE001 - a restricted Redis cannot tell
        return "unknown"

    if _config_value(aof, "appendonly") == "yes":
        return "aof"
    return "rdb" if _config_value(save, "save") else "none"


def _config_value(reply: dict[Any, Any], key: str) -> str:
    raw = reply.get(key, reply.get(key.encode(), b""))
    return (raw.decode() if isinstance(raw, bytes) else str(raw or "")).strip()


async def eviction(client: Any) -> str:
    """Redis's ``maxmemory-policy``: ``noeviction`` (a full Redis refuses writes and drops nothing), an evicting
    policy (``allkeys-lru``, ``volatile-ttl``, …), or ``unknown`` (``CONFIG GET`` is not allowed)."""
    try:
        reply = await client.config_get("maxmemory-policy")
    except Exception:  # noqa: BLE001 - a restricted Redis cannot tell
        return "unknown"
    return _config_value(reply, "maxmemory-policy") or "unknown"


def eviction_warning(policy: str) -> str | None:
    """The one line an operator reads at start when Redis may drop stored keys (None when it does not, or cannot
    tell). Every ``volatile-*`` policy counts: the stored history's keys expire after the retention period, so
    they are the ones such a policy drops first."""
    if policy in ("noeviction", "unknown"):
        return None
    return (f"Redis at REDIS_URL evicts keys when full (maxmemory-policy {policy}): stored history and "
            "acknowledged messages can vanish without an error. Set maxmemory-policy noeviction "
            "(see docs/configuration.md).")
