"""Properties of the store under random interleavings of several writers, and its write cost."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import fakeredis
import pytest
import redis.asyncio as aioredis
from conftest import REDIS_URL, drop_prefix, real_redis
from factories import msg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadkeeper.bench import CountingConnection
from threadkeeper.persistence import CheckpointStatus, CheckpointStore, HeadConflictError

CONV = "prop:conversation"
WRITERS = 3


@dataclass
class RefCheckpoint:
    parent: str | None
    kind: str
    messages: list[str] = field(default_factory=list)
    status: str = "running"


@dataclass
class Writer:
    checkpoint: str | None = None
    started_from: str | None = None
    seen: str | None = None
    """The head this writer last saw: a compaction forks from it (stale if another writer moved the head)."""


def ref_history(ref: dict[str, RefCheckpoint], cid: str) -> list[str]:
    cp = ref[cid]
    if cp.kind == "compaction" or cp.parent is None:
        return list(cp.messages)
    return ref_history(ref, cp.parent) + cp.messages


operations = st.lists(
    st.tuples(st.integers(0, WRITERS - 1), st.sampled_from(["start", "append", "commit", "fork", "pause_resume"]),
              st.integers(1, 3)),
    min_size=1, max_size=40,
)


async def run_scenario(ops: list[tuple[int, str, int]], url: str | None = None) -> None:
    """Replay ``ops`` against the store (fakeredis, or the Redis at ``url`` under a prefix of its own) and a
    reference model, checking the invariants after every step."""
    import uuid

    prefix = f"tkprop-{uuid.uuid4().hex[:10]}"
    client = aioredis.Redis.from_url(url) if url else fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    try:
        await _scenario(CheckpointStore(client, prefix=prefix), ops)
    finally:
        if url:
            await drop_prefix(client, prefix)
        await client.aclose()


async def _scenario(store: CheckpointStore, ops: list[tuple[int, str, int]]) -> None:
    ref: dict[str, RefCheckpoint] = {}
    head: str | None = None
    writers = [Writer() for _ in range(WRITERS)]
    frozen: dict[str, list[str]] = {}
    counter = 0
    for w, op, k in ops:
        writer = writers[w]
        if op == "start" and writer.checkpoint is None:
            cp = await store.start_turn(CONV)
            ref[cp.id] = RefCheckpoint(parent=head, kind="turn")
            writer.checkpoint, writer.started_from, writer.seen = cp.id, head, head
        elif op == "fork" and writer.checkpoint is None and (writer.seen or head) is not None:
            base = writer.seen or head
            texts = [f"summary-{counter}-{i}" for i in range(k)]
            counter += 1
            before = len(await store.lineage(CONV))
            try:  # forked and made the head at once, or (from a stale head) nothing written at all
                cp = await store.fork_compaction(CONV, forked_from=base, messages=[msg(t) for t in texts],
                                                 covered_ids=ref_history(ref, base))
                assert base == head
                ref[cp.id] = RefCheckpoint(parent=base, kind="compaction", messages=texts, status="completed")
                head = cp.id
                frozen[cp.id] = texts
            except HeadConflictError:
                assert base != head and len(await store.lineage(CONV)) == before
            writer.seen = head
        elif op == "append" and writer.checkpoint and ref[writer.checkpoint].kind == "turn":
            texts = [f"w{w}-{counter}-{i}" for i in range(k)]
            counter += 1
            await store.append(CONV, writer.checkpoint, [msg(t) for t in texts])
            ref[writer.checkpoint].messages.extend(texts)
        elif op == "pause_resume" and writer.checkpoint and ref[writer.checkpoint].kind == "turn":
            await store.pause(CONV, writer.checkpoint, resume={"reason": "test"})
            await store.resume(CONV, writer.checkpoint)
        elif op == "commit" and writer.checkpoint:
            cid = writer.checkpoint
            try:
                await store.commit(CONV, cid, expected_head=writer.started_from)
                ref[cid].status = "completed"
                head = cid
                frozen[cid] = ref_history(ref, cid)
            except HeadConflictError:
                await store.supersede(CONV, cid)
                ref[cid].status = "superseded"
            writer.checkpoint, writer.seen = None, head
        # invariants after every step
        state = await store.get_state(CONV)
        actual_head = state.head_checkpoint_id if state else None
        assert actual_head == head
        if head is not None:
            assert (await store.get(CONV, head)).status is CheckpointStatus.COMPLETED
            assert [m.text for m in (await store.load_history(CONV)).messages] == ref_history(ref, head)
        for cid, texts in frozen.items():
            assert [m.text for m in (await store.load_history(CONV, cid)).messages] == texts
            assert (await store.get(CONV, cid)).status is CheckpointStatus.COMPLETED
        for cid, cp in ref.items():
            assert (await store.get(CONV, cid)).status.value == cp.status or cp.status == "running"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_random_interleavings_keep_history_and_head_consistent(ops: list[tuple[int, str, int]]) -> None:
    asyncio.run(run_scenario(ops))


@pytest.mark.redis
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_random_interleavings_hold_on_the_real_redis(ops: list[tuple[int, str, int]]) -> None:
    asyncio.run(_reachable())
    asyncio.run(run_scenario(ops, REDIS_URL))


async def _reachable() -> None:
    """Skips outside CI, fails in CI, when the real Redis cannot be reached."""
    await (await real_redis()).aclose()


@pytest.mark.redis
async def test_append_cost_is_proportional_to_the_message_not_the_history(prefix: str) -> None:
    probe = await real_redis()
    await probe.aclose()
    pool = aioredis.ConnectionPool.from_url(REDIS_URL, connection_class=CountingConnection)
    client = aioredis.Redis(connection_pool=pool)
    store = CheckpointStore(client, prefix=prefix)
    try:
        async def bytes_for_append(conv: str, history: int) -> int:
            cp = await store.start_turn(conv)
            await store.append(conv, cp.id, [msg(f"history message {i} " + "x" * 100) for i in range(history)])
            await store.commit(conv, cp.id, expected_head=None)
            turn = await store.start_turn(conv)
            probe_message = msg("y" * 400)
            await store.append(conv, turn.id, [probe_message])  # warm the script cache
            CountingConnection.sent = 0
            await store.append(conv, turn.id, [probe_message.model_copy(update={"id": "probe"})])
            return CountingConnection.sent

        small = await bytes_for_append("cost:small", 1)
        large = await bytes_for_append("cost:large", 5000)
        size = len(msg("y" * 400).model_dump_json())
        assert large <= small * 1.1 + 16, (small, large)
        assert large < size * 2, (large, size)
    finally:
        await drop_prefix(client, prefix)
        await client.aclose()
