"""The notebook: which notes a handoff carries, chosen by the information they add per token.

Every folded message is a candidate note (see :mod:`services.notes`); so is every note the previous
handoff carried. Candidates are ranked by the information they add per token: the rarity of their
words in the thread so far (BM25's inverse document frequency over every message ever folded, carried
from one handoff to the next), with full credit only for the words a message brought first (an identifier's
parts among them: a URL brings its id, not the host the thread has seen), numbers and identifiers counting double,
discounted for words that notes already chosen cover (novelty), and for age (a half-life in days). A note is shown
whole (a clause keeps its entity, object, number and date), never cut down to a few words: a handoff carries fewer
notes that each say what was said. Selection is greedy and deterministic (ties by time, then id), so the same inputs
always give the same notes; a note that is not chosen is evicted, which is the only way knowledge leaves the handoff.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field

from ..context import quote
from ..text import extract as x
from ..text import terms, word_parts

HALF_LIFE_DAYS = 120.0
"""A note's value halves over this many days of thread time (old knowledge yields to new only slowly)."""
ECHO_WEIGHT = 0.35
"""What a word counts for in a message that repeats it after someone else brought it up."""
QUESTION_WEIGHT = 0.5
"""A message that only asks counts for this much."""
COVERED_WEIGHT = 0.3
"""What a word already covered by a chosen note still counts for."""
REPLY_WEIGHT = 0.5
"""Replies of the assistant count for less than what people said: they mostly restate it."""
CONSTRAINT_WEIGHT = 1.3
"""Sentences stating a constraint (must, never, deadline, at most…) count for more."""
IDENTIFIER_WEIGHT = 2.0
"""A number or identifier (ticket key, SHA, URL, path, quantity, date) counts this many times a rare word:
it cannot be guessed back from the rest of the thread."""
IDENTIFIER_CHARS = 32
"""An identifier longer than this (a URL, a path) counts once more for each such length: none of it can be guessed
back, and the tokens it costs a note grow with it."""
CJK_PAIR_WEIGHT = 0.5
"""Text without spaces is ranked by overlapping character pairs; half a pair is about one character's worth."""
MAX_TERMS = 8_000
"""Term statistics carried between handoffs keep at most this many words (the most frequent)."""
DAY_HEADING_TOKENS = 6


class NoteEntry(BaseModel):
    """One note a handoff carries: what message ``id`` said, compressed."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    id: str
    author: str = ""
    at: float
    text: str
    tokens: int = 0
    """Tokens it adds to a line of its author's notes (:func:`note_cost`); 0: not counted yet."""
    reply: bool = False
    """Written by the assistant."""
    edited: bool = False
    """Its message was edited after it was written; the note shows the current text."""
    fresh: list[str] = Field(default_factory=list)
    """Its words that no earlier folded message used: what this message brought to the thread."""
    question: bool = False
    """The message only asks (people asking each other); the information is in the answers."""
    reference: bool = False
    """Its message gives a reference (a link, a ticket, a commit, a path: :func:`services.text.extract.holds_reference`)."""


class TermStats(BaseModel):
    """How many folded messages use each word: what rarity is measured against."""

    model_config = ConfigDict(extra="ignore")
    docs: int = 0
    df: dict[str, int] = Field(default_factory=dict)

    def add(self, term_sets: Iterable[frozenset[str]]) -> list[list[str]]:
        """Count each set as one more message; returns, per set, its words no earlier message used. An identifier's
        parts (:func:`services.text.word_parts`) count as words of the message too: what a URL or a path brings is the
        part the thread has not seen (a dashboard's id, not its host), and that part is among the words returned."""
        fresh: list[list[str]] = []
        for t in term_sets:
            t = t | {p for w in t if is_identifier(w) for p in word_parts(w)}
            self.docs += 1
            fresh.append(sorted(w for w in t if w not in self.df))
            for w in t:
                self.df[w] = self.df.get(w, 0) + 1
        return fresh

    def bound(self, limit: int = MAX_TERMS) -> None:
        if len(self.df) > limit:
            kept = sorted(self.df.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
            self.df = dict(sorted(kept))

    def idf(self, term: str) -> float:
        df = self.df.get(term, 0)
        return math.log(1.0 + (self.docs - df + 0.5) / (df + 0.5))


is_identifier = re.compile(r"\d|[/@#]|^[a-z]+-\d").search
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]").search


def note_line(cited: str, author: str, text: str, *, edited: bool = False) -> str:
    """A note on a line of its own (an edited message's note always is); ``cited``: its ``#N`` or id."""
    mark = " (edited after it was written; current text)" if edited else ""
    return f"- {'SUSPECT ' if edited else ''}[{cited}] {author or 'someone'}{mark}: {quote(text)}"


def note_cost(entry: NoteEntry, count: Callable[[str], int], label: Callable[[str], str] = str) -> int:
    """What a note adds to its author's line of the day: ``; [#N] text`` (``label`` gives how a message id is
    cited)."""
    if entry.edited:
        return count(note_line(label(entry.id), entry.author, entry.text, edited=True)) + 1
    return count(f"; [{label(entry.id)}] {entry.text}")


def author_cost(author: str, count: Callable[[str], int]) -> int:
    """What starting an author's line of the day costs: ``- author: ``, the quotation that holds the line's notes
    (one for the run, :func:`services.handoff.view`) and the line break."""
    return count(f"- {author}: “”") + 1


