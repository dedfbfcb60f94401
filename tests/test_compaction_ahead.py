"""Compaction planned ahead of need, on the real Redis: a committed turn past the preparation threshold has the
summarizer's part of the next handoff written in the background; the turn that reaches the trigger adopts it by the
same fork and compare-and-set, without calling the summarizer, when the head still descends from the checkpoint it
was planned from; otherwise it compacts as before."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from fakes import Step, pipeline, scripted, until
from summarizers import RecordingSummarizer

from threadkeeper.persistence import CheckpointKind, History, InboxItem
from threadkeeper.services.models._litellm import register_provider

CONV = "slack:T1:C9:1700000000.000400"


class CountingSummarizer(RecordingSummarizer):
    """A summarizer that writes one narrative line citing the first message it is given, and counts its calls;
    while ``gate`` is clear, a call waits for it (``waiting`` counts those)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = 0

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any  # type: ignore[override]
                          ) -> Any:
        if not self.gate.is_set():
            self.waiting += 1
            await self.gate.wait()
        return await super().acompletion(model, messages, *args, **kwargs)

    def narrative(self, body: str) -> str:
        new = body.split("\n\nNew messages:\n")[-1].splitlines()
        first = next((ln for ln in new if ln.startswith("[") and "] " in ln), "")
        ident = first[1:].split("]", 1)[0]
        return f"- [{ident}] the thread reviewed its status updates" if ident else "- nothing to report"


def update(i: int) -> str:
    return (f"status update {i}: the rollout of service-{i} went fine and its dashboards look calm, the owners "
            f"checked alerts and runbooks, and nothing else needs doing before the weekly review on Thursday")


def summarized(prefix: str, client: Any, name: str, **settings: Any) -> tuple[Any, CountingSummarizer]:
    model = scripted()
    model.default = Step(text="noted")
    summarizer = CountingSummarizer()
    register_provider(name, summarizer)
    p, _ = pipeline(prefix, client, context_window=4096, settings={"ai_fast_model": f"{name}/test",
                                                                   "ai_fast_model_context_window_tokens": 4096,
                                                                   **settings})
    p.model_script = model
    return p, summarizer


async def say(p: Any, i: int, text: str | None = None) -> list[Any]:
    """One person's message that asks for a reply, and the turn that answers it (and what it left running)."""
    await p.submit(CONV, text or update(i), author="alice", id=f"1700.{i:06d}")
    results = await p.run(CONV)
    await p.settle()
    return list(results)


async def until_planned(p: Any) -> tuple[int, Any]:
    """Turns until a handoff is planned ahead; returns the next message number and the record."""
    for i in range(200):
        await say(p, i)
        record = await p.checkpoints.prepared(CONV)
        if record is not None:
            return i + 1, record
    raise AssertionError("no handoff was planned ahead in 200 turns")


async def until_compacted(p: Any, start: int, texts: dict[int, str] | None = None) -> tuple[int, Any]:
    for i in range(start, start + 200):
        results = await say(p, i, (texts or {}).get(i))
        if results and results[0].compaction is not None:
            return i, results[0]
    raise AssertionError("no turn compacted in 200 turns")


EDITED = "status update 1: rolled back, see INC-88"


async def planned_again_after_an_edit(p: Any, summarizer: Any, start: int, event_id: str) -> None:
    """With the summarizer held (it answers only once the test lets it), a turn takes an edit of a message the kept
    plan holds: the plan is stale, and is planned again in the background."""
    summarizer.gate.clear()
    edited = p.message(EDITED, author="alice", id="1700.000001")
    await p.submit_item(CONV, InboxItem(kind="edit", event_id=event_id, message=edited))
    await p.submit(CONV, update(start), author="alice", id=f"1700.{start:06d}")
    await p.run(CONV)


def epoch_root(history: History) -> str:
    return history.chain[0]


