"""The ledger: the host-owned state a handoff carries from one generation to the next.

Generation N is built from generation N-1's ledger plus the messages folded now, so knowledge
accumulates. Folding is keyed by message id and follows the order of the history, never timestamps
(a message posted while the bot was thinking has an older Slack ``ts`` than the reply before it).
What it holds:

* asks: the messages that asked the assistant for an answer (mentions, DMs, messages the router
  chose), each open, answered (by which reply) or superseded (by which later ask of the same person);
* decisions stated in the thread, and which later message reversed them;
* every folded message's note (the candidates of :mod:`services.notebook`) and the word statistics
  that rarity is measured against;
* entries the model recorded with ``record_state``, and the previous model-written narrative;
* participants and how much each said.

Knowledge leaves only through the deterministic, value-based eviction of the view and the caps here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from threadkeeper.persistence import Message, TextPart, ToolCallPart, ToolResultPart

from ..context import refs
from ..safety import is_instruction, redact, split_instructions
from ..text import extract as x
from ..text import make_note, terms
from .notebook import NoteEntry, TermStats

RECORD_STATE = "record_state"
ACCEPTED_MARK = "accepted entries: "
LEDGER_VERSION = 2
LAST_FOLDED = 500
"""How many recently folded ids a ledger remembers, so folding the same messages again changes nothing."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="ignore")
    seq: int


class Ask(_Entry):
    id: str
    author: str
    text: str
    note: str | None = None
    """The ask's note: how it is shown once it is closed."""
    status: Literal["open", "answered", "superseded"] = "open"
    closed_by: str | None = None
    standing: bool = False
    """What the person asked of the assistant's future behaviour ("from now on, answer in French"): shown as
    their ask, with their name, never as a rule of the thread; no reply closes it."""


class Decision(_Entry):
    id: str
    author: str
    text: str
    status: Literal["active", "reversed"] = "active"
    reversed_by: str | None = None


class ModelFact(_Entry):
    """An entry the model recorded with ``record_state``, validated against its evidence message."""

    key: str
    evidence_id: str
    evidence_hash: str
    text: str
    kind: Literal["fact", "plan_step", "decision"] = "fact"


class NarrativeEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str
    source_ids: list[str] = Field(default_factory=list)


class Caps(BaseModel):
    asks: int = 60
    decisions: int = 60
    model_facts: int = 60


class Ledger(BaseModel):
    model_config = ConfigDict(extra="ignore")
    v: int = LEDGER_VERSION
    generation: int = 0
    covered_messages: int = 0
    first_at: float | None = None
    last_at: float | None = None
    next_seq: int = 0
    asks: list[Ask] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    model_facts: list[ModelFact] = Field(default_factory=list)
    notes: list[NoteEntry] = Field(default_factory=list)
    """Notes the previous handoff carried (after folding: plus the candidates folded now)."""
    stats: TermStats = Field(default_factory=TermStats)
    narrative: list[NarrativeEntry] = Field(default_factory=list)
    participants: dict[str, int] = Field(default_factory=dict)
    answers: dict[str, str] = Field(default_factory=dict)
    """Replies folded before the ask they answer (the ask was still kept verbatim): ask id → reply id."""
    last_folded: list[str] = Field(default_factory=list)
    """Ids the latest generation folded (with the ids every entry cites: what folding again skips)."""
    refs: dict[str, int] = Field(default_factory=dict)
    """The short reference (``#N``) of each message the ledger cites, by id."""
    kept_fresh: dict[str, list[str]] = Field(default_factory=dict)
    """Messages the handoff kept verbatim, already counted in the word statistics in thread order: the words
    each brought first (its note gets them when it is folded, not a later reply that repeated them)."""

    def label(self, ident: str) -> str:
        """How a handoff cites a message: ``#N``, or the id of a message that has no reference."""
        return refs.label(ident, self.refs.get(ident))

    def keep_refs(self) -> None:
        """Forget the references of messages the ledger no longer cites."""
        cited = set(self.cited_ids())
        self.refs = {i: r for i, r in self.refs.items() if i in cited}

    def cited_ids(self) -> list[str]:
        ids = [a.id for a in self.asks] + [d.id for d in self.decisions] + [f.evidence_id for f in self.model_facts]
        ids += [n.id for n in self.notes] + [i for e in self.narrative for i in e.source_ids]
        return list(dict.fromkeys(ids))


def _short(text: str, limit: int = 280) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def prose(message: Message) -> str:
    """What a message says in words: its text parts (tool calls and results are not notes)."""
    return "\n".join(p.text for p in message.parts if isinstance(p, TextPart))


def note_of(message: Message) -> str | None:
    """The message's stored note, or one computed now (messages written before notes existed)."""
    if message.note is not None:
        return message.note or None  # "": computed, nothing worth a note
    words = prose(message)
    return make_note(words, message.created_at) if words.strip() else None


