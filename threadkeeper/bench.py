"""``threadkeeper bench``: speed, write cost, compaction cost, throughput and memory, measured on real Redis.

Every figure comes from one run so ratios are fair; latencies are medians over repeated runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, NamedTuple

import redis.asyncio as aioredis

from threadkeeper.persistence import CheckpointOutcome, CheckpointStore, Usage, ping
from threadkeeper.persistence.keys import dead_registry_key, directory_built_key, directory_key, pending_key
from threadkeeper.services import Conversation, measure
from threadkeeper.services.handoff import Compactor
from threadkeeper.services.recall import Recall
from threadkeeper.services.turn import SilentEvents

from .bench_data import chat_text, fill, fill_epochs, filler, message, note_cost_us, redaction_ms_adversarial
from .bench_flood import flood_process_metrics
from .bench_turns import turn_process_metrics
from .root import build_pipeline, build_stores
from .settings import Settings

LATENCY_PROVIDER = "threadkeeper-bench"


class CountingConnection(aioredis.Connection):
    """Counts the bytes this process sends to Redis."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, (bytes, bytearray, memoryview, str)) else command
        CountingConnection.sent += sum(len(c) for c in chunks)
        await super().send_packed_command(command, check_health)


def _slow_provider(latency: float) -> str:
    """A litellm custom provider that answers after ``latency`` seconds: a real model's route (litellm's own
    request handling and its thread pool) without a network. Returns the model name to configure."""
    from threadkeeper.services.models._litellm import CustomLLM, litellm, register_provider

    class SlowModel(CustomLLM):
        async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(latency)
            return litellm.ModelResponse(model=model, choices=[{"index": 0, "finish_reason": "stop",
                                                                "message": {"role": "assistant", "content": "done"}}],
                                         usage={"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101})

    register_provider(LATENCY_PROVIDER, SlowModel())
    litellm.register_model({f"{LATENCY_PROVIDER}/slow": {
        "max_input_tokens": 32_000, "max_tokens": 32_000, "max_output_tokens": 4096, "mode": "chat",
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "litellm_provider": LATENCY_PROVIDER,
        "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0}})
    return f"{LATENCY_PROVIDER}/slow"


REPLY_PROVIDER = "threadkeeper-bench-reply"


def _latency_models(chat_seconds: float, summary_seconds: float) -> tuple[str, str]:
    """A litellm custom provider with two models: ``chat`` answers after ``chat_seconds``, ``summary`` (the
    summarizer) after ``summary_seconds``; neither reports usage, so sizes are compared on the local estimate.
    Returns the two model names."""
    from threadkeeper.services.models._litellm import CustomLLM, litellm, register_provider

    class Latent(CustomLLM):
        async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            summarizing = "summary" in model
            await asyncio.sleep(summary_seconds if summarizing else chat_seconds)
            text = "- the thread went on with its status updates" if summarizing else "Noted, thanks."
            return litellm.ModelResponse(model=model, choices=[{"index": 0, "finish_reason": "stop",
                                                                "message": {"role": "assistant", "content": text}}])

    register_provider(REPLY_PROVIDER, Latent())
    for name in ("chat", "summary"):
        litellm.register_model({f"{REPLY_PROVIDER}/{name}": {
            "max_input_tokens": 8_000, "max_tokens": 8_000, "max_output_tokens": 1_024, "mode": "chat",
            "input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "litellm_provider": REPLY_PROVIDER,
            "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0}})
    return f"{REPLY_PROVIDER}/chat", f"{REPLY_PROVIDER}/summary"


class _Delivered(SilentEvents):
    """Turn events that note when each reply is delivered."""

    def __init__(self) -> None:
        self.at: list[float] = []

    async def reply(self, conversation: Conversation, text: str, *, kind: str, trace_id: str | None,
                    checkpoint_id: str | None = None, notice: str | None = None,
                    sources: Sequence[Any] = ()) -> bool | None:
        self.at.append(time.perf_counter())
        return None


def _p95(values: Sequence[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


async def _reply_latency_bench(local: Settings, client: aioredis.Redis, *, quick: bool) -> dict[str, float]:
    """Reply latency in a long thread with a model that takes seconds and a summarizer that takes longer (8,000-token
    window): four people's messages, then a question to the bot, then its reply, again and again. Compacting
    turns' p95 against the others' p95 (``THREADKEEPER_PREPARE_COMPACTION=false`` gives the figure of a compaction
    made while the person waits)."""
    chat_seconds, summary_seconds, turns = (0.2, 0.3, 18) if quick else (2.0, 3.0, 50)
    chat, summary = _latency_models(chat_seconds, summary_seconds)
    settings = local.model_copy(update={"ai_model": chat, "ai_fast_model": summary, "ai_retry_attempts": 1,
                                        "ai_model_context_window_tokens": 8_000,
                                        "ai_fast_model_context_window_tokens": 8_000})
    pipeline = build_pipeline(settings, build_stores(settings, client=client))
    cid = "bench:reply:slow-summarizer"
    budget = pipeline.budget
    rng = random.Random(5)
    n = 0

    async def said(reply_expected: bool) -> None:
        nonlocal n
        n += 1
        text = (f"update {n}: {rng.choice(_MEMORY_WORDS)} for {rng.choice(_MEMORY_WORDS)} moved to "
                f"{rng.choice(_MEMORY_WORDS)}; ticket OPS-{rng.randrange(10_000)} has {rng.randrange(100)} items left, "
                f"{rng.choice(_MEMORY_WORDS)} {rng.choice(_MEMORY_WORDS)} by {rng.choice(('Mon', 'Tue', 'Fri'))}")
        await pipeline.submit(cid, ("@bot what changed? " if reply_expected else "") + text,
                              author=f"U{n % 7}", id=f"1700000000.{n:06d}", reply_expected=reply_expected)

    # the thread recorded earlier, up to 60% of the usable window (no model is asked for it)
    while not (await pipeline.checkpoints.get_state(cid)) or measure(
            await pipeline.checkpoints.load_history(cid), fixed_prompt_tokens=budget.fixed_prompt_tokens) \
            < budget.usable_tokens * 0.6:
        for _ in range(5):
            await said(False)
        await pipeline.run(cid)
    # A process's first call of each model costs more (litellm sets itself up): made before the timed turns.
    events = _Delivered()
    await said(True)
    await pipeline.run(cid, events)
    for i in range(12):  # (more than a compaction keeps verbatim, so the summarizer is asked)
        await pipeline.submit(f"{cid}:warm-up", f"warm-up message {i}: " + "the rollout went fine. " * 10, author="U1",
                              id=f"1.{i:06d}", reply_expected=False)
    await pipeline.run(f"{cid}:warm-up")
    await pipeline.compact(f"{cid}:warm-up")
    await pipeline.settle()
    ordinary: list[float] = []
    compacting: list[float] = []
    adopted = 0
    for _ in range(turns):
        for _ in range(4):
            await said(False)
        await said(True)
        started = time.perf_counter()
        results = await pipeline.run(cid, events)
        if not results or not events.at:
            raise RuntimeError("the slow-summarizer bench got no reply")
        seconds = events.at.pop() - started
        report = results[0].compaction
        (compacting if report is not None else ordinary).append(seconds)
        if report is not None and report.new_checkpoint_id is not None:
            fork = await pipeline.checkpoints.get(cid, report.new_checkpoint_id)
            adopted += "prepared_from" in fork.meta.info
    await pipeline.settle()
    if not compacting or not ordinary:
        raise RuntimeError(f"the slow-summarizer bench made {len(compacting)} compacting turns of {turns}")
    return {"reply_p95_over_p50_with_slow_summarizer": round(_p95(compacting) / _p95(ordinary), 3),
            "reply_s_p95_ordinary_with_slow_summarizer": round(_p95(ordinary), 3),
            "reply_s_p95_compacting_with_slow_summarizer": round(_p95(compacting), 3),
            "reply_s_max_compacting_with_slow_summarizer": round(max(compacting), 3),
            "compacting_turns_with_slow_summarizer": len(compacting),
            "compactions_planned_ahead_with_slow_summarizer": adopted}


async def _recall_bench(local: Settings, client: aioredis.Redis, sizes: Sequence[int], repeats: int,
                        progress: Callable[[str], None], *, quick: bool = False) -> dict[str, float]:
    """Recall over a conversation's earlier epochs: cold (a worker with no index reads Redis and builds it: the
    median of five, of three at 100,000 or with ``quick``) and warm (the index is held), and the memory the index
    adds beside the history cache."""
    out: dict[str, float] = {}
    pipeline = build_pipeline(local, build_stores(local, client=client), context_window=32_000)
    cap = pipeline.budget.recall_tokens
    rng = random.Random(11)
    for n in sizes:
        progress(f"recall over {n:,} messages")
        cid = f"bench:recall:{n}"
        await fill_epochs(pipeline.checkpoints, cid, n)
        queries = [pipeline.message(chat_text(rng, 8)) for _ in range(repeats)]
        colds = []
        for i in range(3 if n >= 100_000 or quick else 5):
            fresh = build_stores(local, client=client)
            recall = Recall(fresh.checkpoints, fresh.notes, pipeline.tokenizer)
            started = time.perf_counter()
            history = await fresh.checkpoints.load_history(cid)
            await recall.recall(cid, history, history.messages, [queries[i]], cap)
            colds.append((time.perf_counter() - started) * 1000)
        out[f"recall_cold_ms_{n}"] = round(statistics.median(colds), 1)
        notes = await fresh.notes.get(cid)
        warm = []
        for query in queries:
            started = time.perf_counter()
            result = await recall.recall(cid, history, history.messages, [query], cap, notes=notes)
            warm.append((time.perf_counter() - started) * 1000)
            assert result.ids, "the bench queries share words with the thread"
        out[f"recall_warm_ms_p50_{n}"] = round(statistics.median(warm), 3)
        if n == 10_000:
            tracemalloc.start()
            fresh = build_stores(local, client=client)
            base = tracemalloc.get_traced_memory()[0]
            history = await fresh.checkpoints.load_history(cid)
            epochs = [await fresh.checkpoints.load_history(cid, c.id) for c in await _epoch_ends(fresh, cid)]
            cached = tracemalloc.get_traced_memory()[0] - base
            recall = Recall(fresh.checkpoints, fresh.notes, pipeline.tokenizer)
            await recall.recall(cid, history, history.messages, [queries[0]], cap, notes=notes)
            indexed = tracemalloc.get_traced_memory()[0] - base - cached
            tracemalloc.stop()
            out["history_cache_kb_per_1000"] = round(cached / 1024 / (n / 1000), 1)
            out["recall_index_kb_per_1000"] = round(indexed / 1024 / (n / 1000), 1)
            out["recall_index_share_of_cache"] = round(indexed / max(cached, 1), 3)
            del epochs
    return out


_MEMORY_WORDS = ("staging cluster deploy billing outage ticket rota oncall kestrel falcon friday tuesday vendor "
                 "contract renewal budget migration database replica region latency alert dashboard runbook release "
                 "freeze owner review design launch customer escalation incident postmortem capacity quota").split()


async def _memory_bench(local: Settings, client: aioredis.Redis, sizes: Sequence[int], repeats: int,
                        progress: Callable[[str], None]) -> dict[str, float]:
    """Memory across conversations at ``sizes`` records in one workspace (50 channels): the warm read a turn does
    (switches, generation, search, render, usage), building the index cold, and consolidating one channel."""
    from threadkeeper.persistence import MemoryRecord
    from threadkeeper.services import Tokenizer
    from threadkeeper.services.memory import Memory, MemoryConfig, consolidated

    stores = build_stores(local, client=client)
    out: dict[str, float] = {}
    rnd = random.Random(7)
    now = time.time()
    questions = ["who owns the billing outage ticket?", "what is the staging cluster's region and latency?",
                 "when does the release freeze start?"]
    for n in sizes:
        team = f"TBENCH{n}"
        progress(f"memory: {n:,} records")
        records = [MemoryRecord(id=f"mem_{i:08x}", text=" ".join(rnd.choice(_MEMORY_WORDS) for _ in range(10))
                                + f" REF-{i}", kind="fact", workspace=team, channel=f"C{i % 50}",
                                conversation=f"slack:{team}:C{i % 50}:{i}", visibility="public", scope="channel",
                                source_ids=[f"{i}.000100"], authors=["alice"], said_at=now - i, created_at=now,
                                expires_at=now + 86_400 * 90) for i in range(n)]
        for start in range(0, n, 5_000):
            await stores.memory.put(team, records[start:start + 5_000])
        memory = Memory(stores.memory, stores.checkpoints, stores.notes, Tokenizer("gpt-4o"),
                        config=MemoryConfig(workspaces=frozenset({team}), channels=frozenset({"*"})))
        where = Conversation.slack(team, "C7", "9999999999.000100", "public")
        started = time.perf_counter()
        await memory.block(where, questions[0], asker=None, cap_tokens=680)
        out[f"memory_index_cold_ms_{n}"] = round((time.perf_counter() - started) * 1000, 1)
        turn = iter(range(10**9))
        out[f"memory_read_warm_ms_p50_{n}"] = await _median_ms(
            lambda: memory.block(where, questions[next(turn) % 3], asker=None, cap_tokens=680), repeats)
        # One record added, then one deleted: the next read brings the index up to date by the difference (the
        # records are still read whole from Redis: the store keeps no log of changes yet).
        added = records[0].model_copy(update={"id": "mem_added", "text": "the rollback drill moved to thursday"})
        await stores.memory.put(team, [added])
        started = time.perf_counter()
        await memory.block(where, "when is the rollback drill?", asker=None, cap_tokens=680)
        out[f"memory_read_after_add_ms_{n}"] = round((time.perf_counter() - started) * 1000, 1)
        await stores.memory.delete(team, ["mem_added"])
        started = time.perf_counter()
        await memory.block(where, "when is the rollback drill?", asker=None, cap_tokens=680)
        out[f"memory_read_after_delete_ms_{n}"] = round((time.perf_counter() - started) * 1000, 1)
        channel = [r for r in records if r.channel == "C7"]
        started = time.perf_counter()
        consolidated(channel, now=now, max_unused_days=60)
        out[f"memory_consolidate_ms_{n}"] = round((time.perf_counter() - started) * 1000, 1)
        await stores.memory.forget_workspace(team)
    return out


@contextlib.contextmanager
def _counted(client: aioredis.Redis) -> Iterator[list[int]]:
    """How many Redis commands ``client`` sends while the block runs (a pipeline's commands each count), as the one
    element of the list it yields."""
    sent = [0]
    execute_command: Callable[..., Awaitable[Any]] = client.execute_command
    pipeline = client.pipeline

    async def counted(*args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return await execute_command(*args, **kwargs)

    def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = pipeline(*args, **kwargs)
        execute: Callable[..., Awaitable[Any]] = pipe.execute

        async def counted_execute(*a: Any, **k: Any) -> Any:
            sent[0] += len(pipe.command_stack)
            return await execute(*a, **k)

        pipe.execute = counted_execute  # type: ignore[method-assign]
        return pipe

    client.execute_command = counted  # type: ignore[method-assign]
    client.pipeline = counted_pipeline  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        del client.execute_command, client.pipeline


async def _sweep_bench(local: Settings, url: str, n: int, progress: Callable[[str], None]) -> dict[str, float]:
    """The idle sweep draining ``n`` idle threads of one workspace, every third in a channel with memory off (those
    owe nothing): the passes it takes at the default claims per pass, the Redis commands of the busiest pass and
    of all of them, and the wall time."""
    progress(f"memory: the idle sweep draining {n:,} threads")
    # a client of its own: what is counted is what the sweep sends, not what other work of this process sends meanwhile
    client = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool.from_url(
        url, timeout=30, max_connections=local.threadkeeper_redis_max_connections))
    try:
        return await _sweep_passes(local, client, n)
    finally:
        await client.aclose()


async def _sweep_passes(local: Settings, client: aioredis.Redis, n: int) -> dict[str, float]:
    from threadkeeper.persistence.keys import activity_key
    from threadkeeper.services import Tokenizer
    from threadkeeper.services.memory import Memory, MemoryConfig

    stores = build_stores(local, client=client)
    team = "TSWEEP"
    threads = [Conversation.slack(team, "COFF" if i % 3 == 1 else "CON", f"1700000000.{i:06d}", "public")
               for i in range(n)]
    now = time.time()
    await client.zadd(activity_key(local.threadkeeper_key_prefix), {c.id: now + i * 1e-3 for i, c in enumerate(threads)})
    await stores.memory.set_switch(team, "channel:COFF", False)
    config = MemoryConfig(workspaces=frozenset({team}), channels=frozenset({"*"}))
    memory = Memory(stores.memory, stores.checkpoints, stores.notes, Tokenizer("gpt-4o"), config=config,
                    clock=lambda: time.time() + config.idle_seconds + 60)
    owed = sum(1 for c in threads if c.channel == "CON")
    passes, costs, extracted = 0, [], 0
    started = time.perf_counter()
    while extracted < owed and passes < 10 * n:
        with _counted(client) as sent:
            extracted += len(await memory.sweep())
        passes += 1
        costs.append(sent[0])
    seconds = time.perf_counter() - started
    await stores.memory.forget_workspace(team)
    return {f"memory_sweep_passes_{n}": passes, f"memory_sweep_pass_bound_{n}": -(-owed // config.claims_per_sweep) + 1,
            f"memory_sweep_commands_max_pass_{n}": max(costs), f"memory_sweep_commands_{n}": sum(costs),
            f"memory_sweep_s_{n}": round(seconds, 1)}


async def _listing_bench(local: Settings, client: aioredis.Redis, n: int, progress: Callable[[str], None],
                         ) -> dict[str, float]:
    """``threadkeeper conversations`` over ``n`` stored conversations (one turn of two messages each): the 50 most
    recent with their last activity, messages and generation, in a worker that never listed them (the median of
    five; the first listing of a store, which adds what was stored before the directory existed, is not timed)."""
    progress(f"listing {n:,} conversations")
    stores = build_stores(local, client=client)
    store = stores.checkpoints

    async def one(i: int) -> None:
        cid = f"bench:listed:{i}"
        cp = await store.start_turn(cid, messages=[message(2 * i % 10_000), message(2 * i % 10_000 + 1, "assistant")])
        await store.commit(cid, cp.id, expected_head=None)

    for start in range(0, n, 500):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 500))))
    pipeline = build_pipeline(local, stores)
    await pipeline.conversations(50)
    times = []
    for _ in range(5):
        fresh = build_pipeline(local, build_stores(local, client=client))
        started = time.perf_counter()
        rows, total = await fresh.conversations(50)
        times.append(time.perf_counter() - started)
        assert len(rows) == 50 and total >= n, (len(rows), total)
    return {f"conversations_list_s_{n}": round(statistics.median(times), 3)}


async def _epoch_ends(stores: Any, cid: str) -> list[Any]:
    rows = await stores.checkpoints.lineage(cid)
    return [r for r in rows if any(o.forked_from == r.id for o in rows)]


async def _warm_preturn_ms(store: CheckpointStore, cid: str, head: str, budget: Any, repeats: int,
                           ) -> tuple[float, str]:
    """The pre-turn in a worker that holds the thread: a turn of two messages is committed (not timed), then the
    head history is loaded (the new turn read from Redis, the rest extended from the cached history) and its
    tokens measured against the trigger, as before every turn."""
    await store.load_history(cid)
    times = []
    for i in range(repeats):
        cp = await store.start_turn(cid, parent_id=head, from_head=False,
                                    messages=[message(10_000_000 + 2 * i), message(10_000_001 + 2 * i, "assistant")])
        await store.commit(cid, cp.id, expected_head=head)
        head = cp.id
        started = time.perf_counter()
        history = await store.load_history(cid)
        _ = measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens) >= budget.trigger_tokens
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3), head


async def _median_ms(fn: Callable[[], Awaitable[Any]], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 3)


def _cli_seconds(*args: str, repeats: int = 3, env: dict[str, str] | None = None) -> float:
    """Wall seconds of ``threadkeeper ARGS`` in a fresh process (the median of ``repeats``), with ``env`` added to
    this process's environment."""
    import os

    full = {**os.environ, **(env or {})}
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "threadkeeper", *args], capture_output=True, check=False, timeout=120,
                       env=full)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 2)


_PEAK = ("import atexit, resource, runpy, sys\n"
         "def peak_kb():\n"
         "    try:\n"
         "        with open('/proc/self/status') as status:\n"
         "            return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:'))\n"
         "    except (OSError, StopIteration):\n"
         "        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
         "atexit.register(lambda: sys.stderr.write(f'\\npeak_rss_kb={peak_kb()}\\n'))\n"
         "sys.argv = ['threadkeeper', 'console']\n"
         "runpy.run_module('threadkeeper', run_name='__main__')\n")
"""A console run as a newcomer runs it, saying its peak RSS as it exits: its own high-water mark (``VmHWM``, where
Linux has it). ``ru_maxrss`` would also count the process that started it: Linux carries the starting process's
high-water mark across the ``exec``, so a bench that holds more than the console would read its own peak."""
SECRET_MESSAGE = b"the password for staging is Xq9-vB7mKt2w, and the deploy key is in 1Password\n"


def _newcomer_console(said: bytes, *, url: str, prefix: str) -> tuple[float, float]:
    """A newcomer's ``threadkeeper console`` in a fresh process: no Slack tokens, no model settings, no ``REDIS_URL``
    (the embedded Redis, started in an empty data directory and stopped on the way out); it starts, shows its banner,
    answers what was ``said`` and exits at the end of its input. Its wall seconds and its peak RSS in MB.

    On a machine with no ``redis-server`` to embed, the console runs on the bench's Redis at ``url`` instead, under a
    key prefix of its own below ``prefix`` (an empty store, as a newcomer's is), whose keys are removed afterwards."""
    import os
    import re
    import tempfile

    from .embedded import find_server

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "AI_", "THREADKEEPER_", "REDIS"))}
    own = None
    if find_server() is None:
        own = f"{prefix}:console-{uuid.uuid4().hex[:8]}"
        env.update({"REDIS_URL": url, "THREADKEEPER_KEY_PREFIX": own})
    try:
        with tempfile.TemporaryDirectory(prefix="tkbench-console-") as folder:
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", _PEAK], input=said, capture_output=True, check=False,
                                  timeout=120, cwd=folder, env=env)
            seconds = time.perf_counter() - started
    finally:
        if own is not None:
            _remove_keys(url, own)
    peak = re.search(rb"peak_rss_kb=(\d+)", done.stderr)
    if done.returncode != 0 or peak is None:
        raise RuntimeError(f"the console did not start: {done.stderr.decode(errors='replace')[-2000:]}")
    return seconds, round(int(peak.group(1)) / 1024, 1)


