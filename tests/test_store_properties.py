"""Properties of the store under random interleavings of several writers, and its write cost."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import fakeredis
import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadkeeper.persistence import CheckpointStatus, CheckpointStore, HeadConflictError
from threadkeeper.bench import CountingConnection

from conftest import REDIS_URL, drop_prefix, real_redis
from factories import msg

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


async def run_scenario(ops: list[tuple[int, str, int]]) -> None:
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    store = CheckpointStore(client, prefix="prop")
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
            writer.checkpoint, writer.started_from = cp.id, head
        elif op == "fork" and writer.checkpoint is None and head is not None:
            texts = [f"summary-{counter}-{i}" for i in range(k)]
            counter += 1
            cp = await store.fork_compaction(CONV, forked_from=head, messages=[msg(t) for t in texts],
                                             covered_ids=ref_history(ref, head))
            ref[cp.id] = RefCheckpoint(parent=head, kind="compaction", messages=texts)
            writer.checkpoint, writer.started_from = cp.id, head
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
            writer.checkpoint = None
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
    await client.aclose()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_random_interleavings_keep_history_and_head_consistent(ops: list[tuple[int, str, int]]) -> None:
    asyncio.run(run_scenario(ops))


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
