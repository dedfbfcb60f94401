"""The continuity eval: replay generated (or given) threads, or public benchmark conversations, through the
real pipeline under each strategy and window, then grade what the final context keeps.

Generated threads carry planted ``probes`` (graded by :func:`evals.graders.grade`); benchmark cases carry
``questions`` with evidence message ids (graded by :func:`evals.graders.grade_questions`, against
keep-newest at the same token spend)."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from threadkeeper.persistence import CheckpointKind, Message, TextPart, ThreadkeeperError, connect
from threadkeeper.root import build_pipeline, build_stores
from threadkeeper.services import ModelClient, parse_thread, replay
from threadkeeper.services.context import ContextEntry
from threadkeeper.services.models import Tokenizer
from threadkeeper.settings import Settings

from .baselines import MessagePool
from .generator import generate_thread
from .graders import ProbeResult, QuestionResult, expand, grade, grade_questions
from .strategies import STRATEGIES

DEFAULT_WINDOWS = (4000, 8000, 16000)
BENCHMARK_WINDOWS = (4000, 8000, 16000, 32000)
BASELINE_TOKENIZER = "gpt-4o"
"""The tokenizer keep-newest counts with: the one the pipeline uses for the offline model."""
JUDGE_PROMPT = """You grade an answer against a reference. Reply "correct" if the answer states the same fact as
the reference (wording may differ; identifiers must match exactly), otherwise reply "incorrect"."""


@dataclass
class Case:
    """One thread to evaluate: the replay input plus its probes."""

    name: str
    data: dict[str, Any]
    _sized: list[tuple[str, str, int]] | None = field(default=None, repr=False, compare=False)
    _pool: MessagePool | None = field(default=None, repr=False, compare=False)

    @property
    def probes(self) -> list[dict[str, Any]]:
        return list(self.data.get("probes") or [])

    @property
    def questions(self) -> list[dict[str, Any]]:
        """Benchmark questions: ``{id, question, answer, evidence: [message ids], kind}``."""
        return list(self.data.get("questions") or [])

    def sized_messages(self) -> list[tuple[str, str, int]]:
        """``(id, rendered text, tokens)`` of the thread's messages in order (edits and deletes ignored)."""
        if self._sized is None:
            tokenizer = _tokenizer()
            out = []
            for m in self.data.get("messages") or []:
                if m.get("edits") or m.get("deletes"):
                    continue
                message = Message(id=m["id"], role="user", parts=[TextPart(text=m["text"])], author=m["author"],
                                  tokens=0)
                out.append((m["id"], f"{m['author']}: {m['text']}", tokenizer.count_message(message)))
            self._sized = out
        return self._sized

    def pool(self) -> MessagePool:
        """The thread's messages for the baselines (whole messages, a BM25 index built on first use)."""
        if self._pool is None:
            self._pool = MessagePool(self.sized_messages())
        return self._pool


@lru_cache(maxsize=1)
def _tokenizer() -> Tokenizer:
    return Tokenizer(BASELINE_TOKENIZER)


@dataclass
class RunResult:
    strategy: str
    window: int
    thread: str
    probes: list[ProbeResult]
    context_tokens: int
    usable_tokens: int
    compactions: int
    loops: int
    tokens_before: list[int] = field(default_factory=list)
    tokens_after: list[int] = field(default_factory=list)
    seconds: float = 0.0
    judge_correct: int | None = None
    questions: list[QuestionResult] = field(default_factory=list)
    judged: int = 0
    benchmark: bool = False
    asked: list[QuestionResult] = field(default_factory=list)
    """Each question asked as the next message: graded on the context built for it (recall included)."""
    asked_probes: list[ProbeResult] = field(default_factory=list)
    asked_tokens: list[int] = field(default_factory=list)


def load_cases(dataset: str | None, *, threads: int, seed: int, messages: int,
               styles: Sequence[str] = ("work",)) -> list[Case]:
    """A dataset file's threads, else generated threads: ``threads`` of each style."""
    if dataset:
        path = Path(dataset)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ThreadkeeperError(f"cannot read dataset {path}: {exc}") from None
        items = data if isinstance(data, list) else [data]
        cases = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("probes"), list):
                raise ThreadkeeperError(f"{path}: thread {i} needs a 'probes' list next to 'messages'")
            for j, probe in enumerate(item["probes"]):
                missing = [k for k in ("id", "question", "answer", "evidence", "kind") if k not in probe]
                if missing:
                    raise ThreadkeeperError(f"{path}: thread {i} probe {j}: missing {', '.join(missing)}")
            parse_thread(json.dumps(item), f"{path} thread {i}")
            cases.append(Case(item.get("conversation_id") or f"{path.stem}-{i}", item))
        return cases
    return [Case(f"{style}-{seed + i}", generate_thread(seed + i, messages=messages, style=style).as_dict())
            for style in styles for i in range(threads)]