def _remove_keys(url: str, prefix: str) -> None:
    """Removes every key under ``prefix`` from the Redis at ``url`` (the bench's own, and only those)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) == 1000:
                client.delete(*batch)
                batch.clear()
        if batch:
            client.delete(*batch)
    finally:
        client.close()


async def _remove_own(client: aioredis.Redis, prefix: str) -> None:
    """Removes every key under ``prefix`` (the bench's own, and only those), a thousand to a command."""
    batch: list[bytes] = []
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) == 1000:
            await client.delete(*batch)
            batch.clear()
    if batch:
        await client.delete(*batch)


def _console_start_seconds(*, url: str, prefix: str, repeats: int = 3) -> float:
    """Wall seconds of a newcomer's first console that is given nothing to answer (the median of ``repeats``)."""
    return round(statistics.median(_newcomer_console(b"", url=url, prefix=prefix)[0] for _ in range(repeats)), 2)


def _rss_mb() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _langgraph_bytes(history: int) -> int | None:
    """Bytes langgraph-checkpoint's InMemorySaver stores for one turn that adds two messages to ``history``."""
    try:
        from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
        from langgraph.checkpoint.memory import InMemorySaver
    except ImportError:
        return None
    saver = InMemorySaver()
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": filler(400, i), "id": str(i)}
                for i in range(history)]
    base = empty_checkpoint()
    base["channel_values"] = {"messages": messages}
    config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, base, {"source": "loop", "step": 0},
                       {"messages": 1})
    before_blobs = {k: v for k, v in saver.blobs.items()}
    grown = create_checkpoint(base, None, 1)
    grown["channel_values"] = {"messages": messages + [{"role": "user", "content": filler(400, history), "id": "u"},
                                                       {"role": "assistant", "content": filler(400, history + 1),
                                                        "id": "a"}]}
    saver.put(config, grown, {"source": "loop", "step": 1}, {"messages": 2})
    new_blobs = sum(len(v[1]) for k, v in saver.blobs.items() if k not in before_blobs)
    record = saver.storage["t"][""][grown["id"]]
    return new_blobs + len(record[0][1]) + len(record[1][1])


