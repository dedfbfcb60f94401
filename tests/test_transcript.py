"""Visible-thread memory stays bounded: old segments fold into summaries that merge hierarchically."""

from __future__ import annotations

from fakes import Step, pipeline, scripted

CONV = "slack:T1:C5:1700000000.000500"


async def test_transcript_folds_and_merges_without_growing(prefix, client) -> None:
    model = scripted()
    model.default = Step(text="ok")
    p, _ = pipeline(prefix, client, visible_transcript=True, context_window=4096)
    memory = p.executor.transcript
    sizes = []
    await p.submit(CONV, "Can you draft the rollback checklist for billing before the freeze?", author="alice",
                   id="1700.000000")
    await p.run(CONV)
    for i in range(1, 400):
        text = (f"chatter {i}: the standup moved again and the coffee machine on floor three is broken"
                if i != 200 else "Done: the rollback checklist for billing is drafted and linked.")
        await p.submit(CONV, text, author="bob", id=f"1700.{i:06d}", reply_expected=False)
        await p.run(CONV)
        if i % 50 == 0:
            t = await memory.get(CONV)
            sizes.append((len(t.summaries), len(t.model_dump_json())))
    t = await memory.get(CONV)
    assert len(t.summaries) <= memory.max_records
    assert all(records <= memory.max_records for records, _ in sizes)
    # 4x the messages between the 100th and the 400th, but the stored transcript at most doubles
    # (kept verbatim, 400 such lines alone would be about 44 KB).
    assert sizes[-1][1] <= 2 * sizes[1][1] and sizes[-1][1] < 10_000
    assert any(r.level > 0 for r in t.summaries), "records merged hierarchically"
    assert sum(memory.tokenizer.count(line) for line in t.recent) <= memory.recent_budget
    facts = [f for r in t.summaries for f in r.facts]
    assert facts and all(f.startswith("[1700.") and " bob: chatter " in f or "Done" in f for f in facts)
    assert not any(" the " in f for f in facts), "records hold compressed notes, not the verbatim lines"
