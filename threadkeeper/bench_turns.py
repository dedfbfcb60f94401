"""``threadkeeper bench``: what a worker's turns cost over long threads, measured through the real executor in a worker
process of its own (nothing else the bench did is in its caches or its memory).

* The pre-turn: from the start of a run until the model is called (the opening, the history, the compaction check,
  the runtime context with recall and memory, the turn's checkpoint): in a worker that holds nothing of a long
  thread (its first turn after a restart), in a worker rotating over many long threads, and in one alternating
  between a long thread and a short one.
* The executor's CPU per turn with a model that costs nothing.
* While a long thread takes its first turn: how long the durable append that precedes an ack takes, the event loop's
  longest wait between ticks every 5 ms, and how much later another thread's reply comes than when it runs alone.
* What the worker's caches hold, measured (its RSS), against the bound they are given.

The threads are written by :func:`bench_data.fill_epochs` (chat messages over compaction epochs of 250), once per
process, ten messages to a turn.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from threadkeeper.persistence import Usage
from threadkeeper.services.models import OfflineModel
from threadkeeper.services.recall import Recall

from .bench_data import chat_messages, fill_epochs
from .root import build_pipeline, build_stores
from .settings import Settings

_TURN: contextvars.ContextVar[str] = contextvars.ContextVar("bench_turn", default="")
"""The conversation whose turn the bench runs in this task (the model notes its calls by it)."""
WINDOW = 32_000
"""The model window of every turn here (a thread's epochs of 250 messages fit it)."""


class _Timed(OfflineModel):
    """A model that costs nothing (or waits ``latency`` seconds) and notes when each turn called it. The prompt is
    counted as the offline model counts it (the usage a provider reports), and the CPU that takes is noted apart,
    so it is not counted as the executor's."""

    def __init__(self, latency: float = 0.0) -> None:
        super().__init__()
        self.latency = latency
        self.called: dict[str, list[float]] = {}
        """Per conversation, when each of its turns called the model."""
        self.cpu = 0.0

    async def answer(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                     ) -> tuple[str, Usage]:
        self.called.setdefault(_TURN.get(), []).append(time.perf_counter())
        started = time.process_time()
        prompt = self.tokenizer.count_chat(messages) + self.tokenizer.count_tools(tools or [])
        self.cpu += time.process_time() - started
        if self.latency:
            await asyncio.sleep(self.latency)
        return "Noted.", Usage(input_tokens=prompt, output_tokens=2)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class _Worker:
    """One worker: a pipeline over the bench's Redis with a :class:`_Timed` model."""

    def __init__(self, settings: Settings, client: aioredis.Redis, latency: float = 0.0) -> None:
        self.model = _Timed(latency)
        self.pipeline = build_pipeline(settings, build_stores(settings, client=client), context_window=WINDOW,
                                       offline_model=self.model)
        self.said = 0

    async def turn(self, cid: str, text: str = "what did we say about w12 and w7?") -> tuple[float, float]:
        """One turn answering a question in ``cid``: its pre-turn in milliseconds, and the executor's CPU in ms."""
        self.said += 1
        await self.pipeline.submit(cid, text, author="U1", id=f"1800000000.{self.said:06d}")
        _TURN.set(cid)  # (this coroutine's task's context: what the turn's tasks copy)
        called = self.model.called.setdefault(cid, [])
        calls, model_cpu = len(called), self.model.cpu
        started, cpu = time.perf_counter(), time.process_time()
        results = await self.pipeline.run(cid)
        spent = time.process_time() - cpu - (self.model.cpu - model_cpu)
        if not results or results[-1].status != "completed" or len(called) == calls:
            raise RuntimeError(f"the bench's turn in {cid} was not answered: {results}")
        return (called[calls] - started) * 1000, spent * 1000


async def _cold_and_beside(settings: Settings, client: aioredis.Redis, n: int) -> dict[str, float]:
    """A long thread's first turn in a fresh worker; meanwhile, appends to another thread's inbox (what an ack waits
    for) and a turn in a short thread, whose reply (model: 1 s) is compared with its reply when it runs alone."""
    long_id, short_id = f"bench:turns:cold:{n}", f"bench:turns:cold-short:{n}"
    worker = _Worker(settings, client, latency=1.0)
    await worker.pipeline.preload()  # (what a worker that serves Slack loads before it listens)
    await worker.turn(short_id, "hello")
    alone = time.perf_counter()
    await worker.turn(short_id, "and now?")
    alone = time.perf_counter() - alone
    acks: list[float] = []
    done = asyncio.Event()

    async def arrivals() -> None:
        i = 0
        while not done.is_set():
            i += 1
            started = time.perf_counter()
            await worker.pipeline.submit(f"bench:turns:chatter:{n}", f"note {i}", author="U2", id=f"1.{i:06d}",
                                         reply_expected=False)
            acks.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.02)

    async def beside() -> float:
        # timed from when the message is due, not from when the loop gets round to it: a loop held up meanwhile
        # makes this reply late, and that lateness counts
        due = time.perf_counter() + 0.05
        await asyncio.sleep(0.05)
        await worker.turn(short_id, "still there?")
        return time.perf_counter() - due

    gaps: list[float] = []

    async def ticks() -> None:  # the event loop's longest wait between ticks every 5 ms
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            gaps.append(time.perf_counter() - last)
            last = time.perf_counter()

    chatter = asyncio.create_task(arrivals())
    other = asyncio.create_task(beside())
    ticking = asyncio.create_task(ticks())
    try:
        preturn, _ = await worker.turn(long_id)
    finally:
        done.set()
        await chatter
        await ticking
    return {f"cold_worker_preturn_ms_{n}": round(preturn, 1),
            f"cold_worker_ack_ms_max_{n}": round(max(acks), 1),
            f"cold_worker_ack_ms_p50_{n}": round(statistics.median(acks), 1),
            f"cold_worker_loop_lag_ms_max_{n}": round(max(gaps) * 1000, 1),
            f"cold_worker_other_reply_over_alone_{n}": round(await other / alone, 3)}