async def worker_metrics(url: str, prefix: str, route: str = "direct") -> dict[str, float]:
    """What one worker process uses for 1,000 conversations answered at once by a model that takes 1 s: wall
    time, errors, and its memory before and after (run by :func:`_worker_process_metrics` in a fresh process,
    so nothing else the bench did is counted).

    ``route="direct"``: the offline model, made to wait 1 s, answers in-process, so the figures are the
    worker's own (Redis, history, compaction checks, bookkeeping). ``route="litellm"``: a 1 s model behind
    litellm's provider interface, so litellm's request handling and its import are counted too, as with
    any real provider."""
    from threadkeeper.services.models import OfflineModel

    model = _slow_provider(1.0) if route == "litellm" else "offline"
    # pydantic-settings accepts _env_file, but its typed signature lists the fields only
    settings = Settings(_env_file=None, redis_url=url, threadkeeper_key_prefix=prefix,  # type: ignore[call-arg]
                        ai_model=model, ai_model_context_window_tokens=32_000)
    stores = build_stores(settings)
    slow = build_pipeline(settings, stores, offline_model=OfflineModel(latency=1.0))
    await ping(stores.client, url)
    idle = _rss_mb()

    async def one(i: int) -> bool:
        cid = f"bench:concurrent:{route}:{i}"
        await slow.submit(cid, "hello, what is the status?", author="U1", id=f"c{i}")
        results = await slow.run(cid)
        return bool(results) and results[0].status == "completed"

    try:
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(one(i) for i in range(1000)), return_exceptions=True)
        wall = time.perf_counter() - started
    finally:
        await stores.close()
    suffix = "" if route == "direct" else f"_{route}"
    return {f"concurrent_1000_wall_s{suffix}": round(wall, 3),
            f"concurrent_1000_errors{suffix}": sum(1 for o in outcomes if o is not True),
            f"rss_mb_worker_idle{suffix}": idle, f"rss_mb_1000{suffix}": _rss_mb()}