async def test_a_compacting_turn_adopts_the_handoff_planned_ahead_without_calling_the_summarizer(
        prefix: str, redis_client: Any) -> None:
    p, summarizer = summarized(prefix, redis_client, "ahead-adopt")
    start, record = await until_planned(p)
    head = (await p.checkpoints.load_history(CONV)).checkpoint.id
    assert record.from_checkpoint_id == head and record.strategy == "llm", "planned from the head, by the summarizer"
    assert not p.compactor.should_compact(await p.checkpoints.load_history(CONV), [], p.budget), \
        "planned before the trigger was reached"
    planned_calls = summarizer.calls
    i, result = await until_compacted(p, start)
    assert summarizer.calls == planned_calls, "the compacting turn (and every turn before it) asked no summarizer"
    history = await p.checkpoints.load_history(CONV)
    root = await p.checkpoints.get(CONV, epoch_root(history))
    assert root.kind is CheckpointKind.COMPACTION and root.id == result.compaction.new_checkpoint_id
    assert root.meta.info["prepared_from"] == record.from_checkpoint_id
    assert root.meta.forked_from != record.from_checkpoint_id, "forked from the head it replaced, a later one"
    assert root.meta.info["strategy"] == "llm" and "the thread reviewed its status updates" in history.messages[0].text
    assert await p.checkpoints.prepared(CONV) is None, "the fork took the planned handoff with it"
    lineage = {r.id: r for r in await p.checkpoints.lineage(CONV)}
    assert lineage[root.meta.forked_from].status.value == "completed"
    assert result.reply == "noted"


async def test_a_handoff_planned_from_a_checkpoint_the_head_no_longer_descends_from_is_not_adopted(
        prefix: str, redis_client: Any) -> None:
    p, summarizer = summarized(prefix, redis_client, "ahead-stale")
    start, record = await until_planned(p)
    first = await p.compact(CONV)  # a new epoch: what was planned for the old one no longer applies
    assert first.new_checkpoint_id is not None and await p.checkpoints.prepared(CONV) is None
    assert not await p.checkpoints.keep_prepared(CONV, record, ttl_seconds=60), \
        "a plan for a checkpoint the head does not descend from is not kept"
    # Planted as a worker of another version might have left it: planned from the old epoch's head, and naming
    # the messages the new head holds, so only its lineage tells it apart.
    history = await p.checkpoints.load_history(CONV)
    stale = record.model_copy(update={"message_count": len(history.messages),
                                      "last_message_id": history.messages[-1].id})
    await redis_client.set(p.checkpoints.keys(CONV).prepared, stale.model_dump_json(), ex=60)
    p.executor.config.prepare_compaction = False  # nothing planned for the new epoch takes the stale plan's place
    before = summarizer.calls
    _, result = await until_compacted(p, start)
    fork = await p.checkpoints.get(CONV, result.compaction.new_checkpoint_id)
    assert "prepared_from" not in fork.meta.info, "compacted as before"
    assert summarizer.calls > before, "the summarizer was asked while the turn waited"


async def test_messages_arriving_after_the_plan_are_carried_into_the_adopted_compaction(
        prefix: str, redis_client: Any) -> None:
    p, summarizer = summarized(prefix, redis_client, "ahead-carry")
    start, record = await until_planned(p)
    texts = {start: "Ticket ZEBRA-4411 tracks the new billing export; Priya owns it until March 3."}
    i, result = await until_compacted(p, start, {**texts, **{n: update(n) for n in range(start + 1, start + 200)}})
    history = await p.checkpoints.load_history(CONV)
    root = await p.checkpoints.get(CONV, epoch_root(history))
    assert root.meta.info["prepared_from"] == record.from_checkpoint_id
    arrived = [f"1700.{n:06d}" for n in range(start, i + 1)]
    kept = {m.id for m in history.messages}
    assert f"1700.{i:06d}" in kept, "the message that reached the trigger is in the new epoch"
    assert all(mid in kept or mid in root.meta.covered_ids for mid in arrived[:-1]), \
        "every message that arrived after the plan is kept verbatim or folded into the handoff"
    assert f"1700.{start:06d}" in root.meta.covered_ids or f"1700.{start:06d}" in kept
    assert "ZEBRA-4411" in history.messages[0].text or f"1700.{start:06d}" in kept, \
        "what arrived after the plan is in the handoff's notes, not lost"
    assert "the thread reviewed its status updates" in history.messages[0].text, "the planned narrative is used"


