"""Sealed epochs merged into runs: a worker that starts cold reads a few stored segments, not one per epoch."""

from __future__ import annotations

import logging

import pytest
from factories import msg
from fakes import fields_read, pipeline, scripted

from threadkeeper.bench_data import fill_epochs
from threadkeeper.persistence import ConversationKeys
from threadkeeper.services.recall import RECALL_HEADER, Recall
from threadkeeper.services.recall import cards as stored_cards
from threadkeeper.services.recall import postings as stored_segment
from threadkeeper.services.recall import runs as stored_runs
from threadkeeper.services.recall.derived import derive
from threadkeeper.services.text import search_terms

CONV = "slack:T1:C9:1700000000.000777"


def test_the_runs_of_a_thread_merge_each_epoch_a_few_times_however_long_it_grows() -> None:
    """Runs are made from the oldest epochs, the largest that fit first, each a power of the fanout: the epochs left
    alone are fewer than the fanout, there are at most fanout-1 runs of each size, and a run once made is only ever
    merged into a larger one as the thread grows (never split), so each epoch is merged again once per size."""
    fanout = stored_runs.FANOUT
    assert stored_runs.plan(fanout - 1) == []
    assert stored_runs.plan(40) == [(i * 8, 8) for i in range(5)]
    assert stored_runs.plan(400) == [*((i * 64, 64) for i in range(6)), (384, 8), (392, 8)]
    before: list[tuple[int, int]] = []
    for count in range(1, 1_200):
        made = stored_runs.plan(count)
        at = 0
        for start, size in made:
            assert start == at and size >= fanout and fanout ** round(__import__("math").log(size, fanout)) == size
            at += size
        assert count - at < fanout, "fewer than the fanout epochs are left alone"
        assert all(sum(1 for _, s in made if s == size) < fanout for _, size in made)
        for start, size in before:  # (a run of the thread before is in this plan, or inside a larger run of it)
            assert any(s <= start and start + size <= s + n for s, n in made), (count, start, size)
        before = made


def _epochs() -> list[tuple[str, list, tuple[tuple[str, int], ...]]]:  # type: ignore[type-arg]
    """Three epochs as stored: each opens with a handoff (never taken) and a message a compaction retained (the one
    before it again), then people's messages (one unnamed, an edit's notice) and the assistant's replies."""
    out = []
    previous = None
    for e in range(3):
        messages = [msg("[handoff]", id=f"h{e}", handoff=True)]
        if previous is not None:
            messages.append(previous)
        for i in range(6):
            n = e * 10 + i
            author = (None, "alice", "bob", f"carol{e}")[i % 4]
            role = "assistant" if i == 5 else "user"
            messages.append(msg(f"the plan {n} says w{n % 4} and Garden{e} thanks Kate", id=f"1700.{n:06d}",
                                author=None if role == "assistant" else author, role=role).model_copy(
                update={"ref": n + 1, "created_at": 1_700_000_000.5 + n, "note": f"note {n}" if i % 2 else None,
                        "note_tokens": [i] if i % 2 else []}))
        messages.append(msg("the plan says w9", id=f"1700.{e * 10 + 1:06d}:edit:x{e}", author="alice"))
        previous = messages[-2]
        chain = ((f"cp{e}a", 3), (f"cp{e}b", len(messages) - 3))
        out.append((f"cp{e}b", messages, chain))
    return out


def test_a_run_is_stored_byte_for_byte_as_its_messages_would_be_as_one_epoch() -> None:
    """A run merged from its parts' stored cards and segments (an epoch, or a smaller run) is what encoding its
    messages as one epoch whose chain is theirs one after the other stores: the same cards (authors listed once, in
    the order they first wrote) and the same segment (each posting's offset moved by the messages before its part)."""
    epochs = _epochs()
    stored: dict[str, bytes] = {}
    for name, messages, chain in epochs:
        derived = [derive(m) for m in messages]
        stored[stored_cards.field(name)] = stored_cards.encode(chain, messages, derived) or b""
        stored.update(stored_segment.encode(name, [m.id for m in messages], derived) or {})
    parts = [stored_runs.Part(chain, stored[stored_cards.field(name)], stored[stored_segment.header_field(name)],
                              stored, name) for name, _, chain in epochs]
    run = stored_runs.name("cp0b", 3)
    merged = stored_runs.merge(run, parts)
    messages = [m for _, ms, _ in epochs for m in ms]
    chain = tuple(link for _, _, c in epochs for link in c)
    derived = [derive(m) for m in messages]
    assert merged == {stored_cards.field(run): stored_cards.encode(chain, messages, derived),
                      **(stored_segment.encode(run, [m.id for m in messages], derived) or {})}
    # a run of a run and an epoch is the same run
    first = stored_runs.merge("run:first:2", parts[:2])
    again = stored_runs.merge(run, [stored_runs.Part(parts[0].chain + parts[1].chain,
                                                     first[stored_cards.field("run:first:2")],
                                                     first[stored_segment.header_field("run:first:2")], first,
                                                     "run:first:2"), parts[2]])
    assert again == merged
    with pytest.raises(ValueError):
        stored_runs.merge(run, [parts[0]._replace(header=stored[stored_segment.header_field("cp1b")]), *parts[1:]])


@pytest.fixture
def model():  # type: ignore[no-untyped-def]
    return scripted()


async def _long_thread(p, messages: int = 900) -> None:  # type: ignore[no-untyped-def]
    """A thread of epochs of ten messages, each compaction followed by what the turn after it does for recall (and,
    after its reply, the runs of its sealed epochs)."""
    await fill_epochs(p.checkpoints, CONV, messages, per_epoch=10,
                      recall=Recall(p.checkpoints, p.notes, p.recall.tokenizer, epochs=p.recall.epochs))