async def process_metrics(url: str, prefix: str, route: str, quick: bool) -> dict[str, float]:
    """What a fresh worker process measures (:func:`_worker_process_metrics`): :func:`worker_metrics`, and, in the
    process that imports litellm anyway, after those, reply latency with a slow summarizer
    (:func:`_reply_latency_bench`)."""
    out = await worker_metrics(url, prefix, route)
    if route == "litellm":
        # pydantic-settings accepts _env_file, but its typed signature lists the fields only
        settings = Settings(_env_file=None, redis_url=url, threadkeeper_key_prefix=prefix)  # type: ignore[call-arg]
        client = aioredis.Redis.from_url(url)
        try:
            out.update(await _reply_latency_bench(settings, client, quick=quick))
        finally:
            await client.aclose()
    return out


def _worker_process_metrics(url: str, prefix: str, route: str, quick: bool) -> dict[str, float]:
    code = ("import asyncio, json, sys; from threadkeeper.bench import process_metrics; print(json.dumps(asyncio.run("
            "process_metrics(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == 'quick'))))")
    done = subprocess.run([sys.executable, "-c", code, url, prefix, route, "quick" if quick else "full"],
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the worker-process bench failed: {done.stderr[-2000:]}")
    metrics: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return metrics


async def run_bench(settings: Settings, *, quick: bool, progress: Callable[[str], None] = lambda _: None,
                    notes: list[str] | None = None) -> dict[str, float]:
    """Every figure of the bench; ``notes`` receives what could not be measured here, and why."""
    url = settings.redis_url or "redis://127.0.0.1:6379/15"
    # Under the configured prefix, so a caller can find (and check it removed) exactly its own keys.
    prefix = f"tkbench-{settings.threadkeeper_key_prefix}-{uuid.uuid4().hex[:8]}"
    pool = aioredis.BlockingConnectionPool.from_url(url, connection_class=CountingConnection, timeout=30,
                                                    max_connections=settings.threadkeeper_redis_max_connections)
    client = aioredis.Redis(connection_pool=pool)
    await ping(client, url)
    local = settings.model_copy(update={"threadkeeper_key_prefix": prefix, "redis_url": url})
    stores = build_stores(local, client=client)
    # on the bench's Redis: without REDIS_URL they would find no store in the working folder and stop at once
    on_redis = {"REDIS_URL": url, "THREADKEEPER_KEY_PREFIX": prefix}
    # --quick starts each command once (a fresh process imports the whole stack: most of a quick run's start).
    starts = 1 if quick else 3
    out: dict[str, float] = {"rss_mb_baseline": _rss_mb(), "cli_help_s": _cli_seconds("--help", repeats=starts),
                             "cli_history_s": _cli_seconds("history", "console:bench-none", repeats=starts,
                                                           env=on_redis),
                             "cli_context_s": _cli_seconds("context", "console:bench-none", repeats=starts,
                                                           env=on_redis),
                             "console_start_s": _console_start_seconds(url=url, prefix=prefix, repeats=starts),
                             "console_peak_rss_mb_with_secret": _newcomer_console(SECRET_MESSAGE, url=url,
                                                                                  prefix=prefix)[1]}
    sizes = (100, 1000, 10000) if quick else (100, 1000, 10000, 100_000)
    repeats = 15 if quick else 41
    try:
        pipeline = build_pipeline(local, stores, context_window=1_000_000)
        budget = pipeline.budget
        for n in sizes:
            progress(f"history of {n:,} messages")
            cid = f"bench:preturn:{n}"
            # 100,000 messages are written ten to a turn (two otherwise), to keep the bench's set-up short.
            head = await fill(stores.checkpoints, cid, n, per_turn=2 if n <= 10_000 else 10)
            key = stores.checkpoints.keys(cid).messages
            out[f"preturn_ms_p50_{n}"], head = await _warm_preturn_ms(stores.checkpoints, cid, head, budget, repeats)
            if n > 10_000:
                continue

            async def raw() -> int:
                values = await client.hvals(key)
                return len([json.loads(v) for v in values])

            cold_store = CheckpointStore(client, prefix=prefix, cache_messages=0)

            async def cold() -> Any:
                return await cold_store.load_history(cid, head)

            out[f"preturn_cold_ms_p50_{n}"] = await _median_ms(cold, max(5, repeats // 3))
            out[f"raw_load_ms_p50_{n}"] = await _median_ms(raw, repeats)
            out[f"preturn_over_raw_{n}"] = round(out[f"preturn_ms_p50_{n}"] / max(out[f"raw_load_ms_p50_{n}"], 1e-6), 3)
            out[f"preturn_cold_over_raw_{n}"] = round(out[f"preturn_cold_ms_p50_{n}"]
                                                      / max(out[f"raw_load_ms_p50_{n}"], 1e-6), 3)
            turn = await stores.checkpoints.start_turn(cid, parent_id=head, from_head=False, messages=[message(n + 10)])
            await stores.checkpoints.supersede(cid, turn.id)  # (warms the script cache)
            CountingConnection.sent = 0
            cp = await stores.checkpoints.start_turn(cid, parent_id=head, from_head=False,
                                                     messages=[message(n), message(n + 1, "assistant")])
            await stores.checkpoints.commit(cid, cp.id, expected_head=head,
                                            outcome=CheckpointOutcome(usage=Usage(input_tokens=1)))
            out[f"write_bytes_per_turn_{n}"] = CountingConnection.sent
            lg = _langgraph_bytes(n)
            if lg is not None:
                out[f"langgraph_bytes_per_turn_{n}"] = lg
                out[f"write_ratio_vs_langgraph_{n}"] = round(out[f"write_bytes_per_turn_{n}"] / lg, 4)

        out["note_us_per_message"] = note_cost_us(500 if quick else 2_000)
        for n in (4_000, 40_000):
            out[f"redaction_ms_{n}_adversarial"] = redaction_ms_adversarial(n)
        small = build_pipeline(local, stores, context_window=32_000)
        compactor = small.executor.compactor
        if not isinstance(compactor, Compactor):  # the executor holds it as its seam; the fold is the handoff's
            raise TypeError(f"the bench measures the handoff compactor's running fold, not {type(compactor)}")
        for label, tokens in (("50k", 50_000), ("200k", 200_000)):
            progress(f"compaction of {label} tokens")
            cid = f"bench:compact:{label}"
            times: list[float] = []
            cold_times: list[float] = []
            fold_us: list[float] = []
            for i in range(3 if quick else 7):
                for is_cold in (False, True):
                    fork_cid = f"{cid}:{i}:{is_cold}"
                    await fill(stores.checkpoints, fork_cid, tokens // 100, per_turn=10)
                    if not is_cold:  # as before a turn: the history is loaded and its running fold is current
                        history = await stores.checkpoints.load_history(fork_cid)
                        started = time.perf_counter()
                        running = await compactor.advance(fork_cid, history, small.budget)
                        fold_us.append((time.perf_counter() - started) * 1e6 / max(1, len(running.consumed)))
                    started = time.perf_counter()
                    await small.compact(fork_cid, reason="manual")
                    (cold_times if is_cold else times).append((time.perf_counter() - started) * 1000)
            out[f"compaction_ms_p50_{label}"] = round(statistics.median(times), 2)
            out[f"compaction_cold_ms_p50_{label}"] = round(statistics.median(cold_times), 2)
            out[f"fold_us_per_message_{label}"] = round(statistics.median(fold_us), 1)

        del small  # its running folds are the compaction section's, not the turns'
        progress("turns per second")
        conversations, per = (50, 4) if quick else (200, 5)
        offline = build_pipeline(local, stores, context_window=32_000)

        async def converse(i: int) -> int:
            cid = f"bench:turns:{i}"
            done = 0
            for j in range(per):
                await offline.submit(cid, filler(200, j), author="U1", id=f"{i}.{j}")
                done += len(await offline.run(cid))
            return done

        started = time.perf_counter()
        turns = sum(await asyncio.gather(*(converse(i) for i in range(conversations))))
        out["turns_per_second"] = round(turns / (time.perf_counter() - started), 1)

        for route in ("direct", "litellm"):
            progress(f"1,000 concurrent conversations, in a worker process of their own ({route})"
                     + (", then reply latency with a slow summarizer" if route == "litellm" else ""))
            out.update(_worker_process_metrics(url, prefix, route, quick))
        out.update(turn_process_metrics(url, prefix, quick, progress))
        flood, why = flood_process_metrics(url, prefix, quick, progress)
        out.update(flood)
        if why is not None and notes is not None:
            notes.append(why)
        # Last: reading 100,000 messages into this process's caches would inflate the memory figure above.
        out.update(await _recall_bench(local, client, (1_000, 10_000) if quick else (1_000, 10_000, 100_000),
                                       15 if quick else 41, progress, quick=quick))
        out.update(await _memory_bench(local, client, (10_000,) if quick else (10_000, 100_000),
                                       15 if quick else 41, progress))
        out.update(await _sweep_bench(local, url, 1_000 if quick else 10_000, progress))
        out.update(await _listing_bench(local, client, 2_000 if quick else 20_000, progress))
    finally:
        progress("cleaning up")
        await _remove_own(client, prefix)
        await client.delete(pending_key(prefix), dead_registry_key(prefix), directory_key(prefix),
                            directory_built_key(prefix))
        await client.aclose()
    return out


REQUIRED = [f"{m}_{n}" for n in (100, 1000, 10000) for m in ("preturn_ms_p50", "raw_load_ms_p50", "preturn_over_raw",
                                                              "write_bytes_per_turn", "langgraph_bytes_per_turn",
                                                              "write_ratio_vs_langgraph")] + [
    "compaction_ms_p50_50k", "compaction_ms_p50_200k", "compaction_cold_ms_p50_200k", "fold_us_per_message_200k",
    "note_us_per_message", "redaction_ms_4000_adversarial", "redaction_ms_40000_adversarial", "cli_help_s", "console_start_s",
    "console_peak_rss_mb_with_secret",
    "recall_cold_ms_1000",
    "recall_warm_ms_p50_1000", "recall_cold_ms_10000", "recall_warm_ms_p50_10000", "history_cache_kb_per_1000",
    "recall_index_kb_per_1000", "recall_index_share_of_cache", "turns_per_second", "concurrent_1000_wall_s",
    "concurrent_1000_errors", "rss_mb_1000", "preturn_cold_over_raw_10000", "concurrent_1000_wall_s_litellm",
    "concurrent_1000_errors_litellm", "rss_mb_1000_litellm", "memory_sweep_passes_1000",
    "memory_sweep_commands_max_pass_1000", "conversations_list_s_2000", "reply_p95_over_p50_with_slow_summarizer",
    "cold_worker_preturn_ms_5000", "cold_worker_ack_ms_max_5000", "cold_worker_other_reply_over_alone_5000",
    "executor_cpu_ms_5000", "alternating_preturn_ms_p50_5000", "cache_measured_over_bound",
    "rotation_preturn_ms_p50_10x1000", "rotation_preturn_ms_p99_10x1000", "rotation_rss_mb_10x1000",
    "signed_ack_p99_s_during_unsigned_flood", "signed_ack_p50_s_during_unsigned_flood",
    "unsigned_flood_requests_per_s"]


TARGETS: dict[str, tuple[str, float]] = {
    "cli_help_s": ("<=", 1.5), "cli_history_s": ("<=", 1.5), "cli_context_s": ("<=", 1.5),
    "console_start_s": ("<=", 4), "console_peak_rss_mb_with_secret": ("<=", 120),
    "preturn_ms_p50_1000": ("<=", 5), "preturn_over_raw_1000": ("<=", 3), "preturn_cold_over_raw_10000": ("<=", 1.5),
    "preturn_ms_p50_100000": ("<=", 2), "compaction_ms_p50_200k": ("<=", 100), "turns_per_second": (">=", 400),
    "concurrent_1000_wall_s": ("<=", 2.5), "concurrent_1000_errors": ("<=", 0), "rss_mb_1000": ("<=", 200),
    "recall_warm_ms_p50_10000": ("<=", 5), "recall_index_share_of_cache": ("<=", 0.30),
    "memory_read_warm_ms_p50_100000": ("<=", 5), "redaction_ms_40000_adversarial": ("<=", 50),
    "memory_read_after_add_ms_100000": ("<=", 5), "memory_read_after_delete_ms_100000": ("<=", 5),
    "memory_sweep_commands_max_pass_1000": ("<=", 400), "memory_sweep_commands_max_pass_10000": ("<=", 400),
    "conversations_list_s_2000": ("<=", 0.5), "conversations_list_s_20000": ("<=", 0.5),
    "reply_p95_over_p50_with_slow_summarizer": ("<=", 1.2),
    "cold_worker_preturn_ms_100000": ("<=", 150), "cold_worker_ack_ms_max_100000": ("<=", 100),
    "cold_worker_other_reply_over_alone_100000": ("<=", 1.1),
    "executor_cpu_ms_10000": ("<=", 5), "executor_cpu_ms_100000": ("<=", 10),
    "rotation_preturn_ms_p50_100x10000": ("<=", 5), "rotation_preturn_ms_p99_100x10000": ("<=", 50),
    "rotation_rss_mb_100x10000": ("<=", 400), "alternating_preturn_ms_p50_100000": ("<=", 10),
    "cache_measured_over_bound": ("<=", 1),
    "langgraph_redis_turn_ratio_10000": (">=", 10),
    "signed_ack_p99_s_during_unsigned_flood": ("<=", 0.1),
}
"""What the service promises, by metric: ``(<= or >=, bound)``. A write costs at most 1.5× at 10,000 messages what
it costs at 100 (:func:`targets`). At 10,000 messages a turn costs LangGraph's Redis saver at least ten times what it
costs this store (``bench_peer``: its time per turn stays flat as the thread grows, LangGraph's grows with it)."""


class Target(NamedTuple):
    """One measured metric beside its target."""

    metric: str
    value: float
    op: str
    """``<=`` or ``>=``"""
    bound: float
    shown: str
    """the target as a person reads it"""

    @property
    def met(self) -> bool:
        return self.value <= self.bound if self.op == "<=" else self.value >= self.bound


def checked(metrics: dict[str, float]) -> list[Target]:
    """Each measured metric that has a target, in :data:`TARGETS`' order, with the write-cost ratio last."""
    out = [Target(name, metrics[name], op, bound, f"{'≤' if op == '<=' else '≥'} {bound:g}")
           for name, (op, bound) in TARGETS.items() if name in metrics]
    if "write_bytes_per_turn_10000" in metrics and "write_bytes_per_turn_100" in metrics:
        out.append(Target("write_bytes_per_turn_10000", metrics["write_bytes_per_turn_10000"], "<=",
                          1.5 * metrics["write_bytes_per_turn_100"], "≤ 1.5 × the 100-message figure"))
    return out


def targets(metrics: dict[str, float]) -> dict[str, tuple[str, bool]]:
    """Each measured metric that has a target: the target as shown, and whether this run met it."""
    return {t.metric: (t.shown, t.met) for t in checked(metrics)}