async def _executor_cpu(settings: Settings, client: aioredis.Redis, n: int, repeats: int) -> dict[str, float]:
    """The executor's CPU per turn (the median of ``repeats``) in a worker that holds the thread."""
    cid = f"bench:turns:cpu:{n}"
    worker = _Worker(settings, client)
    await worker.turn(cid)  # its first turn: the worker reads the thread
    cpu = [(await worker.turn(cid, f"and what about w{i}?"))[1] for i in range(repeats)]
    return {f"executor_cpu_ms_{n}": round(statistics.median(cpu), 2)}


async def _rotation(settings: Settings, client: aioredis.Redis, threads: int, n: int) -> dict[str, float]:
    """A worker taking turns in ``threads`` threads of ``n`` messages in rotation: every thread once (not timed),
    then once more; the pre-turn's p50 and p99 over the second round, and the worker's RSS after it."""
    ids = [cid for cid, _ in _threads("rotation", threads < 100)]
    worker = _Worker(settings, client)
    for cid in ids:
        await worker.turn(cid)
    times = [(await worker.turn(cid, "and w7?"))[0] for cid in ids]
    tag = f"{threads}x{n}"
    return {f"rotation_preturn_ms_p50_{tag}": round(statistics.median(times), 1),
            f"rotation_preturn_ms_p99_{tag}": round(_percentile(times, 0.99), 1),
            f"rotation_rss_mb_{tag}": _rss_mb()}


async def _alternating(settings: Settings, client: aioredis.Redis, n: int, turns: int) -> dict[str, float]:
    """A worker alternating between a thread of ``n`` messages and one of 96: the long thread's pre-turn p50 over
    ``turns`` turns after the first of each; and the worker's RSS grown meanwhile, over its caches' bound."""
    (long_id, _), (short_id, _) = _threads("alternating", n == QUICK_LONG)
    before = _rss_mb()
    worker = _Worker(settings, client)
    await worker.turn(long_id)
    await worker.turn(short_id)
    times = []
    for _ in range(turns):
        times.append((await worker.turn(long_id, "and w7?"))[0])
        await worker.turn(short_id, "and w7?")
    bound_mb = settings.threadkeeper_cache_mb * 1024 * 1024 / 1e6
    return {f"alternating_preturn_ms_p50_{n}": round(statistics.median(times), 1),
            "cache_measured_over_bound": round((_rss_mb() - before) * 1.048576 / bound_mb, 2)}


