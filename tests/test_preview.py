"""The preview of the next turn (``context``, what every eval grades) is the request that turn sends: built by the
turn's own collaborators, with edits, deletions and pins pending, and across a compaction."""

from __future__ import annotations

import pytest
from fakes import pipeline, scripted

from threadkeeper.persistence import InboxItem

CONV = "slack:T1:C1:1700000000.000100"
START = 1_700_000_000.0
TOPICS = ["the payments database is pg-stage-7", "ticket PAY-5512 tracks the login bug",
          "we decided to ship the rollout on Thursday", "Dana owns the checkout latency budget of 250 ms",
          "the staging deploy needs a backup first", "our vendor contact is ana@example.com",
          "the cache TTL is 90 seconds for sessions", "Leo asked for the incident timeline by Friday"]


@pytest.fixture
def model():
    return scripted()


def text(i: int) -> str:
    return f"note {i}: {TOPICS[i % len(TOPICS)]}, and some more words to make the thread grow past its window"


async def test_the_preview_is_the_request_the_next_turn_sends(model, prefix, client) -> None:
    p, _ = pipeline(prefix, client, context_window=4096)
    p.clock.source = lambda: START + 86_400.0  # the runtime context's "now": the same for the preview and the turn
    sent, compared, compacting, edited = 0, 0, 0, 0
    for step in range(12):
        for i in range(sent, sent + 9):
            await p.submit(CONV, text(i), author=("ana", "leo", "dana")[i % 3], id=f"{START + i:.6f}",
                           created_at=START + i, reply_expected=False)
        sent += 9
        if step >= 2:  # changes pending for the turn: an edit, a deletion and a pin of earlier messages
            at = START + sent + 0.5
            old = f"{START + 9 * (step - 2) + 1:.6f}"
            edit = p.message(f"edited: {TOPICS[step % len(TOPICS)]} (corrected in step {step})", author="leo",
                             id=old)
            await p.submit_item(CONV, InboxItem(kind="edit", event_id=f"Ev-e{step}", message=edit, change=f"e{step}",
                                                reply_expected=False, received_at=at))
            await p.submit_item(CONV, InboxItem(kind="delete", event_id=f"Ev-d{step}", reply_expected=False,
                                                target_id=f"{START + 9 * (step - 2) + 2:.6f}", received_at=at))
            await p.submit_item(CONV, InboxItem(kind="pin", event_id=f"Ev-p{step}", reply_expected=False,
                                                target_id=f"{START + 9 * (step - 2) + 3:.6f}", received_at=at))
            edited += 1
        question = f"what did we say about {TOPICS[(step * 3) % len(TOPICS)].split()[1]}?"
        await p.submit(CONV, question, author="ana", id=f"{START + sent:.6f}", created_at=START + sent)
        sent += 1
        preview = await p.context(CONV)
        before = len(model.requests)
        results = await p.run(CONV)
        assert results and results[0].status == "completed", results
        request = next(r["messages"] for r in model.requests[before:] if r["kind"] == "turn")
        assert preview.request == request, f"step {step}: the preview is not the request the turn sent"
        compared += 1
        compacting += preview.would_compact
        assert preview.would_compact == (results[0].compaction is not None)
    assert compared == 12 and edited == 10
    assert compacting >= 2, "the thread compacted along the way: the preview was compared across compactions"
    assert any("(edited message" in m["content"] for m in model.requests[-1]["messages"] if m.get("content"))


async def test_a_preview_shows_the_change_notices_the_turn_sends(model, prefix, client) -> None:
    """The preview takes edits and deletions as the turn does: as notices in the history, and as the notes the
    handoff and recall read (here without a compaction)."""
    p, _ = pipeline(prefix, client)
    await p.submit(CONV, "the deploy window is Tuesday", author="ana", id="1.0", created_at=START)
    await p.run(CONV)
    edit = p.message("the deploy window is Wednesday", author="ana", id="1.0")
    await p.submit_item(CONV, InboxItem(kind="edit", event_id="Ev-e", message=edit, change="1.5",
                                        reply_expected=False, received_at=START + 5))
    await p.submit(CONV, "when is the deploy window?", author="leo", id="2.0", created_at=START + 6)
    preview = await p.context(CONV)
    notices = [e.text for e in preview.context if "(edited message 1.0" in e.text]
    assert notices and "Wednesday" in notices[0]
    before = len(model.requests)
    await p.run(CONV)
    assert preview.request == next(r["messages"] for r in model.requests[before:] if r["kind"] == "turn")


async def test_the_budget_bar_shows_each_part_of_the_window_in_proportion(redis_client, prefix) -> None:
    """``context`` draws the window as a bar: the system prompt, the recent messages, the room kept for the reply
    and what is free, each in proportion (any part with tokens at least one character), the legend in tokens."""
    from threadkeeper.bot.render import budget_bar, context_text

    p, _ = pipeline(prefix, redis_client, context_window=8192)
    await p.submit("console:bar", "the release train leaves from platform 9 " * 40, author="ana", id="1.1")
    report = await p.context("console:bar")
    bar, legend = budget_bar(report, width=60)
    cells = bar[1:bar.index("]")]
    assert len(cells) == 60 and set(cells) <= {"▓", "░", "·", "-", "▒", "█"}
    prompt, recent = report.context[0].tokens, sum(e.tokens for e in report.context[1:] if e.role != "system")
    reply = report.budget.output_reserve_tokens
    assert f"▓ prompt {prompt:,}" in legend and f"░ recent {recent:,}" in legend and f"- reply {reply:,}" in legend
    free = 8192 - sum(e.tokens for e in report.context) - reply
    assert f"· free {free:,}" in legend and abs(cells.count("·") - round(60 * free / 8192)) <= 1
    assert cells.count("░") == max(1, round(60 * recent / 8192))
    assert bar in context_text(report), "the context command shows it"
