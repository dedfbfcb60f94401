"""Compaction strategies compared by the continuity eval.

All of them plug into the same reply executor as the product's compactor (same trigger, same
fork-and-compare-and-set write, same summarizer); only the replacement history differs.
"""

from __future__ import annotations

from collections.abc import Sequence

from threadkeeper.persistence import (
    Message,
    MessageFlags,
    Notes,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    new_id,
)
from threadkeeper.services.context import next_ref
from threadkeeper.services.handoff import Compactor, Ledger, Narrated, Plan, RunningFold, extractive
from threadkeeper.services.models import ContextBudget

FIXED_USER_BUDGET = 20_000
SUMMARY_MARK = "[Summary of"
"""How the baselines' summaries begin (each is a ``[Summary of …]`` message standing in for earlier ones)."""


def _plain(messages: Sequence[Message]) -> list[Message]:
    """People's messages and replies, without runtime context or tool traffic."""
    return [m for m in messages if not m.flags.runtime and m.role in ("user", "assistant")
            and not any(isinstance(p, (ToolCallPart, ToolResultPart)) for p in m.parts)]


def _newest(messages: Sequence[Message], budget: int) -> list[Message]:
    kept: list[Message] = []
    used = 0
    for m in reversed(messages):
        if used + m.tokens > budget:
            break
        kept.append(m)
        used += m.tokens
    kept.reverse()
    return kept


class _Baseline(Compactor):
    name = "baseline"

    def _summary(self, title: str, lines: list[str]) -> Message:
        text = f"[{title}]\n" + "\n".join(lines)
        base = Message(id=new_id("summary"), role="user", parts=[TextPart(text=text)],
                       flags=MessageFlags(handoff=True), tokens=0)
        return self.tokenizer.counted(base)

    def _plan(self, messages: Sequence[Message], replacement: list[Message], summary_tokens: int = 0) -> Plan:
        kept_ids = {m.id for m in replacement}
        covered = [m.id for m in messages if m.id not in kept_ids and not m.flags.runtime]
        top = next_ref(messages) - 1  # the summary carries the numbering on, as the handoff does
        replacement = [m.model_copy(update={"ref": top or None}) if m.flags.handoff else m for m in replacement]
        return Plan(messages=replacement, covered_ids=covered, ledger=Ledger(generation=1), strategy=self.name,
                    summary_tokens=summary_tokens, kept=len([m for m in replacement if not m.flags.handoff]),
                    dropped=len([m for m in messages if m.id not in kept_ids]),
                    tokens_after=sum(m.tokens for m in replacement), tightened=0)

    async def _narrate(self, messages: Sequence[Message], cap: int, use_model: bool = True) -> list[str]:
        narrative = await self.summarizer.narrate(messages, cap) if use_model else \
            extractive(messages, cap, self.tokenizer)
        return [f"- [{','.join(line.source_ids)}] {line.text}" for line in narrative.lines]


class RecencyCompactor(_Baseline):
    """Keep the newest messages that fit; nothing else."""

    name = "recency"

    async def plan(self, messages: Sequence[Message], incoming: Sequence[Message], notes: Notes,
                   previous: Ledger | None, budget: ContextBudget, *, use_model: bool = True,
                   running: RunningFold | None = None, narrated: Narrated | None = None) -> Plan:
        return self._plan(messages, _newest(_plain(messages), budget.target_tokens))


class AccumulatingSummaries(_Baseline):
    """Append a summary record of the oldest batch and trim the transcript; records pile up."""

    name = "accumulating-summaries"

    async def plan(self, messages: Sequence[Message], incoming: Sequence[Message], notes: Notes,
                   previous: Ledger | None, budget: ContextBudget, *, use_model: bool = True,
                   running: RunningFold | None = None, narrated: Narrated | None = None) -> Plan:
        records = [m for m in messages if m.flags.handoff]
        transcript = [m for m in _plain(messages) if not m.flags.handoff]
        keep = _newest(transcript, budget.target_tokens // 2)
        kept_ids = {m.id for m in keep}
        batch = [m for m in transcript if m.id not in kept_ids]
        lines = await self._narrate(batch, budget.summary_cap_tokens // 2, use_model)
        records.append(self._summary(f"{SUMMARY_MARK[1:]} {len(batch)} earlier messages", lines))
        while len(records) > 1 and sum(m.tokens for m in records + keep) > budget.target_tokens:
            records.pop(0)
        return self._plan(messages, records + keep, summary_tokens=sum(m.tokens for m in records))


class UserMessagesSummary(_Baseline):
    """Recent user messages within a fixed 20,000-token budget plus one narrative summary, no ledger.

    The fixed budget is capped by what the window can hold (the target less the summary cap);
    uncapped, it would not fit any window under about 30k tokens.
    """

    name = "user-messages+summary"

    async def plan(self, messages: Sequence[Message], incoming: Sequence[Message], notes: Notes,
                   previous: Ledger | None, budget: ContextBudget, *, use_model: bool = True,
                   running: RunningFold | None = None, narrated: Narrated | None = None) -> Plan:
        people = [m for m in _plain(messages) if m.role == "user" and not m.flags.handoff]
        keep = _newest(people, min(FIXED_USER_BUDGET, budget.target_tokens - budget.summary_cap_tokens))
        kept_ids = {m.id for m in keep}
        folded: list[Message] = []
        for m in messages:
            if m.id in kept_ids or m.flags.runtime:
                continue
            if m.flags.handoff:  # the previous summary is summarized again, as plain text
                m = m.model_copy(update={"flags": MessageFlags(), "role": "assistant"})
            folded.append(m)
        lines = await self._narrate(_plain(folded), budget.summary_cap_tokens, use_model)
        summary = self._summary(f"{SUMMARY_MARK[1:]} the earlier thread", lines)
        return self._plan(messages, [summary, *keep], summary_tokens=summary.tokens)



STRATEGIES: dict[str, type[Compactor]] = {
    "recency": RecencyCompactor,
    "accumulating-summaries": AccumulatingSummaries,
    "user-messages+summary": UserMessagesSummary,
    "threadkeeper": Compactor,
}
