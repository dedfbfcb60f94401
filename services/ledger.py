"""The ledger: a host-owned, deterministic record of a thread's asks, decisions, facts and artifacts.

It is rebuilt by folding messages into the previous compaction's ledger, so several generations of
compaction keep what the first one found. Folding is deterministic and idempotent: the same messages
always give the same ledger, and a message folded twice counts once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from persistence import Message, ToolResultPart

from . import extract as x

RECORD_STATE = "record_state"
ACCEPTED_MARK = "accepted entries: "


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seq: int


class Ask(_Entry):
    id: str
    author: str
    text: str
    status: Literal["open", "resolved", "superseded"] = "open"
    closed_by: str | None = None


class Decision(_Entry):
    id: str
    author: str
    text: str
    status: Literal["active", "reversed"] = "active"
    reversed_by: str | None = None


class Fact(_Entry):
    key: str
    evidence_id: str
    evidence_hash: str
    text: str
    kind: Literal["fact", "constraint", "plan_step", "decision"] = "fact"
    origin: Literal["thread", "model"] = "thread"


class ArtifactEntry(_Entry):
    source_id: str
    values: list[str]


class Caps(BaseModel):
    open_asks: int = 40
    closed_asks: int = 30
    decisions: int = 40
    facts: int = 80
    artifacts: int = 150


class Ledger(BaseModel):
    model_config = ConfigDict(extra="forbid")
    v: int = 1
    generation: int = 0
    covered_messages: int = 0
    next_seq: int = 0
    watermark: float = 0.0
    watermark_ids: list[str] = Field(default_factory=list)
    current_ask: Ask | None = None
    asks: list[Ask] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    artifacts: list[ArtifactEntry] = Field(default_factory=list)
    participants: dict[str, int] = Field(default_factory=dict)

    def cited_ids(self) -> list[str]:
        ids: list[str] = []
        if self.current_ask:
            ids.append(self.current_ask.id)
        ids += [a.id for a in self.asks] + [d.id for d in self.decisions] + [f.evidence_id for f in self.facts]
        ids += [a.source_id for a in self.artifacts]
        return list(dict.fromkeys(ids))


def _short(text: str, limit: int = 280) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LedgerBuilder:
    """Folds messages into a ledger. ``edits`` maps message ids to their current text (None: deleted)."""

    def __init__(self, ledger: Ledger | None = None, caps: Caps | None = None) -> None:
        self.ledger = (ledger or Ledger()).model_copy(deep=True)
        self.caps = caps or Caps()

    def _seq(self) -> int:
        self.ledger.next_seq += 1
        return self.ledger.next_seq

    def _seen(self, message: Message) -> bool:
        lg = self.ledger
        return message.created_at < lg.watermark or (message.created_at == lg.watermark and
                                                      message.id in lg.watermark_ids)

    def _mark(self, message: Message) -> None:
        lg = self.ledger
        if message.created_at > lg.watermark:
            lg.watermark, lg.watermark_ids = message.created_at, [message.id]
        elif message.created_at == lg.watermark:
            lg.watermark_ids.append(message.id)

    def fold(self, messages: Iterable[Message]) -> LedgerBuilder:
        for message in messages:
            if message.flags.runtime or message.flags.handoff or self._seen(message):
                continue
            if message.role == "user":
                self._fold_user(message)
                self.ledger.covered_messages += 1
            elif message.role == "tool":
                self._fold_tool(message)
            elif message.role == "assistant":
                self.ledger.covered_messages += 1
            self._mark(message)
        return self

    def _fold_user(self, m: Message) -> None:
        lg = self.ledger
        author = m.author or "someone"
        if m.author:
            lg.participants[author] = lg.participants.get(author, 0) + 1
        text = m.text
        if not text.strip():
            return
        is_ask = x.is_ask(text)
        known_terms = x.terms(text)
        values = [a.value for a in x.artifacts(text)]
        cue = x.SUPERSEDE.search(text)
        replaces = cue is not None and not x.DECISION.search(text) and (is_ask or cue.group(0).lower() != "instead")
        if replaces:
            target = self._latest_open(author, known_terms) or self._latest_open(None, known_terms)
            if target is not None:
                target.status, target.closed_by = "superseded", m.id
        elif x.RESOLVE.search(text) and not is_ask:
            target = self._best_open(known_terms, set(values))
            if target is not None:
                target.status, target.closed_by = "resolved", m.id
        decided = False
        if x.DECISION.search(text):
            decided = True
            if x.REVERSAL.search(text):
                old = self._best_decision(known_terms)
                if old is not None:
                    old.status, old.reversed_by = "reversed", m.id
            short = _short(text)
            lg.decisions = [d for d in lg.decisions if not (d.status == "active" and d.text == short)]
            lg.decisions.append(Decision(seq=self._seq(), id=m.id, author=author, text=short))
        if is_ask and not decided:
            lg.asks.append(Ask(seq=self._seq(), id=m.id, author=author, text=_short(text)))
        if not decided and not is_ask:
            count = 0
            for i, sentence in enumerate(x.sentences(text)):
                constraint = bool(x.CONSTRAINT.search(sentence))
                if constraint or any(v in sentence for v in values):
                    short = _short(sentence, 240)
                    lg.facts = [f for f in lg.facts if f.text != short]
                    lg.facts.append(Fact(seq=self._seq(), key=f"{m.id}#{i}", evidence_id=m.id,
                                         evidence_hash=x.content_hash(text), text=short,
                                         kind="constraint" if constraint else "fact"))
                    count += 1
                    if count == 3:
                        break
        if values:
            fresh = set(values[:8])
            for entry in lg.artifacts:
                if fresh & set(entry.values):
                    entry.values = [v for v in entry.values if v not in fresh]
            lg.artifacts = [e for e in lg.artifacts if e.values]
            lg.artifacts.append(ArtifactEntry(seq=self._seq(), source_id=m.id, values=values[:8]))

    def _fold_tool(self, m: Message) -> None:
        for part in m.parts:
            if isinstance(part, ToolResultPart) and part.name == RECORD_STATE and ACCEPTED_MARK in part.content:
                raw = part.content.split(ACCEPTED_MARK, 1)[1].splitlines()[0]
                try:
                    entries = json.loads(raw)
                except ValueError:
                    continue
                for i, e in enumerate(entries):
                    kind = e.get("kind", "fact")
                    self.ledger.facts.append(Fact(seq=self._seq(), key=f"{m.id}#{i}", evidence_id=e["evidence"][0],
                                                  evidence_hash=e.get("hash", ""), text=_short(e["text"], 240),
                                                  kind=kind if kind in ("fact", "plan_step", "decision") else "fact",
                                                  origin="model"))

    def _latest_open(self, author: str | None, words: set[str] | None = None) -> Ask | None:
        """The open ask this message most likely refers to: by overlap of distinctive words, else the latest."""
        candidates = [a for a in self.ledger.asks if a.status == "open" and (author is None or a.author == author)]
        if words:
            best = _best_match(candidates, lambda a: a.text, words, set())
            if best is not None:
                return best
        return candidates[-1] if candidates else None

    def _best_open(self, words: set[str], values: set[str]) -> Ask | None:
        return _best_match([a for a in self.ledger.asks if a.status == "open"], lambda a: a.text, words, values)

    def _best_decision(self, words: set[str]) -> Decision | None:
        return _best_match([d for d in self.ledger.decisions if d.status == "active"], lambda d: d.text, words, set())

    def set_current_ask(self, message: Message | None) -> LedgerBuilder:
        if message is not None:
            self.ledger.current_ask = Ask(seq=self._seq(), id=message.id, author=message.author or "someone",
                                          text=_short(message.text, 600))
        return self

    def evict(self) -> LedgerBuilder:
        """Apply the caps: oldest entries leave first, ties broken by key."""
        lg, caps = self.ledger, self.caps
        open_asks = [a for a in lg.asks if a.status == "open"]
        closed = [a for a in lg.asks if a.status != "open"]
        lg.asks = sorted(_keep(open_asks, caps.open_asks, lambda a: a.id) + _keep(closed, caps.closed_asks,
                                                                                  lambda a: a.id),
                         key=lambda a: a.seq)
        lg.decisions = _keep(lg.decisions, caps.decisions, lambda d: d.id)
        lg.facts = _keep(lg.facts, caps.facts, lambda f: f.key)
        lg.artifacts = _keep(lg.artifacts, caps.artifacts, lambda a: a.source_id)
        return self

    def build(self) -> Ledger:
        return self.ledger


def _best_match(entries: list, text_of, words: set[str], values: set[str]):  # type: ignore[no-untyped-def]
    """The entry a message most likely refers to, newest first on ties.

    Shared words are weighted by rarity among the candidates: a word every candidate has ("rollback",
    "checklist") counts little, a word only one has counts fully. A matching artifact counts most.
    """
    term_sets = [x.terms(text_of(e)) for e in entries]
    freq: dict[str, int] = {}
    for t in term_sets:
        for w in t & words:
            freq[w] = freq.get(w, 0) + 1
    best, best_score = None, 0.0
    for i in range(len(entries) - 1, -1, -1):
        shared = words & term_sets[i]
        art = len(values & {a.value for a in x.artifacts(text_of(entries[i]))})
        score = 3.0 * art + sum(1.0 / freq[w] for w in shared)
        if (art or len(shared) >= 2) and score >= 1.0 and score > best_score:
            best, best_score = entries[i], score
    return best


def _keep(entries: list, cap: int, key) -> list:  # type: ignore[no-untyped-def]
    if len(entries) <= cap:
        return entries
    ranked = sorted(entries, key=lambda e: (e.seq, key(e)))
    return ranked[len(ranked) - cap:]