def decided(text: str) -> str:
    """What a decision line says: the sentences that state the decision (the whole text if none stands out)."""
    stated = [sentence for sentence in x.sentences(text) if x.DECISION.search(sentence)]
    return " ".join(stated) if stated else text


def is_decision(text: str) -> bool:
    """A statement that something was decided (a question about a decision is not one)."""
    stripped = text.rstrip()
    return bool(x.DECISION.search(text)) and not stripped.endswith(("?", "？"))


class LedgerBuilder:
    """Folds messages into a ledger; ``changes`` maps edited message ids to their current text (None: deleted)."""

    def __init__(self, ledger: Ledger | None = None, caps: Caps | None = None,
                 count: Callable[[str], int] | None = None) -> None:
        self.ledger = (ledger or Ledger()).model_copy(deep=True)
        self.caps = caps or Caps()
        self.count = count
        """The tokenizer's count: with it, a note's cost comes from the counts stored with its message."""
        self._known = {a.id for a in self.ledger.asks} | {d.id for d in self.ledger.decisions}
        self._known |= {n.id for n in self.ledger.notes} | set(self.ledger.last_folded)
        self._applied: dict[str, str | None] = {}
        """Changes already applied: folding in several steps gives what one fold over all of it gives."""

    def clone(self) -> LedgerBuilder:
        """An independent copy to fold further, made in proportion to the mutable entries (notes are immutable
        and shared)."""
        lg = self.ledger
        other = LedgerBuilder.__new__(LedgerBuilder)
        other.ledger = lg.model_copy(update={
            "asks": [a.model_copy() for a in lg.asks], "decisions": [d.model_copy() for d in lg.decisions],
            "model_facts": list(lg.model_facts), "notes": list(lg.notes), "narrative": list(lg.narrative),
            "stats": TermStats.model_construct(docs=lg.stats.docs, df=dict(lg.stats.df)),
            "participants": dict(lg.participants), "answers": dict(lg.answers), "last_folded": list(lg.last_folded),
            "refs": dict(lg.refs), "kept_fresh": dict(lg.kept_fresh)})
        other.caps, other.count = self.caps, self.count
        other._known, other._applied = set(self._known), dict(self._applied)
        return other

    def _seq(self) -> int:
        self.ledger.next_seq += 1
        return self.ledger.next_seq

    def fold(self, messages: Iterable[Message], changes: Mapping[str, str | None] | None = None,
             kept: frozenset[str] | set[str] = frozenset()) -> LedgerBuilder:
        """Fold messages in history order; a message already folded (by id) is skipped. Messages in ``kept``
        stay verbatim: they are not folded, but their words enter the statistics in thread order, so a later
        message that repeats them does not count as having brought them."""
        changes = changes or {}
        self._apply(changes)
        candidates: list[tuple[Message, str, str]] = []
        folded: list[str] = []
        lg = self.ledger
        # Counted in locals and set once: assigning a pydantic model's attribute costs far more than a local.
        covered, first, last = lg.covered_messages, lg.first_at, lg.last_at
        for m in messages:
            if m.flags.runtime or m.flags.handoff or m.id in self._known:
                continue
            if m.id in kept:
                if m.id not in lg.kept_fresh and m.role == "user" and changes.get(m.id, "") is not None:
                    text = prose(m) if m.id not in changes else changes[m.id] or ""
                    if note_of(m) if m.id not in changes else make_note(text, m.created_at):
                        candidates.append((m, "", redact(text)))  # counted, not noted
                continue
            self._known.add(m.id)
            folded.append(m.id)
            if m.ref:
                lg.refs[m.id] = m.ref
            if m.role == "tool":
                self._fold_tool(m)
                continue
            if m.role not in ("user", "assistant"):
                continue
            covered += 1
            first = m.created_at if first is None else min(first, m.created_at)
            last = m.created_at if last is None else max(last, m.created_at)
            text = prose(m) if m.id not in changes else changes[m.id] or ""
            # what is aimed at the assistant's future behaviour is never carried as a fact, a decision or a note:
            # a person's is kept as their ask, attributed; an assistant's is not kept at all
            said, asked = split_instructions(text)
            if asked and m.role == "user" and not (m.id in changes and changes[m.id] is None):
                lg.asks.append(Ask(seq=self._seq(), id=m.id, author=m.author or "someone",
                                   text=redact(_short(asked)), standing=True))
            if m.role == "assistant":
                if any(isinstance(p, ToolCallPart) for p in m.parts):
                    continue  # a step of the tool loop, not the reply
                if text.strip():
                    self._answer(m)
            else:
                self._fold_person(m, said, instructed=said != text)
            if m.id in changes and changes[m.id] is None:
                continue  # deleted: its words never become a note
            note = make_note(said, m.created_at) if m.id in changes or said != text else note_of(m)
            text = said
            if note:  # its words are counted without any secret in them (they travel with the ledger)
                candidates.append((m, note, redact(text)))
        lg.covered_messages, lg.first_at, lg.last_at = covered, first, last
        counted = [c for c in candidates if c[0].id not in lg.kept_fresh]
        fresh = dict(zip((id(c) for c in counted), self.ledger.stats.add(terms(text) for _, _, text in counted),
                         strict=True))
        for c in candidates:
            m, note, said = c
            if not note:  # kept verbatim: what it brought waits for its note
                lg.kept_fresh[m.id] = fresh[id(c)]
                continue
            new_words = lg.kept_fresh.pop(m.id) if m.id in lg.kept_fresh else fresh[id(c)]
            stored = bool(m.note) and m.id not in changes and note == m.note
            tokens = 0
            if stored and self.count is not None and m.note_tokens:
                # what ``notebook.note_cost`` counts, from the count made when the message was committed
                tokens = self.count(f"; [{refs.label(m.id, m.ref)}]") + m.note_tokens[0]
            clean = redact(note)
            if clean != note:  # a secret was removed: its stored count no longer applies
                tokens = 0
            self.ledger.notes.append(NoteEntry.model_construct(  # every field is computed here, nothing to check
                id=m.id, author=(m.author or "someone") if m.role == "user" else "assistant", at=m.created_at,
                text=clean, tokens=tokens, reply=m.role == "assistant", edited=m.id in changes, fresh=new_words,
                question=m.text.rstrip().endswith(("?", "？")) and not m.flags.addressed,
                reference=x.holds_reference(said)))
        if folded:
            self.ledger.last_folded = (self.ledger.last_folded + folded)[-LAST_FOLDED:]
            for ident in folded:  # folded without a note (deleted, chatter): nothing waits for it any more
                lg.kept_fresh.pop(ident, None)
        if len(lg.kept_fresh) > LAST_FOLDED:
            lg.kept_fresh = dict(list(lg.kept_fresh.items())[-LAST_FOLDED:])
        return self

    def _apply(self, changes: Mapping[str, str | None]) -> None:
        """What earlier generations carry follows later edits (current text) and deletions (no text)."""
        changes = {i: t for i, t in changes.items() if i not in self._applied or self._applied[i] != t}
        if not changes:
            return
        self._applied.update(changes)
        lg = self.ledger
        entries: list[Ask | Decision] = [*lg.asks, *lg.decisions]
        for entry in entries:
            if entry.id in changes:
                now = changes[entry.id] or ""
                entry.text = redact(_short(split_instructions(now)[1] if isinstance(entry, Ask) and entry.standing
                                           else now))
                if isinstance(entry, Ask):
                    entry.note = None
        lg.asks = [a for a in lg.asks if not (a.standing and a.id in changes and changes[a.id] is not None
                                              and not a.text)]  # edited into no longer asking it
        notes = []
        for n in lg.notes:
            if n.id not in changes:
                notes.append(n)
            elif changes[n.id] is not None:
                text = make_note(changes[n.id] or "", n.at)  # made from the redacted text
                if text:
                    notes.append(n.model_copy(update={"text": text, "edited": True, "tokens": 0}))
        lg.notes = notes

    def _fold_person(self, m: Message, text: str, *, instructed: bool = False) -> None:
        """A person's message: an ask when addressed to the assistant, a decision when it states one.
        ``instructed``: ``text`` is the message without its standing instructions to the assistant."""
        lg = self.ledger
        author = m.author or "someone"
        lg.participants[author] = lg.participants.get(author, 0) + 1
        if not text.strip() and (instructed or not m.text.strip()):
            return
        if m.flags.addressed:
            if x.SUPERSEDE.search(text):
                earlier = [a for a in lg.asks if a.author == author and a.status != "superseded" and not a.standing]
                if earlier:
                    earlier[-1].status, earlier[-1].closed_by = "superseded", m.id
            note = make_note(text, m.created_at) if instructed else note_of(m)
            ask = Ask(seq=self._seq(), id=m.id, author=author, text=redact(_short(text)),
                      note=redact(note) if note else note)
            reply = lg.answers.pop(m.id, None)
            if reply is not None:
                ask.status, ask.closed_by = "answered", reply
            lg.asks.append(ask)
        if is_decision(text if instructed else m.text):
            if x.REVERSAL.search(text):
                old = _best_match([d for d in lg.decisions if d.status == "active"], x.terms(text))
                if old is not None:
                    old.status, old.reversed_by = "reversed", m.id
            lg.decisions.append(Decision(seq=self._seq(), id=m.id, author=author, text=redact(_short(decided(text)))))

    def _answer(self, reply: Message) -> None:
        """A reply answers the asks of its turn (its ``source_ids``); one whose ask is not folded yet waits."""
        lg = self.ledger
        targets = list(reply.source_ids)
        if not targets:  # a reply stored without them: the latest open ask before it
            targets = [a.id for a in lg.asks if a.status == "open" and not a.standing][-1:]
        by_id = {a.id: a for a in lg.asks if not a.standing}
        for ask_id in targets:
            ask = by_id.get(ask_id)
            if ask is None:
                lg.answers[ask_id] = reply.id
            elif ask.status == "open":
                ask.status, ask.closed_by = "answered", reply.id
        if len(lg.answers) > LAST_FOLDED:
            lg.answers = dict(list(lg.answers.items())[-LAST_FOLDED:])

    def _fold_tool(self, m: Message) -> None:
        for part in m.parts:
            if not isinstance(part, ToolResultPart) or part.name != RECORD_STATE:
                continue
            if part.data is not None:
                entries = part.data
            elif ACCEPTED_MARK in part.content:  # written before entries were stored as data
                raw = part.content.split(ACCEPTED_MARK, 1)[1].splitlines()[0]
                try:
                    entries = json.loads(raw)
                except ValueError:
                    continue
            else:
                continue
            for i, e in enumerate(entries):
                if is_instruction(e["text"]):
                    continue  # recorded before the tool refused instructions
                kind = e.get("kind", "fact")
                for ident, ref in zip(e["evidence"], e.get("refs") or [], strict=False):
                    if ref:
                        self.ledger.refs[ident] = ref
                self.ledger.model_facts.append(ModelFact(
                    seq=self._seq(), key=f"{m.id}#{i}", evidence_id=e["evidence"][0],
                    evidence_hash=e.get("hash", ""), text=redact(_short(e["text"], 240)),
                    kind=kind if kind in ("fact", "plan_step", "decision") else "fact"))

    def evict(self) -> LedgerBuilder:
        """Apply the caps by value: open asks before answered ones before superseded ones; newer first within."""
        lg, caps = self.ledger, self.caps
        rank = {"open": 2, "answered": 1, "superseded": 0}
        lg.asks = _keep(lg.asks, caps.asks, lambda a: (rank[a.status], a.seq))
        lg.decisions = _keep(lg.decisions, caps.decisions, lambda d: (d.status == "active", d.seq))
        lg.model_facts = _keep(lg.model_facts, caps.model_facts, lambda f: (f.seq,))
        return self

    def build(self) -> Ledger:
        self.ledger.stats.bound()
        return self.ledger


