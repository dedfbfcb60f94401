"""Retraction always wins: a source deleted (or its thread forgotten) while a writer of memory is between its read and
its write leaves no record derived from it, in what is stored and in what a turn is shown; a merged record only
loses the retracted part."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import Paused, Step, pipeline, scripted
from test_memory import _say

from threadkeeper.persistence import InboxItem, MemoryRecord
from threadkeeper.services import Conversation

T = "T1"
PUBLIC, OTHER, THIRD = "C100", "C200", "C300"
ON = {"threadkeeper_memory_workspaces": T, "threadkeeper_memory_channels": "*"}
FACTS = ["The staging cluster is called kestrel-eu and lives in eu-west-3.",
         "We decided to never deploy on Fridays, starting this week.",
         "The billing outage is tracked in ticket OPS-4471."]
ROTA = "Remember this for everyone: the on-call rota lives at go/rota-7731 and pages through PD-5521."


@pytest.fixture(autouse=True)
def model():
    m = scripted()
    m.default = Step(text="noted")
    return m


def cid(channel: str, thread: str) -> Conversation:
    return Conversation.slack(T, channel, thread, "public")


async def _delete(p: Any, conversation: Conversation, message_id: str) -> None:
    """The source message deleted in Slack: the event reaches the thread's inbox and its next run."""
    await p.submit_item(conversation, InboxItem(kind="delete", target_id=message_id, reply_expected=False))
    await p.run(conversation)


async def _stored(st: Any) -> list[MemoryRecord]:
    return await st.memory.records(T, now=0.0)


async def _shown(p: Any, question: str) -> tuple[str, list[MemoryRecord]]:
    block = await p.memory.block(cid(PUBLIC, "1900000000.000100"), question, asker=None, cap_tokens=2000)
    return block.text, block.records