SECTIONS = ("alternating", "cold", "cpu", "rotation")


QUICK_LONG = 5_000
"""``bench --quick``'s long thread (100,000 messages otherwise)."""


def _threads(section: str, quick: bool) -> list[tuple[str, int]]:
    """The threads ``section`` measures (id, messages), written before it by another process."""
    long = QUICK_LONG if quick else 100_000
    if section == "alternating":
        return [(f"bench:turns:alternating:{long}", long), (f"bench:turns:alternating-short:{long}", 96)]
    if section == "cold":
        return [(f"bench:turns:cold:{long}", long)]
    if section == "cpu":
        return [(f"bench:turns:cpu:{n}", n) for n in ((QUICK_LONG,) if quick else (10_000, 100_000))]
    threads, n = (10, 1_000) if quick else (100, 10_000)
    return [(f"bench:turns:rotation:{n}:{i}", n) for i in range(threads)]


async def turn_metrics(url: str, prefix: str, quick: bool, section: str) -> dict[str, float]:
    """``section`` "fill": write the threads of every one of :data:`SECTIONS`, each compaction followed by what the
    turn after it does for recall (:func:`bench_data.fill_epochs`); else the figures of that section, in a worker that
    holds nothing of them (the process writing them made their search terms and notes, and caches them).
    Run by :func:`turn_process_metrics`, each in a fresh process."""
    # pydantic-settings accepts _env_file, but its typed signature lists the fields only
    settings = Settings(_env_file=None, redis_url=url, threadkeeper_key_prefix=prefix)  # type: ignore[call-arg]
    client = aioredis.Redis.from_url(url)
    long = QUICK_LONG if quick else 100_000
    out: dict[str, float] = {}
    try:
        if section == "fill":
            stores = build_stores(settings, client=client)
            written = [thread for name in SECTIONS for thread in _threads(name, quick)]
            chat_messages(max(n for _, n in written))
            tokenizer = OfflineModel().tokenizer
            for start in range(0, len(written), 8):
                await asyncio.gather(*(fill_epochs(stores.checkpoints, cid, n, recall=Recall(
                    stores.checkpoints, stores.notes, tokenizer, epochs=stores.epochs))
                    for cid, n in written[start:start + 8]))
        elif section == "alternating":
            out.update(await _alternating(settings, client, long, 5 if quick else 15))
        elif section == "cold":
            out.update(await _cold_and_beside(settings, client, long))
        elif section == "cpu":
            for _, n in _threads(section, quick):
                out.update(await _executor_cpu(settings, client, n, 15 if quick else 31))
        else:
            threads, n = (10, 1_000) if quick else (100, 10_000)
            out.update(await _rotation(settings, client, threads, n))
    finally:
        await client.aclose()
    return out


def turn_process_metrics(url: str, prefix: str, quick: bool, progress: Callable[[str], None] = lambda _: None,
                         ) -> dict[str, float]:
    """Every section's figures: the threads written in one fresh process, each section measured in another."""
    code = ("import asyncio, json, sys; from threadkeeper.bench_turns import turn_metrics; print(json.dumps(asyncio.run("
            "turn_metrics(sys.argv[1], sys.argv[2], sys.argv[3] == 'quick', sys.argv[4]))))")
    metrics: dict[str, float] = {}
    for section in ("fill", *SECTIONS):
        progress("turns over long threads: " + ("writing them" if section == "fill" else
                                                f"{section}, in a worker process of its own"))
        done = subprocess.run([sys.executable, "-c", code, url, prefix, "quick" if quick else "full", section],
                              capture_output=True, text=True, timeout=3_600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"the turns bench ({section}) failed: {done.stderr[-2000:]}")
        metrics.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return metrics