async def ask_each(pipeline: Any, cid: str, case: Case, originals: dict[str, str], references: dict[str, str],
                   ) -> tuple[list[QuestionResult], list[ProbeResult], list[int]]:
    """Ask every question (or probe) as the next message and grade the context the turn would send for it.

    Nothing is written and no model is called (``Pipeline.context`` with the question arriving). Benchmark
    questions are graded on content against the context with and without its recalled messages, and against the
    baselines at the same spend (keep-newest, a BM25 pick, the context's own messages plus a BM25 fill);
    generated probes with the probe grader.
    """
    asked: list[QuestionResult] = []
    probes: list[ProbeResult] = []
    spent: list[int] = []
    # asked as the next message: a minute after the thread's last one ("last week" means the thread's last week)
    times = [float(m["ts"]) for m in case.data.get("messages") or [] if m.get("ts")]
    asked_at = max(times) + 60 if times else None
    for item in case.questions or case.probes:
        if not item.get("question"):
            continue
        question = pipeline.message(str(item["question"]), author=item.get("asker"), created_at=asked_at)
        report = await pipeline.context(cid, arriving=[question])
        entries = expand([e for e in report.context
                          if question.id not in e.source_ids and (e.role != "system" or e.source_ids)], references)
        spend = sum(e.tokens for e in entries)
        spent.append(spend)
        if case.questions:
            standing = [e for e in entries if e.role != "system"]
            asked.extend(grade_questions([item], entries, case.sized_messages(), spend, standing=standing,
                                         pool=case.pool()))
        else:
            probes.extend(grade([item], [e.text for e in entries], originals))
    return asked, probes, spent


async def run_one(settings: Settings, case: Case, strategy: str, window: int, *, turn_every: int,
                  client: Any = None, judge: ModelClient | None = None, ask: bool = False) -> RunResult:
    prefix = f"tkeval-{uuid.uuid4().hex[:10]}"
    own_client = client is None
    client = client or connect(settings.redis_url or "")  # the caller's Redis (the CLI: REDIS_URL or the embedded one)
    stores = build_stores(settings.model_copy(update={"threadkeeper_key_prefix": prefix}), client=client)
    started = time.perf_counter()
    pipeline = None
    try:
        pipeline = build_pipeline(settings, stores, context_window=window, compactor_class=STRATEGIES[strategy])
        thread = parse_thread(json.dumps(case.data), case.name)
        cid = f"eval:{case.name}:{strategy}:{window}"
        result = await replay(pipeline, thread, conversation=cid, turn_every=turn_every)
        references = await pipeline.references(cid)
        context = expand([ContextEntry(**entry) for entry in result["context"]], references)
        texts = [entry.text for entry in context]
        originals = {m.id: m.text for m in thread.messages}
        graded = grade(case.probes, texts, originals)
        questions: list[QuestionResult] = []
        if case.questions:
            spend = result["context_tokens"] - sum(e.tokens for e in context if e.role == "system")
            questions = grade_questions(case.questions, context, case.sized_messages(), spend)
        asked, asked_probes, asked_tokens = await ask_each(pipeline, cid, case, originals, references) if ask \
            else ([], [], [])
        rows = await pipeline.checkpoints.lineage(cid)
        kinds = {r.id: r.kind for r in rows}
        loops = sum(1 for r in rows if r.kind is CheckpointKind.COMPACTION and r.forked_from
                    and kinds.get(r.forked_from) is CheckpointKind.COMPACTION)
        asked_for_judge = case.probes or [q for q in case.questions if q.get("answer")]
        judged = await _judge(pipeline, judge, asked_for_judge, cid) if judge else None
        return RunResult(strategy, window, case.name, graded, result["context_tokens"],
                         pipeline.budget.usable_tokens + pipeline.budget.fixed_prompt_tokens,
                         len(result["compactions"]), loops,
                         [c["tokens_before"] for c in result["compactions"]],
                         [c["tokens_after"] for c in result["compactions"]],
                         time.perf_counter() - started, judged, questions, len(asked_for_judge) if judge else 0,
                         "questions" in case.data, asked, asked_probes, asked_tokens)
    finally:
        await removed(client, prefix, pipeline, close=own_client)


