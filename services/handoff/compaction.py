"""What a compaction produces and the small rules it plans by: its report, its plan, the target it must reach,
the messages marked suspect, and the running fold a worker keeps per conversation between compactions."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from threadkeeper.persistence import Message, Notes

from ..models import ContextBudget
from .ledger import Ledger, LedgerBuilder, NarrativeEntry
from .view import Narrative


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
    carried: dict[str, int] = field(default_factory=dict)
    """What the new handoff carries: notes kept and evicted, narrative lines."""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        return {"checkpoint_id": self.new_checkpoint_id, "forked_from": self.previous_checkpoint_id,
                "tokens_before": self.tokens_before, "tokens_after": self.tokens_after, "strategy": self.strategy}

    def notice(self) -> str | None:
        """What the person whose turn compacted is told, once, with its reply (None when nothing was folded)."""
        if self.new_checkpoint_id is None or self.dry_run or self.superseded or not self.dropped_messages:
            return None
        return (f"I folded {self.dropped_messages:,} earlier messages of this thread into a summary to stay within "
                "my context window. Nothing was deleted: I still search all of them when you ask about something "
                "earlier.")

    def line(self) -> str:
        if self.notes and self.new_checkpoint_id is None and not self.dry_run:
            return f"Nothing to compact ({self.tokens_before:,} tokens, headroom {self.headroom_tokens:,}): " \
                   + self.notes[0].split(": ", 1)[-1]
        verb = "Would compact" if self.dry_run else "Compacted"
        return (f"{verb} {self.tokens_before:,} → {self.tokens_after:,} tokens; kept {self.kept_messages} messages, "
                f"folded {self.dropped_messages}; headroom {self.headroom_tokens:,}")


@dataclass(frozen=True)
class Narrated:
    """The narrative the summarizer wrote for a compaction planned ahead of need (``Compactor.prepare_after``),
    which the compaction that adopts it uses instead of asking the summarizer while a person waits."""

    narrative: Narrative
    entries: list[NarrativeEntry]
    checkpoint_id: str
    """The checkpoint it was planned from."""


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
    carried: dict[str, int] = field(default_factory=dict)
    detail: str = ""
    calibration: float = 1.0
    """How the provider counted against the local estimate when the plan was made (kept with the compaction)."""
    prepared_from: str | None = None
    """The checkpoint it was planned from ahead of need, when a turn adopted it (see ``Compactor.prepare_after``)."""


def target_for(budget: ContextBudget, incoming: Sequence[Message]) -> int:
    """The size a compaction aims at: the target, less what the turn brings beyond the trigger's room when
    the turn will ask the model (its request must fit beside the compacted history); a turn that only
    records messages sends nothing, so it never shrinks what the handoff may keep."""
    if not any(m.flags.addressed for m in incoming):
        return budget.target_tokens
    arriving = sum(m.tokens for m in incoming if not m.flags.runtime)
    return max(budget.target_tokens // 4, min(budget.target_tokens, budget.trigger_tokens - arriving))


def changes_of(notes: Notes) -> dict[str, str | None]:
    """Edited message ids with their current text, deleted ones with None."""
    return {mid: (c.text or "" if c.kind == "edited" else None) for mid, c in notes.changes.items()}


def suspects(notes: Notes) -> dict[str, str]:
    """Message ids that were edited or deleted after they were written, with the reason."""
    out: dict[str, str] = {}
    for message_id, change in notes.changes.items():
        out[message_id] = ("its message was deleted" if change.kind == "deleted"
                           else "its message was edited after this was recorded")
    return out


RUNNING_NOTES = 20_000
"""How many notes the running folds of one process hold in all (about 3 KB each, so at most about 60 MB); the
conversations used least recently leave first and are folded again from their messages when they compact."""


@dataclass
class RunningFold:
    """The ledger folded over the oldest messages of an epoch, which no compaction can keep verbatim.

    Kept per conversation in the process and extended before each turn, so a compaction folds only what
    arrived since (at most the messages it could keep) and then selects and renders. Folding in steps gives
    exactly what one fold gives, so a worker that never saw the conversation writes the same handoff."""

    root: str
    """The epoch's first checkpoint: the compaction whose ledger this one continues (or the conversation's first)."""
    changes: dict[str, str | None]
    """The edits and deletions it was folded with."""
    consumed: list[str]
    """The ids of the epoch's first ``len(consumed)`` messages, in history order."""
    builder: LedgerBuilder

    def matches(self, messages: Sequence[Message], changes: dict[str, str | None]) -> bool:
        """Whether it still stands for the oldest of ``messages`` (the history of the same epoch). Checkpoints
        never change once completed, so an epoch's history only grows: the last message it consumed, in its
        place, stands for all of them."""
        n = len(self.consumed)
        return changes == self.changes and len(messages) >= n and (n == 0 or messages[n - 1].id == self.consumed[-1])


FOLD_ON_LOOP = 4_000
"""Characters of messages folded into a ledger on the event loop at most (folding reads each message's sentences,
words and secrets: 0.4 to 0.9 µs a character, so a turn's few messages take a millisecond or two); more are folded in
a thread (the first fold of an epoch in a worker takes its oldest hundreds of messages: 70 to 100 ms on the loop)."""


async def fold(builder: LedgerBuilder, messages: Sequence[Message], changes: Mapping[str, str | None],
               kept: frozenset[str] | set[str] = frozenset()) -> LedgerBuilder:
    """``builder`` with ``messages`` folded (:meth:`LedgerBuilder.fold`), in a thread when they hold more than
    :data:`FOLD_ON_LOOP` characters: the one way a compaction and the running fold fold. The caller holds
    ``builder`` alone until it is done."""
    if sum(len(m.text) for m in messages) > FOLD_ON_LOOP:
        return await asyncio.to_thread(builder.fold, messages, changes, kept)
    return builder.fold(messages, changes, kept)


def foldable(messages: Sequence[Message], retained_tokens: int) -> int:
    """How many of the oldest messages no compaction keeps verbatim: people's messages newer than them
    hold more than ``retained_tokens``, and none of them is pinned."""
    after = 0
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and not m.flags.handoff and not m.flags.runtime:
            if after > retained_tokens:
                end = i + 1
                break
            after += m.tokens
    else:
        return 0
    pinned = next((i for i, m in enumerate(messages[:end]) if m.flags.pinned), end)
    return min(end, pinned)
