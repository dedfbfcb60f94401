"""The idle sweep reaches every conversation owing extraction in bounded work per pass: memory-off and extracted
conversations leave its registry, so a thread that goes idle is extracted whatever is older."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import pytest
from fakes import Paused, Step, counted_commands, pipeline, scripted

from threadkeeper.persistence.keys import activity_key
from threadkeeper.services import Conversation

T = "T1"
ON_CHANNEL, OFF_CHANNEL = "C100", "C900"
ON = {"threadkeeper_memory_workspaces": T, "threadkeeper_memory_channels": "*"}
PER_PASS = 20
COMMANDS_PER_CONVERSATION = 15
"""What one conversation read from the registry may cost a pass at most (its job, switches, lease, history, write)."""


@pytest.fixture(autouse=True)
def model():
    m = scripted()
    m.default = Step(text="noted")
    return m


async def _idle(st: Any, conversations: list[Conversation]) -> None:
    """Conversations whose last item arrived now, in this order (the activity registry, as the inbox writes it)."""
    for c in conversations:
        await st.inbox.mark_pending(c.id, active=True)


async def _drain(p: Any, redis_client: Any, owed: list[Conversation], st: Any) -> tuple[int, list[int]]:
    """Sweeps until every conversation of ``owed`` is extracted: the passes, and the Redis commands of each."""
    memory = p.memory
    memory.clock = lambda: time.time() + 3600
    costs: list[int] = []
    while True:
        with counted_commands(redis_client, pipelines=True) as sent:
            await memory.sweep()
        costs.append(len(sent))
        jobs = [await st.memory.job(T, c.id) for c in owed]
        if all(j.outcome != "none" for j in jobs) or len(costs) > 100:
            return len(costs), costs


async def test_the_sweep_extracts_every_idle_thread_past_memory_off_ones_in_bounded_passes(redis_client,
                                                                                           prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    p.memory.config = dataclasses.replace(p.memory.config, claims_per_sweep=PER_PASS)
    await st.memory.set_switch(T, f"channel:{OFF_CHANNEL}", False)
    threads = [Conversation.slack(T, OFF_CHANNEL if i % 3 == 1 else ON_CHANNEL, f"1700000000.{i:06d}", "public")
               for i in range(300)]
    await _idle(st, threads)
    owed = [c for c in threads if c.channel == ON_CHANNEL]
    passes, costs = await _drain(p, redis_client, owed, st)
    assert passes <= math.ceil(len(owed) / PER_PASS) + 1, costs
    assert max(costs) <= 4 * PER_PASS * COMMANDS_PER_CONVERSATION, costs
    for c in threads:
        assert ((await st.memory.job(T, c.id)).outcome != "none") == (c.channel == ON_CHANNEL)
    assert await redis_client.zcard(activity_key(prefix)) == 0, "extracted and memory-off threads left the registry"
    assert await p.memory.sweep() == []


async def test_threads_where_memory_is_off_leave_the_registry_for_a_command_each(redis_client, prefix) -> None:
    """A thread whose channel has memory off, or whose workspace memory does not serve, leaves the sweep's registry
    for one command: each workspace's switches are read once a pass, its extraction job and notes not at all."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    p.memory.config = dataclasses.replace(p.memory.config, claims_per_sweep=PER_PASS)
    await st.memory.set_switch(T, f"channel:{OFF_CHANNEL}", False)
    off = [Conversation.slack(T, OFF_CHANNEL, f"1700000000.{i:06d}", "public") for i in range(60)]
    elsewhere = [Conversation.slack("T2", ON_CHANNEL, f"1700000001.{i:06d}", "public") for i in range(60)]
    await _idle(st, [c for pair in zip(off, elsewhere, strict=True) for c in pair])
    p.memory.clock = lambda: time.time() + 3600
    costs = []
    for _ in range(2):
        with counted_commands(redis_client, pipelines=True) as sent:
            assert await p.memory.sweep() == []
        costs.append(len(sent))
    assert await redis_client.zcard(activity_key(prefix)) == 0
    assert max(costs) <= 4 * PER_PASS + 4, costs
    assert await st.memory.job(T, off[0].id) == await st.memory.job(T, "never-seen"), "no job written for them"