async def test_a_source_deleted_during_extraction_is_never_written(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    result = await Paused(st.memory, "put").during(p.memory.extract(a), lambda: _delete(p, a, ids[0]))
    assert result.outcome == "succeeded" and result.records >= 1, "the other messages' records are written"
    assert not [r for r in await _stored(st) if ids[0] in r.source_ids], "0 records of the deleted message stored"
    text, shown = await _shown(p, "what is the staging cluster called?")
    assert "kestrel" not in text and not [r for r in shown if ids[0] in r.source_ids]
    assert "OPS-4471" in (await _shown(p, "which ticket tracks the billing outage?"))[0], "the rest is shown"
    assert (await p.memory.extract(a)).records == 0, "the watermark moved past it: it is never extracted again"
    assert not [r for r in await _stored(st) if ids[0] in r.source_ids]


async def test_a_source_deleted_during_consolidation_does_not_come_back(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await p.memory.extract(a)
    assert [r for r in await _stored(st) if ids[0] in r.source_ids]
    version = await Paused(st.memory, "write_version").during(p.memory.consolidate(T, f"channel:{PUBLIC}"),
                                                               lambda: _delete(p, a, ids[0]))
    stored = await _stored(st)
    assert stored and not [r for r in stored if ids[0] in r.source_ids], "the consolidation did not rewrite it"
    assert not set(version.records) - {r.id for r in stored}, "the version lists only what it wrote"
    text, shown = await _shown(p, "what is the staging cluster called?")
    assert "kestrel" not in text and not [r for r in shown if ids[0] in r.source_ids]


async def _two_channels(p: Any) -> tuple[Conversation, Conversation, str, str]:
    """The same thing told in two public channels, for everyone: by alice first, then by bob."""
    a, b = cid(PUBLIC, "1700000000.000100"), cid(OTHER, "1700000001.000100")
    [older] = await _say(p, a, [ROTA], start=0)
    [newer] = await _say(p, b, [ROTA.replace("pages through", "pages weekly through")], start=1)
    for c in (a, b):
        await p.memory.extract(c)
    return a, b, older, newer


def _rota(records: list[MemoryRecord]) -> list[MemoryRecord]:
    return [r for r in records if "rota" in r.text]


async def _merged(p: Any, st: Any) -> MemoryRecord:
    await p.memory.consolidate(T, "workspace")
    [merged] = _rota(await _stored(st))
    assert merged.channel == PUBLIC and set(merged.authors) == {"alice", "bob"} and merged.merged_from
    return merged


async def _only_the_older_is_left(p: Any, st: Any, older: str, newer: str) -> None:
    [left] = _rota(await _stored(st))
    assert left.source_ids == [older] and left.authors == ["alice"] and left.channel == PUBLIC, \
        "the merged record cites only the source left"
    text, shown = await _shown(p, "where does the on-call rota live?")
    assert "go/rota-7731" in text and "bob" not in text
    assert [r.source_ids for r in _rota(shown)] == [[older]]
    assert not [r for r in await _stored(st) if newer in r.source_ids]


async def test_a_merged_record_loses_the_deleted_newer_source(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    _, b, older, newer = await _two_channels(p)
    await _merged(p, st)
    await _delete(p, b, newer)
    await _only_the_older_is_left(p, st, older, newer)


async def test_a_merged_record_whose_own_source_is_deleted_falls_back_to_the_other(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a, _, older, newer = await _two_channels(p)
    merged = await _merged(p, st)
    await _delete(p, a, older)
    [left] = _rota(await _stored(st))
    assert (left.id, left.source_ids, left.authors, left.channel) == (merged.id, [newer], ["bob"], OTHER)
    assert "weekly" in left.text, "its text is the part that is left"
    text, _ = await _shown(p, "where does the on-call rota live?")
    assert "alice" not in text and "go/rota-7731" in text


async def test_a_source_deleted_during_a_merge_leaves_the_merged_record_without_it(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    _, b, older, newer = await _two_channels(p)
    await Paused(st.memory, "write_version").during(p.memory.consolidate(T, "workspace"),
                                                    lambda: _delete(p, b, newer))
    await _only_the_older_is_left(p, st, older, newer)


async def test_forgetting_one_source_thread_of_a_merged_record_takes_only_its_part(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    _, b, older, newer = await _two_channels(p)
    await _merged(p, st)
    forgotten = await p.forget(b)
    assert forgotten.records >= 1
    await _only_the_older_is_left(p, st, older, newer)
    await p.memory.consolidate(T, "workspace")
    await _only_the_older_is_left(p, st, older, newer)


async def test_forgetting_a_thread_during_its_extraction_leaves_nothing_of_it(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    await _say(p, a, FACTS)
    await Paused(st.memory, "put").during(p.memory.extract(a), lambda: p.forget(a))
    assert not [r for r in await _stored(st) if r.conversation == a.id]
    assert "kestrel" not in (await _shown(p, "what is the staging cluster called?"))[0]


async def test_a_merge_landing_during_a_retraction_keeps_the_part_it_added(redis_client, prefix) -> None:
    """The retraction read a merged record (two channels' parts) to take the first part out; before it wrote, a merge
    added a third channel's part: the rewrite sees the change, reads again and keeps the part the merge added."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a, _, older, newer = await _two_channels(p)
    merged = await _merged(p, st)
    c = cid(THIRD, "1700000002.000100")
    [third] = await _say(p, c, [ROTA.replace("pages through", "pages nightly through")], start=2)
    await p.memory.extract(c)
    await Paused(st.memory, "put").during(_delete(p, a, older), lambda: p.memory.consolidate(T, "workspace"))
    [left] = _rota(await _stored(st))
    assert left.id == merged.id and set(left.source_ids) == {newer, third}, "the second and third parts are kept"
    assert [part.source_ids for part in left.origins] == [[newer], [third]]


async def test_a_retraction_stopped_after_its_tombstone_is_never_shown(redis_client, prefix) -> None:
    """A process that wrote the tombstone and stopped before rewriting the records: readers see the records through
    the tombstones, so neither a turn nor the command line shows the retracted part."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a, b, older, newer = await _two_channels(p)
    await _merged(p, st)
    ids = await _say(p, a, FACTS, start=5)
    await p.memory.extract(a)
    await st.memory.tombstone(T, [f"msg:{OTHER}:{newer}", f"msg:{PUBLIC}:{ids[0]}"])  # and nothing after it
    assert [r for r in await st.memory.records(T, now=0.0, retracted=True) if newer in r.source_ids], \
        "still stored as it was"
    await _only_the_older_is_left(p, st, older, newer)
    text, _ = await _shown(p, "what is the staging cluster called?")
    assert "kestrel" not in text


async def test_two_deletes_of_one_record_count_it_once(redis_client, prefix) -> None:
    """Forgetting a record from two places at once (the command line and Home): the first paused after it looked,
    the second deletes it; each says how many records it deleted, and only one of them did."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    await _say(p, a, FACTS)
    await p.memory.extract(a)
    record = (await _stored(st))[0]
    second: list[int] = []

    async def other() -> None:
        second.append(await st.memory.delete(T, [record.id]))

    first = await Paused(st.memory, "_write").during(st.memory.delete(T, [record.id, record.id]), other)
    assert first + second[0] == 1 and second == [1]
    assert await st.memory.delete(T, [record.id]) == 0


async def test_a_record_merged_before_parts_were_kept_goes_with_a_source_in_another_channel(redis_client,
                                                                                           prefix) -> None:
    """A merged record stored without its parts (as merges wrote them before) does not know which channel each of
    its sources was in: a source deleted in the other channel still retracts it, whole."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    _, b, older, newer = await _two_channels(p)
    merged = await _merged(p, st)
    await st.memory.put(T, [merged.model_copy(update={"origins": []})], unchanged=[merged])
    [legacy] = _rota(await _stored(st))
    assert not legacy.origins and legacy.channel == PUBLIC and newer in legacy.source_ids
    await _delete(p, b, newer)
    assert not [r for r in await st.memory.records(T, now=0.0, retracted=True) if newer in r.source_ids]
    text, _ = await _shown(p, "where does the on-call rota live?")
    assert "bob" not in text and "weekly" not in text