async def removed(client: Any, prefix: str, pipeline: Any, *, close: bool) -> None:
    """Remove an eval run's keys (every one under ``prefix``) once what its turns left running (a compaction planned
    ahead) has ended, so none is written after; close ``client`` when the run opened it."""
    if pipeline is not None:
        await pipeline.settle()
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        await client.delete(key)
    if close:
        await client.aclose()


async def _judge(pipeline: Any, judge: ModelClient, probes: Sequence[dict[str, Any]], cid: str) -> int:
    """Ask each probe's question with the final context, then grade the answer with the judge model."""
    report = await pipeline.context(cid)
    context = [{"role": e.role if e.role != "tool" else "user", "content": e.text} for e in report.context]
    correct = 0
    for probe in probes:
        answer = await pipeline.model.complete(context + [{"role": "user", "content": probe["question"]}])
        verdict = await judge.complete([{"role": "system", "content": JUDGE_PROMPT},
                                        {"role": "user", "content": f"Question: {probe['question']}\nReference: "
                                                                    f"{probe['answer']}\nAnswer: {answer.text}"}],
                                       max_output_tokens=5)
        correct += verdict.text.strip().lower().startswith("correct")
    return correct


def _share(values: Sequence[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def _mean(values: Sequence[float | None]) -> float | None:
    counted = [v for v in values if v is not None]
    return round(statistics.mean(counted), 4) if counted else None


def _content(questions: Sequence[QuestionResult], asked: bool) -> dict[str, Any]:
    """Shares of answerable questions whose answer is in what the context holds for their evidence, beside the
    baselines at the same spend; ``cited`` is the share of all questions with every evidence message present."""
    able = [q for q in questions if q.answerable]
    kinds: dict[str, list[bool]] = defaultdict(list)
    for q in able:
        kinds[q.kind].append(q.kept)
    row: dict[str, Any] = {"content": _share([q.kept for q in able]), "keep_newest": _share([q.newest for q in able]),
                           "cited": _share([q.cited for q in questions]),
                           "by_kind": {k: _share(v) for k, v in sorted(kinds.items())},
                           "answerable": len(able), "questions": len(questions)}
    baseline = row["keep_newest"]
    if asked:
        row.update({"bm25": _share([bool(q.bm25) for q in able]),
                    "recent_bm25": _share([bool(q.recent_bm25) for q in able]),
                    "bm25_neighbours": _share([bool(q.bm25_neighbours) for q in able]),
                    "without_recall": _share([bool(q.without_recall) for q in able])})
        baseline = max(row["bm25"], row["recent_bm25"], row["bm25_neighbours"])
    row["over_baseline"] = round(row["content"] / baseline, 3) if baseline else None
    return row


def _asked_row(runs: Sequence[RunResult]) -> dict[str, Any] | None:
    """Questions asked as the next message: graded on the context built for each, recall included."""
    questions = [q for r in runs for q in r.asked]
    probes = [p for r in runs for p in r.asked_probes]
    spent = [t for r in runs for t in r.asked_tokens]
    if not questions and not probes:
        return None
    row: dict[str, Any] = {"context_tokens": round(statistics.mean(spent)) if spent else 0}
    if probes:
        by_kind: dict[str, list[bool]] = defaultdict(list)
        for p in probes:
            by_kind[p.kind].append(p.kept)
        row["retention"] = {"overall": _share([p.kept for p in probes]), **{k: _share(v) for k, v in
                                                                             sorted(by_kind.items())}}
        row["probes"] = len(probes)
        return row
    row.update(_content(questions, asked=True))
    return row


def _benchmark_row(strategy: str, window: int, runs: Sequence[RunResult]) -> dict[str, Any]:
    """One report row for benchmark questions: the standing context and, when asked, the context built for each
    question, graded on content against the baselines at the same spend."""
    row: dict[str, Any] = {
        "strategy": strategy, "window": window,
        "standing": _content([q for r in runs for q in r.questions], asked=False),
        "context_tokens": round(statistics.mean(r.context_tokens for r in runs)),
        "compactions": round(statistics.mean(r.compactions for r in runs), 1),
        "within_budget": all(r.context_tokens <= r.usable_tokens for r in runs),
        "compaction_loops": sum(r.loops for r in runs),
        "threads": len(runs), "seconds": round(sum(r.seconds for r in runs), 2)}
    if any(r.judge_correct is not None for r in runs):
        row["judge_accuracy"] = round(sum(r.judge_correct or 0 for r in runs) / max(1, sum(r.judged for r in runs)), 4)
    if (asked := _asked_row(runs)) is not None:
        row["asked"] = asked
    return row


def summarize(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, int], list[RunResult]] = defaultdict(list)
    for r in results:
        groups[(r.strategy, r.window)].append(r)
    rows = []
    for (strategy, window), runs in groups.items():
        if any(r.benchmark for r in runs):
            rows.append(_benchmark_row(strategy, window, runs))
            continue
        probes = [p for r in runs for p in r.probes]
        by_kind: dict[str, list[bool]] = defaultdict(list)
        for p in probes:
            by_kind[p.kind].append(p.kept)
        retention = {"overall": round(sum(p.kept for p in probes) / len(probes), 4) if probes else 0.0}
        retention.update({k: round(sum(v) / len(v), 4) for k, v in sorted(by_kind.items())})
        row = {"strategy": strategy, "window": window, "retention": retention,
               "supercheckpoint_errors": sum(p.error for p in probes),
               "context_tokens": round(statistics.mean(r.context_tokens for r in runs)),
               "compactions": round(statistics.mean(r.compactions for r in runs), 1),
               "within_budget": all(r.context_tokens <= r.usable_tokens for r in runs),
               "compaction_loops": sum(r.loops for r in runs),
               "tokens_before_mean": round(statistics.mean([t for r in runs for t in r.tokens_before] or [0])),
               "tokens_after_mean": round(statistics.mean([t for r in runs for t in r.tokens_after] or [0])),
               "probes": len(probes), "threads": len(runs),
               "seconds": round(sum(r.seconds for r in runs), 2)}
        if any(r.judge_correct is not None for r in runs):
            row["judge_accuracy"] = round(sum(r.judge_correct or 0 for r in runs) / max(1, len(probes)), 4)
        if (asked := _asked_row(runs)) is not None:
            row["asked"] = asked
        rows.append(row)
    order = {name: i for i, name in enumerate(STRATEGIES)}
    return sorted(rows, key=lambda r: (order.get(r["strategy"], 99), r["window"]))


def misses(results: Sequence[RunResult], cases: Sequence[Case]) -> list[dict[str, Any]]:
    """Each answerable benchmark question asked as the next message whose answer the context built for it did not
    hold: the thread, strategy and window, the question and its evidence ids, and which baselines at the same spend
    held it (what to read to see why recall missed it)."""
    by_name = {c.name: {str(q["id"]): q for q in c.questions} for c in cases}
    out = []
    for r in results:
        for q in r.asked:
            if not q.answerable or q.kept:
                continue
            raw = by_name.get(r.thread, {}).get(q.id, {})
            out.append({"thread": r.thread, "strategy": r.strategy, "window": r.window, "id": q.id, "kind": q.kind,
                        "question": raw.get("question"), "answer": raw.get("answer"),
                        "evidence": list(raw.get("evidence") or []), "bm25": q.bm25, "recent_bm25": q.recent_bm25,
                        "bm25_neighbours": q.bm25_neighbours, "without_recall": q.without_recall})
    return out


async def run_matrix(settings: Settings, cases: Sequence[Case], strategies: Sequence[str], windows: Sequence[int], *,
                     turn_every: int, client: Any = None, judge: ModelClient | None = None,
                     progress: Callable[[str], None] | None = None, ask: bool = False) -> list[RunResult]:
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ThreadkeeperError(f"unknown strategies: {', '.join(unknown)}; choose from {', '.join(STRATEGIES)}")
    results = []
    for case in cases:
        for window in windows:
            for strategy in strategies:
                results.append(await run_one(settings, case, strategy, window, turn_every=turn_every,
                                             client=client, judge=judge, ask=ask))
                if progress:
                    progress(f"{case.name} {strategy} {window}")
    return results

