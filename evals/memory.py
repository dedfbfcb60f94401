"""The cross-conversation eval: does what was said in earlier threads reach a new thread's context?

A benchmark conversation (REALTALK, BEAM) is replayed as one channel of a workspace with memory on: each session
as a thread of its own, extracted when it is done (as the sweep does once a thread is idle), then the channel is
consolidated. Each question is asked as the first message of a new thread of that channel, and graded on the
context that turn would send (``Pipeline.context``, nothing written, no model called): the question is kept when
the memory records shown that derive from its evidence messages hold the answer's content words
(:func:`evals.graders.holds`, as the continuity eval grades what a context holds for the evidence). Beside it, at
the same token spend: no memory (the new thread holds nothing of the others), a plain BM25 pick of whole
messages from all the other threads, and that pick with each hit's neighbours (:class:`evals.baselines.MessagePool`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from threadkeeper.persistence import connect
from threadkeeper.services import Conversation, parse_thread, replay
from threadkeeper.services.memory import MEMORY_HEADER
from threadkeeper.settings import Settings
from threadkeeper.stores import build_stores

from .continuity import Case, _tokenizer, removed
from .graders import Question, holds

WORKSPACE, CHANNEL = "TEVAL", "CEVAL"


@dataclass
class MemoryResult:
    case: str
    window: int
    questions: int = 0
    answerable: int = 0
    kept: int = 0
    stored: int = 0
    """Answerable questions whose answer some stored record derived from the evidence holds (shown or not)."""
    bm25: int = 0
    bm25_neighbours: int = 0
    without: int = 0
    spend: list[int] = field(default_factory=list)
    records: int = 0
    sessions: int = 0
    extract_seconds: float = 0.0
    messages: int = 0
    shown_records: list[int] = field(default_factory=list)


def _sessions(case: Case) -> list[list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = {}
    for m in case.data["messages"]:
        out.setdefault(m.get("session", 0), []).append(m)
    return list(out.values())


async def run_memory_case(settings: Settings, case: Case, window: int, *, client: Any = None) -> MemoryResult:
    from threadkeeper.root import build_pipeline

    prefix = f"tkmem-{uuid.uuid4().hex[:10]}"
    own_client = client is None
    client = client or connect(settings.redis_url or "")
    configured = settings.model_copy(update={"threadkeeper_key_prefix": prefix,
                                              "threadkeeper_memory_workspaces": WORKSPACE,
                                              "threadkeeper_memory_channels": CHANNEL})
    stores = build_stores(configured, client=client)
    result = MemoryResult(case.name, window)
    pipeline = None
    try:
        pipeline = build_pipeline(configured, stores, context_window=window)
        memory = pipeline.memory
        assert memory is not None
        sessions = _sessions(case)
        result.sessions = len(sessions)
        for number, messages in enumerate(sessions):
            # each session a thread of one public channel: what Slack would say of it when its messages arrive
            conversation = Conversation.slack(WORKSPACE, CHANNEL, messages[0]["ts"], "public")
            thread = parse_thread(json.dumps({"conversation_id": conversation.id, "messages": messages}),
                                  f"{case.name} session {number}")
            await replay(pipeline, thread, conversation=conversation, turn_every=max(1, len(messages)))
            started = time.perf_counter()
            await memory.extract(conversation, force=True)
            result.extract_seconds += time.perf_counter() - started
            result.messages += len(messages)
        await memory.consolidate(WORKSPACE, f"channel:{CHANNEL}")
        records = {r.id: r for r in await stores.memory.records(WORKSPACE)}
        result.records = len(records)
        texts = {mid: text for mid, text, _ in case.sized_messages()}
        pool = case.pool()
        tokenizer = _tokenizer()
        for index, raw in enumerate(case.questions):
            question = Question.of(raw, texts)
            result.questions += 1
            if not question.answerable:
                continue
            result.answerable += 1
            q = pipeline.message(question.text, author=raw.get("asker") or "asker")
            cid = f"slack:{WORKSPACE}:{CHANNEL}:9{index:09d}.000000"
            report = await pipeline.context(cid, arriving=[q])
            runtime = next((e for e in report.context if e.role == "system" and e.source_ids), None)
            shown = [records[i] for i in (runtime.source_ids if runtime else []) if i in records]
            block = runtime.text[runtime.text.find(MEMORY_HEADER):] if runtime and MEMORY_HEADER in runtime.text \
                else ""
            spend = tokenizer.count(block) if block else 0
            result.spend.append(spend)
            result.shown_records.append(len(shown))
            evidence = set(question.evidence)
            held = "\n".join(r.text for r in shown if evidence & set(r.source_ids))
            result.stored += holds(set(question.answer),
                                   "\n".join(r.text for r in records.values() if evidence & set(r.source_ids)))
            result.kept += holds(set(question.answer), held)
            result.bm25 += question.kept_among(pool.bm25(question.text, spend), texts)
            result.bm25_neighbours += question.kept_among(pool.bm25(question.text, spend, neighbours=True), texts)
            result.without += holds(set(question.answer), "")  # a new thread without memory holds nothing else
        return result
    finally:
        await removed(client, prefix, pipeline, close=own_client)


async def run_memory(settings: Settings, cases: Sequence[Case], windows: Sequence[int], *, client: Any = None,
                     progress: Callable[[str], None] | None = None) -> list[MemoryResult]:
    out = []
    for window in windows:
        for case in cases:
            out.append(await run_memory_case(settings, case, window, client=client))
            if progress:
                progress(f"{case.name} {window}")
    return out


def summarize_memory(results: Sequence[MemoryResult]) -> list[dict[str, Any]]:
    rows = []
    for window in sorted({r.window for r in results}):
        runs = [r for r in results if r.window == window]
        answerable = sum(r.answerable for r in runs)
        spend = [s for r in runs for s in r.spend]
        messages = sum(r.messages for r in runs)

        def share(n: int) -> float | None:
            return n / answerable if answerable else None

        kept, bm25 = share(sum(r.kept for r in runs)), share(sum(r.bm25 for r in runs))
        around = share(sum(r.bm25_neighbours for r in runs))
        best = max(bm25 or 0.0, around or 0.0)
        rows.append({"window": window, "chats": len(runs), "sessions": sum(r.sessions for r in runs),
                     "questions": sum(r.questions for r in runs), "answerable": answerable,
                     "memory": kept, "in_records": share(sum(r.stored for r in runs)), "bm25": bm25, "no_memory": share(sum(r.without for r in runs)),
                     "bm25_neighbours": around,
                     "over_bm25": kept / bm25 if kept is not None and bm25 else None,
                     "over_best": kept / best if kept is not None and best else None,
                     "mean_spend": sum(spend) / len(spend) if spend else 0.0,
                     "records": sum(r.records for r in runs),
                     "mean_shown": sum(s for r in runs for s in r.shown_records) / len(spend) if spend else 0.0,
                     "extract_ms_per_1000_messages": 1e6 * sum(r.extract_seconds for r in runs) / messages
                     if messages else 0.0})
    return rows