async def test_an_edit_after_the_plan_has_it_planned_again_from_the_new_head(prefix: str, redis_client: Any) -> None:
    p, summarizer = summarized(prefix, redis_client, "ahead-edit")
    start, record = await until_planned(p)
    edited = p.message(EDITED, author="alice", id="1700.000001")
    await p.submit_item(CONV, InboxItem(kind="edit", event_id="Ev-edit", message=edited))
    await say(p, start)  # the turn that takes the edit; after it, the plan it left stale is made again
    head = (await p.checkpoints.require_state(CONV)).head_checkpoint_id
    again = await p.checkpoints.prepared(CONV)
    assert again is not None and again.from_checkpoint_id == head != record.from_checkpoint_id
    assert again.changes == {"1700.000001": edited.text}, "planned from the messages as they read now"
    before = summarizer.calls
    _, result = await until_compacted(p, start + 1)
    fork = await p.checkpoints.get(CONV, result.compaction.new_checkpoint_id)
    assert fork.meta.info["prepared_from"] == head and summarizer.calls == before, \
        "the compacting turn adopted the plan made again, without asking the summarizer while a person waited"


async def test_a_plan_the_head_left_behind_while_it_was_made_is_made_again_from_the_newest_head(
        prefix: str, redis_client: Any) -> None:
    p, summarizer = summarized(prefix, redis_client, "ahead-moved")
    start, record = await until_planned(p)
    await planned_again_after_an_edit(p, summarizer, start, "Ev-edit-1")
    planning = await p.checkpoints.require_state(CONV)
    await until(lambda: summarizer.waiting == 1, 10, "the plan is being made again")
    second = p.message("status update 2: paused, see INC-89", author="alice", id="1700.000002")
    await p.submit_item(CONV, InboxItem(kind="edit", event_id="Ev-edit-2", message=second))
    await p.submit(CONV, update(start + 1), author="alice", id=f"1700.{start + 1:06d}")
    await p.run(CONV)  # the head moves on (and another edit) while that plan is being made
    head = (await p.checkpoints.require_state(CONV)).head_checkpoint_id
    assert head != planning.head_checkpoint_id
    summarizer.gate.set()
    await p.settle()
    again = await p.checkpoints.prepared(CONV)
    assert again is not None and again.from_checkpoint_id == head, "planned again from the newest head"
    assert again.changes == {"1700.000001": EDITED, "1700.000002": second.text}
    before = summarizer.calls
    _, result = await until_compacted(p, start + 2)
    fork = await p.checkpoints.get(CONV, result.compaction.new_checkpoint_id)
    assert fork.meta.info["prepared_from"] == head and summarizer.calls == before
    history = await p.checkpoints.load_history(CONV)
    assert history.chain[0] == fork.id and fork.meta.forked_from in {r.id for r in await p.checkpoints.lineage(CONV)}


async def test_nothing_is_planned_ahead_while_a_turn_awaits_resume(prefix: str, redis_client: Any) -> None:
    p, summarizer = summarized(prefix, redis_client, "ahead-paused", ai_timeout_seconds=0.2)
    for i in range(3):
        await say(p, i)
    p.model_script.push(Step(text="too late", delay=2))
    paused = await say(p, 3)
    assert paused[0].status == "awaiting_resume"
    head = (await p.checkpoints.require_state(CONV)).head_checkpoint_id
    anything = replace(p.budget, trigger_tokens=10, prepare_tokens=1)  # past any threshold
    p.compactor.prepare_after(CONV, head, anything)
    await p.settle()
    assert await p.checkpoints.prepared(CONV) is None and summarizer.calls == 0, \
        "a turn awaiting resume is never compacted, nor planned for"


async def test_a_worker_that_stops_leaves_no_handoff_being_planned_to_write_after_it(
        prefix: str, redis_client: Any) -> None:
    """A worker's shutdown gives the compactions planned ahead what is left of its deadline and then cancels them:
    none is left running to write once the worker has stopped (its lease on the planning is released)."""
    from threadkeeper.bot.delivery import TurnWorker

    p, summarizer = summarized(prefix, redis_client, "ahead-stop")
    start, record = await until_planned(p)
    await planned_again_after_an_edit(p, summarizer, start, "Ev-edit")
    await until(lambda: summarizer.waiting == 1, 10, "the plan is being made again")
    worker = TurnWorker(p, None, None)  # type: ignore[arg-type]  # (shutdown uses neither)
    assert await worker.shutdown(0.1) == 0
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("prepare:") and not t.done()], \
        "the planning job was stopped with the worker"
    summarizer.gate.set()
    kept = await p.checkpoints.prepared(CONV)
    assert kept is not None and kept.from_checkpoint_id == record.from_checkpoint_id, "nothing planned after the stop"
    assert not await redis_client.exists(p.checkpoints.keys(CONV).preparing), "its planning lease was released"