async def test_a_thread_behind_a_hundred_memory_off_threads_is_extracted_on_the_next_passes(redis_client,
                                                                                             prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    p.memory.config = dataclasses.replace(p.memory.config, claims_per_sweep=PER_PASS)
    await st.memory.set_switch(T, f"channel:{OFF_CHANNEL}", False)
    off = [Conversation.slack(T, OFF_CHANNEL, f"1700000000.{i:06d}", "public") for i in range(100)]
    await _idle(st, off)
    told = Conversation.slack(T, ON_CHANNEL, "1800000000.000100", "public")
    await p.submit(told, "The staging cluster is called kestrel-eu and lives in eu-west-3.", author="alice",
                   id="1800000000.000100")
    await p.run(told)
    passes, costs = await _drain(p, redis_client, [told], st)
    assert passes <= 2, costs
    assert [r.conversation for r in await st.memory.records(T)] == [told.id]


async def test_an_item_arriving_after_extraction_puts_the_thread_back(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    told = Conversation.slack(T, ON_CHANNEL, "1800000000.000100", "public")
    await p.submit(told, "The staging cluster is called kestrel-eu.", author="alice", id="1800000000.000100")
    await p.run(told)
    p.memory.clock = lambda: time.time() + 3600
    assert [e.records for e in await p.memory.sweep()] == [1]
    assert await p.memory.sweep() == [], "extracted: it left the registry"
    await p.submit(told, "The billing outage is tracked in ticket OPS-4471.", author="bob", id="1800000001.000100")
    await p.run(told)
    p.memory.clock = lambda: time.time() + 7200
    assert [e.records for e in await p.memory.sweep()] == [1], "the new item put it back"


async def test_an_item_arriving_during_extraction_keeps_the_thread_owing(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    told = Conversation.slack(T, ON_CHANNEL, "1800000000.000100", "public")
    await p.submit(told, "The staging cluster is called kestrel-eu.", author="alice", id="1800000000.000100")
    await p.run(told)
    p.memory.clock = lambda: time.time() + 3600

    async def arrives() -> None:
        await p.submit(told, "The billing outage is tracked in ticket OPS-4471.", author="bob", id="1800000001.000100")
        await p.run(told)

    done = await Paused(st.memory, "put").during(p.memory.sweep(), arrives)
    assert [e.records for e in done] == [1]
    p.memory.clock = lambda: time.time() + 7200
    assert [e.records for e in await p.memory.sweep()] == [1], "the item that arrived meanwhile is extracted next"


async def test_a_failed_extraction_is_due_again_at_its_retry_and_not_before(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    told = Conversation.slack(T, ON_CHANNEL, "1800000000.000100", "public")
    await p.submit(told, "The staging cluster is called kestrel-eu.", author="alice", id="1800000000.000100")
    await p.run(told)
    extraction = p.memory.extraction
    read = extraction.messages

    async def fails(cid: str) -> Any:
        raise ConnectionError("the history could not be read")

    extraction.messages = fails
    start = time.time() + 3600
    p.memory.clock = lambda: start
    [failed] = await p.memory.sweep()
    assert failed.outcome == "failed" and failed.retry_at > start
    extraction.messages = read
    assert await p.memory.sweep() == [], "not before its retry"
    p.memory.clock = lambda: failed.retry_at + 1
    assert [e.records for e in await p.memory.sweep()] == [1], "at its retry it is extracted"


async def test_switching_memory_on_puts_the_threads_it_let_go_back_in_the_sweep(redis_client, prefix) -> None:
    """Threads of a channel with memory off leave the registry at the sweep; switching the channel on puts them
    back, so the next sweep extracts them without waiting for their next message (another channel's stay out)."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    await p.switch_memory(T, OFF_CHANNEL, False)
    told = [Conversation.slack(T, channel, "1800000000.000100", "public") for channel in (OFF_CHANNEL, "C901")]
    await p.switch_memory(T, "C901", False)
    for c in told:
        await p.submit(c, "The staging cluster is called kestrel-eu.", author="alice", id="1800000000.000100")
        await p.run(c)
    p.memory.clock = lambda: time.time() + 3600
    assert [e.outcome for e in await p.memory.sweep()] == [], "memory off: both let go"
    assert await redis_client.zcard(activity_key(prefix)) == 0
    await p.switch_memory(T, OFF_CHANNEL, True)
    assert [(e.conversation_id, e.records) for e in await p.memory.sweep()] == [(told[0].id, 1)]
    assert await p.memory.sweep() == []
