"""The lineage stores what was said: a turn's runtime context (clock, participants, recalled messages) by
reference, counted the same way by ``history``, ``context`` and the history a turn loads; a paused turn still
resumes with exactly the request it would have sent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fakes import Step, pipeline, scripted

from threadkeeper.persistence import CheckpointStatus, Message
from threadkeeper.services import replay
from threadkeeper.services.recall import RECALL_HEADER

CONV = "slack:T1:C9:1700000000.000777"
FACTS = ["The billing outage ticket is OPS-4471 and Priya owns the follow-up.",
         "Our staging cluster lives in eu-west-3, the production one in us-east-2."]
FILLER = [f"status update {i}: weather nice, lunch good, sync moved to the big room, pastries again, nothing else "
          "to report from this corner of the office today" for i in range(110)]
REALTALK = Path(__file__).parent / "data" / "realtalk" / "Chat_1_Ines_Tomas.json"


@pytest.fixture
def model():
    m = scripted()
    m.default = Step(text="noted")
    return m


async def _recalling_thread(p) -> None:  # type: ignore[no-untyped-def]
    for i, text in enumerate([*FACTS, *FILLER]):
        await p.submit(CONV, text, author=("alice", "bob")[i % 2], id=f"1700.{i:06d}", created_at=1700000000 + i * 60)
        await p.run(CONV)


def _runtime_sent(request: dict) -> str:
    [runtime] = [m["content"] for m in request["messages"][1:] if m["role"] == "system"]
    return runtime


async def test_a_turn_stores_what_it_recalled_by_reference_and_counts_like_context(model, prefix, client) -> None:
    p, stores = pipeline(prefix, client, context_window=4096)
    await _recalling_thread(p)
    await p.submit(CONV, "what was the ticket for the billing outage?", author="carol", id="1700.009999")
    await p.run(CONV)
    sent = _runtime_sent(model.requests[-1])
    assert RECALL_HEADER in sent and "OPS-4471" in sent, "the request carried the recalled messages"

    history = await p.checkpoints.load_history(CONV)
    runtime = [m for m in history.messages if m.flags.runtime][-1]
    assert runtime.parts == [] and "1700.000000" in runtime.source_ids, "stored as the ids it recalled"
    assert runtime.tokens == p.message(sent, role="system").tokens, "with what it cost in its request"
    raw = await client.hvals(f"{prefix}:{{{CONV}}}:msgs")
    assert raw and not any(RECALL_HEADER.encode() in blob or b"[runtime context]" in blob for blob in raw), \
        "no runtime context or recall block is stored as text, in any turn"

    head = (await p.checkpoints.lineage(CONV))[-1]
    report = await p.context(CONV)
    assert head.is_head and head.token_total == history.visible_tokens() == \
        sum(e.tokens for e in report.context if e.role != "system" or e.source_ids), \
        "history, context and the loaded history count the same tokens"


async def test_a_paused_turn_resumes_with_exactly_the_request_it_would_have_sent(model, prefix, client) -> None:
    p, _ = pipeline(prefix, client, context_window=4096, settings={"ai_timeout_seconds": 0.3})
    await _recalling_thread(p)
    never = asyncio.Event()
    model.push(Step(text="too late", wait_for=never))
    await p.submit(CONV, "which region is the staging cluster in?", author="carol", id="1700.009000")
    [paused] = await p.run(CONV)
    assert paused.status == "awaiting_resume"
    asked = _runtime_sent(model.requests[-1])
    assert "eu-west-3" in asked
    stored = await p.checkpoints.load_history(CONV, paused.checkpoint_id)
    assert all(m.parts == [] for m in stored.messages if m.flags.runtime), "paused, it is still stored by reference"

    p.clock.source = lambda: 1900000000.0  # later, with other people around: a new runtime context would differ
    model.push(Step(text="staging is in eu-west-3"))
    await p.submit(CONV, "any news? (dave here)", author="dave", id="1700.009001")
    [resumed] = await p.run(CONV)
    assert resumed.checkpoint_id == paused.checkpoint_id and resumed.status == "completed"
    assert _runtime_sent(model.requests[-1]) == asked, "the resumed request carries the runtime context it had"
    done = await p.checkpoints.get(CONV, paused.checkpoint_id)
    assert done.status is CheckpointStatus.COMPLETED and not (done.outcome and done.outcome.resume), \
        "the text kept for the resume leaves with the pause"


async def test_a_replayed_chat_stores_close_to_what_people_and_the_bot_said(prefix, client) -> None:
    """The REALTALK-format sample replayed with every message asking the bot, at an 8k window: Redis holds
    the messages, the bot's replies, the handoffs of its compactions and the messages they keep, and no
    runtime context as text."""
    from threadkeeper.evals.benchmarks import load_locomo
    from threadkeeper.root import build_pipeline, build_stores
    from threadkeeper.services import parse_thread
    from threadkeeper.settings import Settings

    case = load_locomo(REALTALK).cases[0]
    thread = parse_thread(json.dumps({"messages": [{**m, "reply": True} for m in case.data["messages"]]}), "chat")
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None, threadkeeper_key_prefix=prefix)  # type: ignore[call-arg]
    p = build_pipeline(settings, build_stores(settings, client=client), context_window=4096)
    await replay(p, thread, conversation=CONV, turn_every=5)
    tokenizer = p.tokenizer
    stored = [Message.model_validate_json(b) for b in await client.hvals(f"{prefix}:{{{CONV}}}:msgs")]
    held = sum(tokenizer.count_message(m) for m in stored if m.parts)
    said = {m.id: tokenizer.count_message(m) for m in stored
            if m.role in ("user", "assistant") and not m.flags.handoff and not m.flags.runtime}
    assert len(said) > len(thread.messages), "people's messages and the bot's replies"
    assert not any(m.parts for m in stored if m.flags.runtime)
    assert held <= 1.2 * sum(said.values()), (held, sum(said.values()))
