"""``threadkeeper conversations`` reads the store's directory of conversations (never a scan of every key once the
directory exists), and ``conversations``, ``history`` and ``context`` give one message count for a conversation."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import REDIS_URL
from factories import msg
from fakes import pipeline
from test_budget_and_cli import cli

from threadkeeper.persistence import CheckpointStore
from threadkeeper.persistence.keys import directory_built_key, directory_key

OFFLINE = {"ai_model": "offline", "ai_model_context_window_tokens": None}


async def _talk(p: Any, conversation_id: str, turns: int, text: str = "hello, where are we with the deploy?",
                start: int = 0) -> None:
    for i in range(start, start + turns):
        await p.submit(conversation_id, f"{text} ({i})", author="U1", id=f"{conversation_id}-{i}")
        await p.run(conversation_id)


@contextmanager
def _no_scans(client: Any) -> Iterator[None]:
    def scan_iter(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the listing scanned the keyspace")

    client.scan_iter = scan_iter
    try:
        yield
    finally:
        del client.scan_iter


async def test_conversations_are_listed_from_the_directory_newest_first_without_a_scan(client, prefix: str) -> None:
    p, _ = pipeline(prefix, client, settings=OFFLINE)
    names = [f"console:list-{i}" for i in range(12)]
    for name in names:
        await _talk(p, name, 1)
    rows, total = await p.conversations(5)  # the first listing of a store may scan once (see the next test)
    expiring = [k async for k in client.scan_iter(match=f"{prefix}:{{{names[-2]}}}:*")]
    with _no_scans(client):
        rows, total = await p.conversations(5)
        assert total == 12 and [r.id for r in rows] == names[::-1][:5]
        await _talk(p, names[3], 1, start=1)  # activity moves a conversation to the top
        await _talk(p, "console:list-new", 1)
        rows, total = await p.conversations(3)
        assert total == 13 and [r.id for r in rows] == ["console:list-new", names[3], names[-1]]
        assert rows[1].messages == 4 and rows[0].messages == 2
    await p.forget(names[-1])
    await client.delete(*expiring)  # as if its keys expired
    with _no_scans(client):
        rows, total = await p.conversations(20)
    assert total == 11 and names[-1] not in [r.id for r in rows] and names[-2] not in [r.id for r in rows]
    assert await client.zscore(directory_key(prefix), names[-2]) is None, "an expired conversation leaves it"


async def test_a_store_written_before_the_directory_is_listed_whole_after_one_scan(client, prefix: str) -> None:
    p, _ = pipeline(prefix, client, settings=OFFLINE)
    for i in range(6):
        await _talk(p, f"console:old-{i}", 1)
    await client.delete(directory_key(prefix), directory_built_key(prefix))  # what an earlier version left
    rows, total = await p.conversations(10)
    assert total == 6 and [r.id for r in rows] == [f"console:old-{i}" for i in range(5, -1, -1)]
    with _no_scans(client):
        assert (await p.conversations(10))[1] == 6


@pytest.mark.redis
async def test_conversations_history_and_context_give_one_message_count(redis_client, prefix: str) -> None:
    p, _ = pipeline(prefix, redis_client, settings=OFFLINE, context_window=4_000)
    conversation = "console:counted"
    await _talk(p, conversation, 24, "the staging cluster moved to region eu-west-2 and the billing job runs at six; "
                                     "please keep the ticket OPS-4411 in mind for the rollout next week")
    lineage = await p.lineage(conversation)
    assert any(r.kind.value == "compaction" for r in lineage), "the conversation was compacted (a fork)"
    head = next(r for r in lineage if r.is_head)
    expected = 48  # 24 people's messages and 24 replies
    assert head.message_count != expected, "what the head's history holds is another quantity (held)"
    env = {"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix}
    listed = cli("conversations", "--json", env=env)
    history = cli("history", conversation, env=env)
    context = cli("context", conversation, "--json", env=env)
    context_text = cli("context", conversation, env=env)
    for result in (listed, history, context, context_text):
        assert result.returncode == 0, result.stderr
    assert json.loads(listed.stdout)[0]["messages"] == expected
    assert re.search(rf"lineage of {conversation}: {expected} messages so far", history.stdout), history.stdout[:400]
    assert json.loads(context.stdout)["messages"] == expected
    assert f"({expected} messages so far)" in context_text.stdout.splitlines()[0]


async def test_every_write_of_a_conversation_keeps_it_in_the_directory(client, prefix: str) -> None:
    """Not only messages arriving: a turn written by a worker or a command (a compaction, an import) lists it too."""
    store = CheckpointStore(client, prefix=prefix)
    head = None
    for i in range(3):
        cp = await store.start_turn("console:written", messages=[msg(f"written {i}", id=f"w{i}")])
        await store.commit("console:written", cp.id, expected_head=head)
        head = cp.id
    await store.start_turn("console:other", messages=[msg("started", id="o1")])
    with _no_scans(client):
        await client.set(directory_built_key(prefix), "1")  # as after a first listing
        ids, total = await store.recent(10)
    assert ids == ["console:other", "console:written"] and total == 2
