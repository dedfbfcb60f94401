"""Visible-thread memory: every message seen in a thread, including ones the bot did not answer, kept bounded.

Recent lines are kept verbatim up to a budget; when they outgrow it, the oldest half folds into a
summary record (the notes of the segment that brought the most new words). Records of the
same level merge into one of the next level when there are too many, so the record count and size
never grow without bound. Thresholds are fractions of the fast model's window.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from persistence import Message, NotesStore, TextPart

from .ledger import LedgerBuilder
from .tokens import Tokenizer

FIELD = "transcript"


class SummaryRecord(BaseModel):
    level: int = 0
    first_id: str
    last_id: str
    messages: int
    facts: list[str] = Field(default_factory=list)
    """The segment's notes, ``[id] author: note``."""


class Transcript(BaseModel):
    recent: list[str] = Field(default_factory=list)
    recent_ids: list[str] = Field(default_factory=list)
    summaries: list[SummaryRecord] = Field(default_factory=list)


class TranscriptMemory:
    """Bounded per-thread transcript kept in the conversation's notes (only the lease holder writes it)."""

    def __init__(self, notes: NotesStore, tokenizer: Tokenizer, *, fast_window_tokens: int,
                 recent_fraction: float = 0.15, max_records: int = 8, record_items: int = 8) -> None:
        self.notes = notes
        self.tokenizer = tokenizer
        self.recent_budget = max(200, int(fast_window_tokens * recent_fraction))
        self.max_records = max_records
        self.record_items = record_items

    async def get(self, conversation_id: str) -> Transcript:
        raw = await self.notes.flag(conversation_id, FIELD)
        return Transcript.model_validate_json(raw) if raw else Transcript()

    async def record(self, conversation_id: str, messages: Sequence[Message]) -> Transcript:
        people = [m for m in messages if m.role in ("user", "assistant") and not m.flags.runtime]
        transcript = await self.get(conversation_id)
        if not people:
            return transcript
        for m in people:
            transcript.recent.append(f"[{m.id}] {m.author or m.role}: {' '.join(m.text.split())}")
            transcript.recent_ids.append(m.id)
        self._fold(transcript, {m.id: m for m in people})
        await self.notes.set_flag(conversation_id, FIELD, transcript.model_dump_json())
        return transcript

    def _fold(self, t: Transcript, fresh: dict[str, Message]) -> None:
        while sum(self.tokenizer.count(line) for line in t.recent) > self.recent_budget and len(t.recent) > 2:
            half = len(t.recent) // 2
            lines, ids = t.recent[:half], t.recent_ids[:half]
            t.recent, t.recent_ids = t.recent[half:], t.recent_ids[half:]
            t.summaries.append(self._summarize(t, lines, ids))
        while len(t.summaries) > self.max_records:
            level = min(r.level for r in t.summaries)
            same = [i for i, r in enumerate(t.summaries) if r.level == level]
            if len(same) < 2:
                level_records = t.summaries[:2]
                same = [0, 1]
            else:
                level_records = [t.summaries[same[0]], t.summaries[same[1]]]
            merged = self._merge(*level_records)
            t.summaries = [r for i, r in enumerate(t.summaries) if i not in same[:2]]
            t.summaries.insert(same[0], merged)

    def _summarize(self, t: Transcript, lines: list[str], ids: list[str]) -> SummaryRecord:
        """Fold a segment into a record of the notes that brought the most new words."""
        messages = [_line_message(line, mid) for line, mid in zip(lines, ids, strict=True)]
        ledger = LedgerBuilder().fold(messages).build()
        cap = self.record_items
        notes = sorted(ledger.notes, key=lambda n: (-len(n.fresh), n.id))[:cap]
        return SummaryRecord(
            first_id=ids[0], last_id=ids[-1], messages=len(ids),
            facts=[f"[{n.id}] {n.author}: {n.text}" for n in sorted(notes, key=lambda n: ids.index(n.id))])

    def _merge(self, a: SummaryRecord, b: SummaryRecord) -> SummaryRecord:
        cap = self.record_items
        return SummaryRecord(level=max(a.level, b.level) + 1, first_id=a.first_id, last_id=b.last_id,
                             messages=a.messages + b.messages, facts=(a.facts + b.facts)[-cap:],
)


def _line_message(line: str, mid: str) -> Message:
    body = line.split("] ", 1)[1] if "] " in line else line
    author, _, text = body.partition(": ")
    return Message(id=mid, role="user", parts=[TextPart(text=text or body)], author=author or None, tokens=0,
                   created_at=0.0)
