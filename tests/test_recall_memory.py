"""Recall's indexes: what they hold in memory, as estimated and as measured, and the bound they share with the
parsed-history cache."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable

import pytest
from fakes import Step, scripted
from test_recall import CONV, QUESTIONS, _epochs_thread, _pipeline

from threadkeeper.persistence import Message, TextPart
from threadkeeper.services.recall import RECALL_HEADER, ConversationIndex
from threadkeeper.services.recall import cards as stored_cards
from threadkeeper.services.recall import derived as stored_derived
from threadkeeper.services.recall.index import INDEX_MESSAGE_BYTES


@pytest.fixture
def model():  # type: ignore[no-untyped-def]
    m = scripted()
    m.default = Step(text="noted")
    return m


def _texts(count: int) -> list[str]:
    """Chat-like texts of 20 to 600 characters over a vocabulary of 4,000 made-up words, some much commoner."""
    rng = random.Random(7)
    vocabulary = ["".join(rng.choice("abcdefghiklmnoprstuvwy") for _ in range(rng.randint(3, 11))) for _ in range(4_000)]
    out = []
    for _ in range(count):
        words: list[str] = []
        size = rng.choice((20, 60, 120, 250, 600))
        while sum(len(w) + 1 for w in words) < size:
            words.append(vocabulary[min(int(rng.paretovariate(0.8)) - 1, len(vocabulary) - 1)] if rng.random() < 0.5
                         else rng.choice(vocabulary))
        out.append(" ".join(words).capitalize() + ".")
    return out


def _stored(count: int) -> list[str]:
    """``count`` messages as stored (JSON), five people's."""
    return [Message(id=f"1700000000.{i:06d}", role="user", parts=[TextPart(text=text)], author=f"U{i % 5}",
                    tokens=len(text) // 4 + 4, created_at=1_700_000_000.0 + i, ref=i + 1,
                    note=text[:len(text) // 2]).model_dump_json() for i, text in enumerate(_texts(count))]


def _measured(build: Callable[[], ConversationIndex]) -> tuple[int, int]:
    """What ``build``'s index estimates it holds, and what dropping it frees (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        index = build()
        gc.collect()
        estimate = index.memory()
        held = tracemalloc.get_traced_memory()[0]
        del index
        gc.collect()
        return estimate, held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_an_index_estimates_the_memory_it_holds_within_a_stated_factor() -> None:
    """An index's estimate (:meth:`ConversationIndex.memory`), kept as it grows, is within 0.8 to 1.3 times what
    dropping it frees: built from every message's body, built from the stored cards as a worker that starts cold
    builds it, with some bodies read, and with them let go again."""
    stored = _stored(4_000)
    chain = [("cp", len(stored))]

    def whole() -> ConversationIndex:
        index = ConversationIndex()
        index.add([Message.model_validate_json(raw) for raw in stored])
        index.search.searchable()
        return index

    def from_cards(read: int, shed: bool = False) -> Callable[[], ConversationIndex]:
        messages = [Message.model_validate_json(raw) for raw in stored]
        found = [stored_derived.derive(m) for m in messages]
        ids = [m.id for m in messages]
        held = stored_cards.encode(chain, messages, found)
        kept = stored_derived.encode(ids, found)
        assert held is not None and kept is not None
        del messages, found

        def build() -> ConversationIndex:
            index = ConversationIndex()
            index.add_cards([(stored_cards.decode(held, chain), chain, ())], stored_derived.decode(kept, ids))
            index.search.searchable()
            for at in range(0, read * 4, 4):
                index.took(at, Message.model_validate_json(stored[at]))
            if shed:
                assert index.shed() > 0 and all(body is None for body in index.bodies)
            return index

        return build

    for name, build in (("whole", whole), ("cards", from_cards(0)), ("cards and bodies", from_cards(1_000)),
                        ("bodies let go", from_cards(1_000, shed=True))):
        estimate, freed = _measured(build)
        assert 0.8 * freed <= estimate <= 1.3 * freed, (name, estimate, freed)


async def test_recall_lets_bodies_go_before_indexes_and_recalls_the_same_blocks(model, prefix, client) -> None:
    """When the indexes hold more than the room the history cache leaves of the bound, the bodies they read go first
    (read again when a turn shows them); the index stays, and every turn recalls what a worker that holds everything
    recalls."""
    writer = _pipeline(prefix, client)
    await _epochs_thread(writer)
    holder, bounded = _pipeline(prefix, client), _pipeline(prefix, client)
    index: ConversationIndex | None = None
    read: list[int] = []
    for n, question in enumerate(QUESTIONS):
        expected = await holder.context(CONV, arriving=[holder.message(question, author="carol")])
        got = await bounded.context(CONV, arriving=[bounded.message(question, author="carol")])
        assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text
        if n:
            assert bounded.recall.loaded(CONV) is index, "the index stays (not built again)"
        index = bounded.recall.loaded(CONV)
        assert index is not None
        if not n:
            read = [at for at in index.placed_positions() if index.bodies[at] is not None]
            assert read, "a turn reads the bodies it may show"
            # less room than the index with the bodies it read: they go before the next turn searches
            bounded.recall.max_bytes = bounded.checkpoints.cached_bytes + index.memory() - 1
        elif n == 1:
            assert any(index.bodies[at] is None for at in read), "the bodies read went"
    full = holder.recall.loaded(CONV)
    assert full is not None and index is not None and sum(b is not None for b in full.bodies) > sum(b is not None for b in index.bodies)


async def test_the_least_recently_used_index_goes_and_one_over_the_room_is_not_kept(model, prefix, client,
                                                                                    monkeypatch) -> None:
    """With two conversations' indexes over the room, the one used least recently goes and the turn's own stays; an
    index that alone holds more than the room the history cache leaves, its read bodies let go, is built once for its
    turn and not kept, and recalls what a worker that holds it recalls."""
    from threadkeeper.services.recall import index as module

    other = CONV + "-other"
    writer = _pipeline(prefix, client)
    await _epochs_thread(writer)
    for i in range(3):
        await writer.submit(other, f"the other thread's message {i} about ferries", author="dana", id=f"1800.{i:06d}")
        await writer.run(other)
    p, holder = _pipeline(prefix, client), _pipeline(prefix, client)
    question = p.message(QUESTIONS[1], author="carol")
    await p.context(other, arriving=[p.message("what about ferries?", author="carol")])
    await p.context(CONV, arriving=[question])
    small, large = p.recall.loaded(other), p.recall.loaded(CONV)
    assert small is not None and large is not None
    large.shed()
    p.recall.max_bytes = p.checkpoints.cached_bytes + large.memory() + small.memory() // 2
    got = await p.context(CONV, arriving=[question])
    assert p.recall.loaded(other) is None and p.recall.loaded(CONV) is large, "the least recently used goes"
    large.shed()
    p.recall.max_bytes = p.checkpoints.cached_bytes + large.memory() // 2
    built: list[ConversationIndex] = []

    class Counted(ConversationIndex):
        def __init__(self) -> None:
            super().__init__()
            built.append(self)

    monkeypatch.setattr(module, "ConversationIndex", Counted)
    got = await p.context(CONV, arriving=[question])
    assert not built, "the turn searches the index it synced"
    del large, small
    gc.collect()
    got = await p.context(CONV, arriving=[question])
    assert len(built) == 1, "built once for the turn"
    expected = await holder.context(CONV, arriving=[holder.message(QUESTIONS[1], author="carol")])
    assert p.recall.loaded(CONV) is None, "over the room alone: not kept"
    assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text


def _holding_none(recall) -> None:  # type: ignore[no-untyped-def]
    """``recall`` as a worker that holds no index (after a restart): none kept, none measured."""
    recall._indexes.clear()
    recall._sizes.clear()
    recall._held = (0, 0)


async def test_a_worker_rotating_over_more_threads_than_its_room_keeps_the_same_indexes(model, prefix, client,
                                                                                         monkeypatch) -> None:
    """Four threads taken in turn by a worker whose room holds two of their indexes: the two it kept first stay and
    answer every round from memory, the other two are built for their turns and not kept (least recently used alone
    would build every index every round and keep none when its thread comes again); a thread then asked more often
    than a kept one takes that one's room."""
    from threadkeeper.services.recall import index as module

    threads = [f"{CONV}-r{i}" for i in range(4)]
    p = _pipeline(prefix, client)
    said = iter(range(1, 10_000))

    async def turn(cid: str) -> None:
        await p.submit(cid, f"what about the ferries, {next(said)}?", author="carol", id=f"1800.{next(said):06d}")
        await p.run(cid)

    for cid in threads:  # (each thread's own messages, and its index built once with room for all)
        for i in range(20):
            await p.submit(cid, f"ferry timetable {i} for {cid} and the harbour", author="dana", id=f"1700.{i:06d}")
            await p.run(cid)
    sizes = [index.memory() for cid in threads if (index := p.recall.loaded(cid)) is not None]
    assert len(sizes) == 4
    # room for two indexes as they grow over the turns below, not for three (the history cache's share left out)
    monkeypatch.setattr(type(p.checkpoints), "cached_bytes", property(lambda _: 0))
    p.recall.max_bytes = int(2.8 * max(sizes))
    built: list[str] = []

    class Counted(module.ConversationIndex):
        def __init__(self) -> None:
            super().__init__()
            built.append("")

    monkeypatch.setattr(module, "ConversationIndex", Counted)
    _holding_none(p.recall)  # (a worker that holds none of them, as after a restart)
    p.recall._uses.clear()
    for cid in threads:
        await turn(cid)
    kept = [cid for cid in threads if p.recall.loaded(cid) is not None]
    assert kept == threads[:2], kept
    for _ in range(3):
        built.clear()
        for cid in threads:
            await turn(cid)
        assert [cid for cid in threads if p.recall.loaded(cid) is not None] == kept, "the same ones stay"
        assert len(built) == 2, "only the two not kept are built again"
    for _ in range(3):  # (the fourth thread, now asked more often than the others)
        await turn(threads[3])
    assert p.recall.loaded(threads[3]) is not None, "asked more often: it takes a room"
    assert sum(p.recall.loaded(cid) is not None for cid in threads[:2]) == 1
    assert all(index.memory() < p.recall.max_bytes / 2 for cid in threads if (index := p.recall.loaded(cid)))


async def test_an_index_held_through_compactions_counts_and_lets_go_of_the_bodies_each_fork_sealed(model, prefix,
                                                                                                  client) -> None:
    """The head's bodies are the history cache's, counted there: an index counts a message's body once a fork
    sealed it, and can then let it go (read again from where it is stored when a turn shows it), where it held every
    body it was given for as long as it was kept; what it recalls stays the same."""
    p, holder = _pipeline(prefix, client), _pipeline(prefix, client)
    await _epochs_thread(p)
    index = p.recall.loaded(CONV)
    assert index is not None
    head = {m.id for m in (await p.checkpoints.load_history(CONV)).messages}
    sealed = [at for at, body in enumerate(index.bodies) if body is not None and index.ids[at] not in head]
    assert sealed and index._body_bytes > 0, "bodies sealed by the forks, counted"
    assert index._head_bytes > 0 and index.memory() == INDEX_MESSAGE_BYTES * index.size + index.ids.memory() + \
        index.search.memory() + index._body_bytes + index._line_bytes, "the head's bodies not counted"
    index.shed()
    assert index._body_bytes == 0
    assert {index.ids[at] for at, body in enumerate(index.bodies) if body is not None} <= head, \
        "every sealed body let go (the head's are the history cache's)"
    for question in QUESTIONS:
        got = await p.context(CONV, arriving=[p.message(question, author="carol")])
        expected = await holder.context(CONV, arriving=[holder.message(question, author="carol")])
        assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text


async def test_a_thread_used_often_long_ago_gives_way_to_one_used_now(model, prefix, client, monkeypatch) -> None:
    """The uses that decide which index keeps the room weigh recent ones most (every count halved each
    :data:`USES_WINDOW` uses): a thread asked six times, then another asked again and again, takes its room within
    four turns (counting every use alike, it would take seven)."""
    from threadkeeper.services.recall import index as module

    threads = [f"{CONV}-old", f"{CONV}-new"]
    p = _pipeline(prefix, client)
    said = iter(range(1, 10_000))

    async def turn(cid: str) -> None:
        await p.submit(cid, f"what about the ferries, {next(said)}?", author="carol", id=f"1800.{next(said):06d}")
        await p.run(cid)

    for cid in threads:
        for i in range(20):
            await p.submit(cid, f"ferry timetable {i} for {cid} and the harbour", author="dana", id=f"1700.{i:06d}")
            await p.run(cid)
    sizes = [index.memory() for cid in threads if (index := p.recall.loaded(cid)) is not None]
    monkeypatch.setattr(type(p.checkpoints), "cached_bytes", property(lambda _: 0))
    monkeypatch.setattr(module, "USES_WINDOW", 4)
    p.recall.max_bytes = int(1.6 * max(sizes))
    _holding_none(p.recall)
    p.recall._uses.clear()
    p.recall._counted = 0
    for _ in range(6):
        await turn(threads[0])
    assert p.recall.loaded(threads[0]) is not None
    taken = 0
    while p.recall.loaded(threads[1]) is None and taken < 10:
        await turn(threads[1])
        taken += 1
    assert p.recall.loaded(threads[1]) is not None and p.recall.loaded(threads[0]) is None
    assert taken <= 4, taken


async def test_a_turn_measures_only_the_indexes_that_changed_since_they_were_last_measured(model, prefix, client,
                                                                                            monkeypatch) -> None:
    """A worker keeping many threads' indexes measures, on each turn, the turn's own and those that changed since
    (a search, an observed turn): not every index it keeps; every one again after :data:`REMEASURE` turns."""
    from threadkeeper.services.recall import index as module

    threads = [f"{CONV}-m{i}" for i in range(12)]
    p = _pipeline(prefix, client)
    for cid in threads:
        for i in range(2):
            await p.submit(cid, f"ferry timetable {i} for {cid}", author="dana", id=f"1700.{i:06d}")
            await p.run(cid)
    assert all(p.recall.loaded(cid) is not None for cid in threads)
    measured: list[int] = []
    memory = module.ConversationIndex.memory
    monkeypatch.setattr(module.ConversationIndex, "memory", lambda self: (measured.append(1), memory(self))[1])
    await p.submit(threads[0], "what about the ferries?", author="carol", id="1800.000001")
    await p.run(threads[0])
    assert 0 < len(measured) <= 3, len(measured)
    monkeypatch.setattr(module, "REMEASURE", 1)
    measured.clear()
    await p.submit(threads[1], "and the harbour?", author="carol", id="1800.000002")
    await p.run(threads[1])
    assert len(measured) >= len(threads), "every index measured again"
    # what the kept indexes hold is summed as each changes, never added up anew: the sums stay those of their sizes
    # as last measured, as turns change them and the bound lets them go
    monkeypatch.setattr(module, "REMEASURE", 256)
    p.recall.max_messages = 20
    for n, cid in enumerate(threads * 2):
        await p.submit(cid, f"and the timetable {n}?", author="carol", id=f"1900.{n:06d}")
        await p.run(cid)
        sizes = p.recall._sizes
        assert set(sizes) == set(p.recall._indexes) and len(sizes) < len(threads)
        assert p.recall._held == (sum(b for b, _ in sizes.values()), sum(m for _, m in sizes.values()))
        assert p.recall._held[1] <= 20 or list(sizes) == [cid]