async def test_a_cold_worker_reads_a_long_threads_sealed_epochs_as_a_few_runs_and_recalls_the_same(
        model, prefix, client, monkeypatch) -> None:
    """89 sealed epochs are stored as a run of 64 and three of 8 (the runs merged into the larger one removed), and a
    worker that starts cold reads the cards and segment headers of those 4 runs and 1 epoch, not of 89 epochs, then
    a question's buckets from 5 segments; it scores and recalls exactly what a worker reading each epoch does, and
    what one that derived every message does."""
    p, _ = pipeline(prefix, client, context_window=4096)
    await _long_thread(p)
    key = ConversationKeys(prefix, CONV).recall
    listing = stored_runs.decode(await client.hget(key, stored_runs.FIELD))
    assert [run.size for run in listing] == [64, 8, 8, 8]
    fields = [f.decode() for f in await client.hkeys(key)]
    assert {":".join(f.split(":")[:3]) for f in fields if f.startswith(stored_runs.PREFIX)} == {
        run.name for run in listing}, "runs no longer named are removed"

    async def context(reader) -> str:  # type: ignore[no-untyped-def]
        got = await reader.context(CONV, arriving=[reader.message("what about w7 and w12?", author="carol")])
        return got.context[-1].text

    reader, _ = pipeline(prefix, client, context_window=4096)
    asked = fields_read(reader.recall, monkeypatch)
    text = await context(reader)
    assert RECALL_HEADER in text
    assert asked[0] == ["totals", "runs"] and len(asked[1]) == 2 * 5, "the headers and cards of 4 runs and 1 epoch"
    index = reader.recall.loaded(CONV)
    assert index is not None and index.totalled and len(index.forms) == 5 and len(index.sealed) == 89
    assert all(index.ids.find(ident) == at for at, ident in enumerate(index.ids)), "each id found where it is"
    cited = await reader.recall.resolve(CONV, await reader.checkpoints.load_history(CONV), "#345")
    assert cited is not None and cited.ref == 345
    await client.hdel(key, stored_runs.FIELD)
    each, _ = pipeline(prefix, client, context_window=4096)
    assert await context(each) == text
    by_epoch = each.recall.loaded(CONV)
    assert by_epoch is not None and len(by_epoch.forms) == 89 and by_epoch.sealed == index.sealed
    builder, _ = pipeline(prefix, client, context_window=4096)
    builder.recall.epochs = None
    assert await context(builder) == text
    built = builder.recall.loaded(CONV)
    assert built is not None
    terms = list(search_terms("what about w7 and w12?"))
    assert index.scores(terms) == by_epoch.scores(terms) == built.scores(terms), "the same scores, to the last bit"
    # its reply out, the worker that read each epoch stores the runs again
    await each.recall.after_reply(CONV)
    assert stored_runs.decode(await client.hget(key, stored_runs.FIELD)) == listing
    # a worker that saw fewer epochs sealed (its turn began before the last forks) leaves a newer listing as it is
    stored = {f.decode() for f in await client.hkeys(key)}
    assert await stored_runs.update(p.recall.epochs, CONV, index.sealed[:63]) == 0  # (it would make 7 runs of 8)
    assert stored_runs.decode(await client.hget(key, stored_runs.FIELD)) == listing
    assert {f.decode() for f in await client.hkeys(key)} == stored, "no run of the newer listing removed"


async def test_a_run_that_cannot_be_used_is_read_epoch_by_epoch_and_made_again_after_the_reply(
        model, prefix, client, monkeypatch, caplog) -> None:
    """A run whose stored values cannot be used (corrupt, cut short) costs a cold worker one more read: its epochs
    are read one by one, with one log line, and what is recalled is the same; the listing is removed, and once the
    reply is out the runs are made again, so the next cold worker reads them."""
    p, _ = pipeline(prefix, client, context_window=4096)
    await _long_thread(p, 200)
    key = ConversationKeys(prefix, CONV).recall
    listing = stored_runs.decode(await client.hget(key, stored_runs.FIELD))
    assert [run.size for run in listing] == [8, 8]
    question = "what about w7 and w12?"
    first, _ = pipeline(prefix, client, context_window=4096)
    expected = (await first.context(CONV, arriving=[first.message(question, author="carol")])).context[-1].text
    await client.hset(key, stored_cards.field(listing[1].name), b"not cards")
    reader, _ = pipeline(prefix, client, context_window=4096)
    asked = fields_read(reader.recall, monkeypatch)
    with caplog.at_level(logging.WARNING, logger="threadkeeper.recall"):
        got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
    assert got.context[-1].text == expected
    assert sum("a run of its sealed epochs cannot be used" in r.getMessage() for r in caplog.records) == 1
    index = reader.recall.loaded(CONV)
    assert index is not None and index.totalled and len(index.forms) == 19, "every epoch read as itself"
    assert len(asked[2]) == 2 * 16, "the epochs of both runs read in one more round trip"
    assert await client.hget(key, stored_runs.FIELD) is None
    await reader.recall.after_reply(CONV)
    assert stored_runs.decode(await client.hget(key, stored_runs.FIELD)) == listing
    again, _ = pipeline(prefix, client, context_window=4096)
    asked = fields_read(again.recall, monkeypatch)
    assert (await again.context(CONV, arriving=[again.message(question, author="carol")])).context[-1].text == expected
    assert len(asked[1]) == 2 * 5, "2 runs and 3 epochs"
