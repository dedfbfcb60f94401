"""Pre-turn compaction: replace an oversized history with pinned and recent user messages plus a handoff.

The result is written as a new ``compaction`` checkpoint forked from the summarized one; the head
moves to it by compare-and-set. Nothing earlier is edited, trimmed or deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from persistence import (
    CheckpointKind,
    CheckpointStore,
    HeadConflictError,
    History,
    InvalidTransitionError,
    NotFoundError,
    Message,
    MessageFlags,
    Notes,
    NotesStore,
    TextPart,
    new_id,
)

from .budget import ContextBudget
from .context import measure
from .extract import content_hash
from .ledger import Ledger, LedgerBuilder
from .narrative import Summarizer
from .redact import redact
from .tokens import Tokenizer
from .tools import bound_text
from .view import Narrative, render_handoff

_EMPTY = Narrative((), "extractive")

log = logging.getLogger("threadkeeper.compactor")

LEDGER_SHARE = 0.65
"""Share of the summary cap the ledger may use before the narrative gets the rest."""


@dataclass
class CompactionReport:
    conversation_id: str
    previous_checkpoint_id: str
    new_checkpoint_id: str | None
    tokens_before: int
    tokens_after: int
    kept_messages: int
    dropped_messages: int
    summary_tokens: int
    headroom_tokens: int
    strategy: str
    duration_ms: float
    reason: str = "trigger"
    generation: int = 1
    dry_run: bool = False
    superseded: bool = False
    tightened: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        return {"checkpoint_id": self.new_checkpoint_id, "forked_from": self.previous_checkpoint_id,
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after, "strategy": self.strategy}

    def line(self) -> str:
        if self.notes and self.new_checkpoint_id is None and not self.dry_run:
            return f"Nothing to compact ({self.tokens_before:,} tokens, headroom {self.headroom_tokens:,}): " \
                   + self.notes[0].split(": ", 1)[-1]
        verb = "Would compact" if self.dry_run else "Compacted"
        return (f"{verb} {self.tokens_before:,} → {self.tokens_after:,} tokens; kept {self.kept_messages} messages, "
                f"folded {self.dropped_messages}; headroom {self.headroom_tokens:,}")


@dataclass
class Plan:
    messages: list[Message]
    covered_ids: list[str]
    ledger: Ledger
    strategy: str
    summary_tokens: int
    kept: int
    dropped: int
    tokens_after: int
    tightened: int


def suspects(notes: Notes) -> dict[str, str]:
    """Message ids that were edited or deleted after they were written, with the reason."""
    out: dict[str, str] = {}
    for message_id, change in notes.changes.items():
        out[message_id] = ("its message was deleted" if change.kind == "deleted"
                           else "its message was edited after this was recorded")
    return out


class Compactor:
    def __init__(self, *, checkpoints: CheckpointStore, notes: NotesStore, tokenizer: Tokenizer,
                 summarizer: Summarizer, fixed_prompt_tokens: int) -> None:
        self.checkpoints = checkpoints
        self.notes = notes
        self.tokenizer = tokenizer
        self.summarizer = summarizer
        self.fixed_prompt_tokens = fixed_prompt_tokens

    # -- hook used by the reply executor -------------------------------------------------------

    async def before_turn(self, conversation_id: str, history: History | None, incoming: Sequence[Message],
                          budget: ContextBudget) -> tuple[History | None, CompactionReport | None]:
        if history is None or not self.should_compact(history, incoming, budget):
            return history, None
        report, plan = await self._plan_and_report(conversation_id, history, incoming, budget, "trigger")
        try:
            new_history = await self._write(conversation_id, history, plan, report)
        except HeadConflictError:
            state = await self.checkpoints.require_state(conversation_id)
            return await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id), report
        return new_history, report

    def should_compact(self, history: History, incoming: Sequence[Message], budget: ContextBudget) -> bool:
        tokens = measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens, extra=incoming)
        if tokens < budget.trigger_tokens:
            return False
        # Loop breaker: an epoch that is only a compaction has nothing new to fold.
        return not (len(history.chain) == 1 and history.checkpoint.kind is CheckpointKind.COMPACTION)

    async def preview(self, conversation_id: str, history: History, pending: Sequence[Message],
                      budget: ContextBudget) -> tuple[CompactionReport, list[Message]]:
        report, plan = await self._plan_and_report(conversation_id, history, pending, budget, "preview", dry_run=True)
        return report, plan.messages

    async def compact(self, conversation_id: str, *, budget: ContextBudget, dry_run: bool = False,
                      reason: str = "manual") -> CompactionReport:
        """Compact now, whatever the trigger says (the internal compaction command)."""
        state = await self.checkpoints.require_state(conversation_id)
        if state.active_turn_id:
            active = await self.checkpoints.get(conversation_id, state.active_turn_id)
            if active.status.value == "awaiting_resume":
                raise InvalidTransitionError(
                    f"conversation {conversation_id} has a turn awaiting resume ({active.id}); it is never "
                    "compacted. Resume or answer it first.")
        if state.head_checkpoint_id is None:
            raise NotFoundError(f"conversation {conversation_id} has no completed checkpoint to compact")
        history = await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id)
        if len(history.chain) == 1 and history.checkpoint.kind is CheckpointKind.COMPACTION:
            tokens = measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens)
            if tokens <= budget.target_tokens:  # nothing new since the last compaction, and it fits
                return CompactionReport(
                    conversation_id=conversation_id, previous_checkpoint_id=history.checkpoint.id,
                    new_checkpoint_id=None, tokens_before=tokens, tokens_after=tokens,
                    kept_messages=len(history.messages), dropped_messages=0, summary_tokens=0,
                    headroom_tokens=budget.trigger_tokens - tokens, strategy="none", duration_ms=0.0, reason=reason,
                    dry_run=dry_run, notes=["nothing to compact: the head is a compaction with no newer messages "
                                            f"and already within the target ({budget.target_tokens:,} tokens)"])
        report, plan = await self._plan_and_report(conversation_id, history, [], budget, reason, dry_run=dry_run)
        if not dry_run:
            try:
                await self._write(conversation_id, history, plan, report)
            except HeadConflictError:
                report.superseded = True
        return report

    # -- planning ------------------------------------------------------------------------------

    async def _plan_and_report(self, conversation_id: str, history: History, incoming: Sequence[Message],
                               budget: ContextBudget, reason: str, *, dry_run: bool = False,
                               ) -> tuple[CompactionReport, Plan]:
        started = time.perf_counter()
        tokens_before = measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens)
        notes = await self.notes.get(conversation_id)
        previous = await self._previous_ledger(conversation_id, history)
        plan = await self.plan(history.messages, incoming, notes, previous, budget)
        report = CompactionReport(
            conversation_id=conversation_id, previous_checkpoint_id=history.checkpoint.id, new_checkpoint_id=None,
            tokens_before=tokens_before, tokens_after=plan.tokens_after, kept_messages=plan.kept,
            dropped_messages=plan.dropped, summary_tokens=plan.summary_tokens,
            headroom_tokens=budget.trigger_tokens - plan.tokens_after, strategy=plan.strategy,
            duration_ms=round((time.perf_counter() - started) * 1000, 2), reason=reason,
            generation=plan.ledger.generation, dry_run=dry_run, tightened=plan.tightened)
        return report, plan

    async def _previous_ledger(self, conversation_id: str, history: History) -> Ledger | None:
        root_id = history.chain[0]
        root = history.checkpoint if root_id == history.checkpoint.id else \
            await self.checkpoints.get(conversation_id, root_id)
        raw = root.meta.info.get("ledger") if root.kind is CheckpointKind.COMPACTION else None
        return Ledger.model_validate(raw) if raw else None

    async def plan(self, messages: Sequence[Message], incoming: Sequence[Message], notes: Notes,
                   previous: Ledger | None, budget: ContextBudget) -> Plan:
        """The replacement history for ``messages``; pure apart from the summarizer call."""
        builder = LedgerBuilder(previous).fold(messages)
        people = [m for m in messages if m.role == "user" and not m.flags.handoff and not m.flags.runtime]
        current = next((m for m in reversed(incoming) if m.role == "user"), None) or (people[-1] if people else None)
        ledger = builder.set_current_ask(current).evict().build()
        ledger.generation = (previous.generation if previous else 0) + 1
        live = [self._current(m, notes) for m in people]
        live = [m for m in live if m is not None]
        pinned_ids = {m.id for m in live if notes.pins.get(m.id, m.flags.pinned)}
        retained_budget, pin_budget, cap = budget.retained_user_tokens, budget.pin_tokens, budget.summary_cap_tokens
        changed = suspects(notes)
        tightened = 0
        while True:
            kept = self._retain(live, pinned_ids, retained_budget, pin_budget)
            kept_ids = {m.id for m in kept}
            folded = [m for m in messages if m.id not in kept_ids and not m.flags.runtime]
            ledger_cap = int(cap * LEDGER_SHARE)
            first = render_handoff(ledger, _EMPTY, changed, cap_tokens=ledger_cap,
                                   count=self.tokenizer.count)
            narrative_cap = cap - self.tokenizer.count(first.text)
            narrative = await self.summarizer.narrate([m for m in folded if not m.flags.handoff], narrative_cap,
                                                      avoid=first.text)
            rendered = render_handoff(ledger, narrative, changed, cap_tokens=cap,
                                      count=self.tokenizer.count)
            text = redact(rendered.text)
            handoff = self._message(text, rendered.source_ids)
            replacement = [handoff, *kept]
            after = sum(m.tokens for m in replacement)
            if after <= budget.target_tokens or tightened >= 8:
                break
            tightened += 1
            retained_budget, pin_budget, cap = int(retained_budget * 0.7), int(pin_budget * 0.7), int(cap * 0.8)
        covered = [m.id for m in messages if m.id not in kept_ids and not m.flags.runtime and not m.flags.handoff]
        dropped = len([m for m in messages if m.id not in kept_ids])
        return Plan(messages=replacement, covered_ids=covered, ledger=ledger, strategy=narrative.strategy,
                    summary_tokens=handoff.tokens, kept=len(kept), dropped=dropped, tokens_after=after,
                    tightened=tightened)

    def _current(self, message: Message, notes: Notes) -> Message | None:
        change = notes.changes.get(message.id)
        if change is None:
            return message
        if change.kind == "deleted":
            return None
        text = f"{change.text or ''} (edited)"
        return self._with_tokens(message.model_copy(update={"parts": [TextPart(text=text)]}))

    def _retain(self, people: list[Message], pinned_ids: set[str], retained_budget: int,
                pin_budget: int) -> list[Message]:
        """Pinned messages within the pin budget, then the newest people's messages within the retained budget."""
        chosen: dict[str, Message] = {}
        used = 0
        for m in reversed([m for m in people if m.id in pinned_ids]):
            if used + m.tokens > pin_budget:
                continue
            chosen[m.id] = m.model_copy(update={"flags": m.flags.model_copy(update={"pinned": True})})
            used += m.tokens
        used = 0
        for m in reversed(people):
            if m.id in chosen:
                continue
            if used + m.tokens <= retained_budget:
                chosen[m.id] = m
                used += m.tokens
                continue
            room = retained_budget - used
            if room >= 48:
                text, _ = bound_text(m.text, self.tokenizer, room - 24)
                chosen[m.id] = self._with_tokens(m.model_copy(update={"parts": [TextPart(text=text)]}))
            break
        order = {m.id: i for i, m in enumerate(people)}
        return sorted(chosen.values(), key=lambda m: order[m.id])

    def _with_tokens(self, message: Message) -> Message:
        return message.model_copy(update={"tokens": self.tokenizer.count_message(message)})

    def _message(self, text: str, source_ids: list[str]) -> Message:
        base = Message(id=new_id("handoff"), role="user", parts=[TextPart(text=text)], flags=MessageFlags(handoff=True),
                       tokens=0, source_ids=source_ids)
        return self._with_tokens(base)

    # -- writing -------------------------------------------------------------------------------

    async def _write(self, conversation_id: str, history: History, plan: Plan, report: CompactionReport) -> History:
        info = {"reason": report.reason, "strategy": plan.strategy, "tokens_before": report.tokens_before,
                "tokens_after": plan.tokens_after, "generation": plan.ledger.generation,
                "ledger": plan.ledger.model_dump(mode="json"),
                "ledger_hash": content_hash(plan.ledger.model_dump_json())}
        fork = await self.checkpoints.fork_compaction(conversation_id, forked_from=history.checkpoint.id,
                                                      messages=plan.messages, covered_ids=plan.covered_ids, info=info)
        report.new_checkpoint_id = fork.id
        try:
            await self.checkpoints.commit(conversation_id, fork.id, expected_head=history.checkpoint.id)
        except HeadConflictError:
            await self.checkpoints.supersede(conversation_id, fork.id)
            report.superseded = True
            raise
        return await self.checkpoints.load_history(conversation_id, fork.id)