def whole_cost(entries: Iterable[NoteEntry], count: Callable[[str], int]) -> int:
    """At most what :func:`select` spends to take every one of ``entries``: each note with a day heading and its
    author's lead-in."""
    return sum((e.tokens or note_cost(e, count)) + DAY_HEADING_TOKENS + author_cost(e.author, count) for e in entries)


def day(at: float) -> str:
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%d")


@dataclass
class _Candidate:
    entry: NoteEntry
    terms: frozenset[str]
    weighted: list[tuple[str, float]]
    """Each word of the note with its rarity, discounted when the message only repeated it."""
    weight: float
    tokens: int
    day: str
    line: tuple[str, str] | None
    """The (day, author) line the note joins; None: it stands on a line of its own."""


@dataclass(frozen=True)
class Selection:
    notes: list[NoteEntry]
    """Chosen notes, in thread order."""
    evicted: int
    tokens: int
    picked: list[str] = field(default_factory=list)
    """Ids in the order chosen, the most valuable first."""


def select(candidates: Sequence[NoteEntry], stats: TermStats, *, cap_tokens: int, now: float,
           count: Callable[[str], int], label: Callable[[str], str] = str) -> Selection:
    """The notes worth most within ``cap_tokens`` (day headings and author lead-ins included), by lazy greedy
    selection on the information each adds per token."""
    return Pool(candidates, stats, now=now, count=count, label=label).select(cap_tokens)


class Pool:
    """Candidate notes weighed once (their words' rarity, their kind, their age, what each costs), to choose among
    within one cap or several (a handoff chooses what it shows, then what it carries, from the same notes)."""

    def __init__(self, candidates: Sequence[NoteEntry], stats: TermStats, *, now: float,
                 count: Callable[[str], int], label: Callable[[str], str] = str) -> None:
        pool: list[_Candidate] = []
        idf: dict[str, float] = {}
        days_of: dict[int, str] = {}

        def rarity(t: str) -> float:
            base = idf.get(t)
            if base is None:
                kind = IDENTIFIER_WEIGHT * max(1.0, len(t) / IDENTIFIER_CHARS) if is_identifier(t) \
                    else CJK_PAIR_WEIGHT if not t.isascii() and _CJK(t) else 1.0
                base = idf[t] = stats.idf(t) * kind
            return base

        for entry in candidates:
            tokens = entry.tokens if entry.tokens > 0 else note_cost(entry, count, label=label)
            weight = REPLY_WEIGHT if entry.reply else 1.0
            if entry.question:
                weight *= QUESTION_WEIGHT
            if x.CONSTRAINT.search(entry.text):
                weight *= CONSTRAINT_WEIGHT
            weight *= 0.5 ** (max(0.0, (now - entry.at) / 86_400) / HALF_LIFE_DAYS)
            note_terms, fresh = terms(entry.text), frozenset(entry.fresh)
            weighted = [(t, rarity(t) if t in fresh else rarity(t) * ECHO_WEIGHT) for t in sorted(note_terms | fresh)]
            key = int(entry.at // 86_400)
            d = days_of.get(key) or days_of.setdefault(key, day(entry.at))
            pool.append(_Candidate(entry, note_terms, weighted, weight, tokens, d,
                                   None if entry.edited else (d, entry.author)))
        self.pool = pool
        self.authors = {author: author_cost(author, count) for author in {c.entry.author for c in pool}}
        self._gains = [sum(w for _, w in c.weighted) * c.weight for c in pool]
        """Per candidate, what it adds with nothing chosen yet (the first value of each, before its cost)."""

    def select(self, cap_tokens: int) -> Selection:
        """The notes worth most within ``cap_tokens``, by lazy greedy selection on the information each adds per
        token (what another chosen note said already counts for less)."""
        pool, authors = self.pool, self.authors
        covered: set[str] = set()
        days: set[str] = set()
        lines: set[tuple[str, str]] = set()

        def cost(c: _Candidate) -> int:
            extra = 0 if c.day in days else DAY_HEADING_TOKENS
            if c.line is not None and c.line not in lines:
                extra += authors[c.entry.author]
            return c.tokens + extra

        def value(c: _Candidate) -> float:
            gain = sum(w * COVERED_WEIGHT if t in covered else w for t, w in c.weighted)
            return gain * c.weight / cost(c)

        chosen: list[NoteEntry] = []
        said: set[tuple[str, str]] = set()
        picked: list[str] = []
        used = 0
        heap = [(-gain / cost(c), c.entry.at, c.entry.id, i) for i, (c, gain) in enumerate(zip(pool, self._gains,
                                                                                               strict=True))]
        heapq.heapify(heap)
        while heap and used < cap_tokens:
            _, at, ident, i = heapq.heappop(heap)
            c = pool[i]
            current = value(c)
            if heap and current < -heap[0][0] - 1e-12:
                heapq.heappush(heap, (-current, at, ident, i))
                continue
            if current <= 0 or (c.entry.author, c.entry.text) in said:
                continue  # nothing of value, or the same person saying the same thing again
            spend = cost(c)
            if used + spend > cap_tokens:
                continue
            entry = c.entry if c.entry.tokens == c.tokens else c.entry.model_copy(update={"tokens": c.tokens})
            chosen.append(entry)
            picked.append(ident)
            used += spend
            covered |= c.terms
            said.add((c.entry.author, c.entry.text))
            days.add(c.day)
            if c.line is not None:
                lines.add(c.line)
        chosen.sort(key=lambda e: (e.at, e.id))
        return Selection(chosen, len(pool) - len(chosen), used, picked)