def _best_match(entries: list[Decision], words: set[str]) -> Decision | None:
    """The decision a reversal most likely refers to: shared words weighted by rarity, newest on ties."""
    term_sets = [x.terms(e.text) for e in entries]
    freq: dict[str, int] = {}
    for t in term_sets:
        for w in t & words:
            freq[w] = freq.get(w, 0) + 1
    best, best_score = None, 0.0
    for i in range(len(entries) - 1, -1, -1):
        shared = words & term_sets[i]
        score = sum(1.0 / freq[w] for w in shared)
        if len(shared) >= 2 and score >= 1.0 and score > best_score:
            best, best_score = entries[i], score
    return best


_E = TypeVar("_E", bound=_Entry)


def _keep(entries: list[_E], cap: int, value: Callable[[_E], tuple[int, ...]]) -> list[_E]:
    """At most ``cap`` entries, the most valuable kept, in their original order."""
    if len(entries) <= cap:
        return entries
    kept = {id(e) for e in sorted(entries, key=value, reverse=True)[:cap]}
    return [e for e in entries if id(e) in kept]


def load_ledger(raw: Mapping[str, Any]) -> Ledger:
    """A stored ledger (its JSON); one written by an earlier version (v1) is carried over, its facts becoming
    notes."""
    if int(raw.get("v", 1) or 1) >= LEDGER_VERSION:
        return Ledger.model_validate(raw)
    old = dict(raw)
    asks = [{**a, "status": "answered" if a.get("status") == "resolved" else a.get("status", "open")}
            for a in old.get("asks", []) or []]
    notes = [NoteEntry(id=f["evidence_id"], at=float(old.get("watermark", 0.0) or 0.0), text=f["text"]).model_dump()
             for f in old.get("facts", []) or [] if f.get("origin", "thread") == "thread"]
    return Ledger.model_validate({"generation": old.get("generation", 0), "covered_messages":
                                  old.get("covered_messages", 0), "next_seq": old.get("next_seq", 0), "asks": asks,
                                  "decisions": old.get("decisions", []), "notes": notes,
                                  "participants": old.get("participants", {})})
