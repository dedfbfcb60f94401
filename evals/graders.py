"""Deterministic graders: does the final context keep each probe, and does it present stale items as current?

Generated-thread probes (:func:`grade`) are read against the handoff format: lines such as
``Current ask [ID] alice: ...``, ``- [ask ID] bob, open: ...`` / ``answered`` / ``superseded by
[NID]``, ``- [decision ID] alice, reversed by [RID]: ...``, ``- SUSPECT [ID] dan ...`` and compressed notes
``- alice: [ID] went skiing Whistler; [ID2] ...``. An id is *cited* when it is a whole token of a
bracketed reference on a line (see :func:`cited_ids`).

* ``identifier``: the exact answer string is in the context. ``decision``: the same, or the answer's
  content words, in order and adjacent once function words are dropped, on one line (notes drop
  function words: "go with Kafka for billing" is kept as "go Kafka billing").
* ``open_ask``: kept when an ask line cites it as open or answered (or as the current ask), or a note
  citing it carries the answer's words, or it is
  there verbatim, and no ask line says it was superseded.
* ``constraint``: the evidence message is cited or there verbatim. ``pinned``: there verbatim.
* ``superseded_ask`` / ``resolved_ask`` / ``reversed_decision``: kept when what closed it (the second
  evidence message) is there verbatim or cited. A **supercheckpoint error** is counted when the old
  item is still presented as current (listed as an open or current ask, or an active decision line
  without "reversed by", or present verbatim) while what closed it is absent.
* ``suspect`` with ``change: "edited"``: kept when a SUSPECT line cites the message; an error when its
  old text is on a line without that mark (verbatim, or restated as a note: see :func:`echoes`). With
  ``change: "deleted"``: kept when the deleted text is nowhere in the context (verbatim or restated); a
  deleted message must not be presented, so it is an error when it is.

Benchmark questions (public datasets, see ``evals.benchmarks``) are graded by :func:`grade_questions`:
their evidence messages must be present (verbatim, or cited by id in a handoff line), and the answer's
content words are looked up in the context; keep-newest at the same token spend is the reference.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from threadkeeper.services.context import HANDOFF_HEADER, REF, ContextEntry

from .strategies import SUMMARY_MARK


@dataclass(frozen=True)
class ProbeResult:
    id: str
    kind: str
    kept: bool
    error: bool


_ASK_LINE = re.compile(r"^\s*(?:-\s*\[ask\s+([^\]\s,;]+)\]|Current ask\s*\[([^\]\s,;]+)\])([^:]*):")
_DECISION_LINE = re.compile(r"^\s*-\s*\[decision\s+([^\]\s,;]+)\]([^:]*):")
_OPEN = re.compile(r",\s*open\s*$")
_ANSWERED = re.compile(r",\s*answered\b")
_TOKEN = re.compile(r"[^\W_](?:[\w'’./:@#%+-]*[^\W_%])?%?")
FUNCTION_WORDS = frozenset("""
a an the to of in on at by as is am are be it its we us i me my you he she they them this that these those
and or but so if for with from into onto about than then there here was were will would can could should
do does did have has had been being not no yes ok okay just really actually like well yeah lol please pls
btw also very too some any all our your their his her what which who when where how why let's lets we're
it's that's there's i'm
el la los las un una unos unas de del al y o que en con por para es son fue ser se lo le les su sus mi
nuestro ya muy pero como más este esta eso
der die das den dem des ein eine einen einem einer und oder zu im am vom zum zur mit für von auf ist sind
war wir ich du sie es nicht noch schon auch bei aus wie dass bitte doch
""".split())
"""Function and filler words in English, Spanish and German: what compressed notes drop."""


def content_sequence(text: str) -> list[str]:
    """The words of ``text`` in order, lowercased, without function words (identifiers and numbers kept)."""
    return [w for w in (m.group(0).lower() for m in _TOKEN.finditer(text)) if w not in FUNCTION_WORDS]


def compressed_in(answer: str, line: str) -> bool:
    """Whether ``answer``'s content words occur in ``line`` in order and adjacent, function words dropped."""
    want, have = content_sequence(answer), content_sequence(line)
    if not want:
        return False
    return any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def echoes(text: str, line: str) -> bool:
    """Whether ``line`` restates ``text``, maybe compressed: every number or identifier of it, and at least
    three quarters of its content words in order (notes may drop a few more words than we do)."""
    want, have = content_sequence(text), content_sequence(line)
    if not want:
        return False
    if any(w not in have for w in want if any(c.isdigit() for c in w)):
        return False
    prev = [0] * (len(have) + 1)
    for w in want:
        row = [0] * (len(have) + 1)
        for j, h in enumerate(have, start=1):
            row[j] = prev[j - 1] + 1 if w == h else max(prev[j], row[j - 1])
        prev = row
    return prev[-1] * 4 >= len(want) * 3


def grade(probes: Sequence[dict[str, Any]], context_texts: Sequence[str],
          originals: dict[str, str]) -> list[ProbeResult]:
    """Grade generated-thread probes against the final context's texts; ``originals`` maps id → text."""
    full = "\n".join(context_texts)
    lines = full.splitlines()
    refs = [cited_ids(line) for line in lines]
    asks = [(m.group(1) or m.group(2), m.group(3), m.group(2) is not None)
            for m in (_ASK_LINE.match(line) for line in lines) if m]
    decisions = [(m.group(1), m.group(2)) for m in (_DECISION_LINE.match(line) for line in lines) if m]

    def cited(mid: str) -> bool:
        return any(mid in r for r in refs)

    def verbatim(mid: str) -> bool:
        text = originals.get(mid, "")
        return bool(text) and text in full

    def present(mid: str) -> bool:
        return verbatim(mid) or cited(mid)

    def shown(text: str, *, unless: str | None = None) -> bool:
        """``text`` is on a line (verbatim or compressed), not counting lines that contain ``unless``."""
        return bool(text) and any((text in line or echoes(text, line)) and not (unless and unless in line)
                                  for line in lines)

    def listed_open(mid: str) -> bool:
        return any(aid == mid and (current or _OPEN.search(status) is not None) for aid, status, current in asks)

    def listed_active_decision(mid: str) -> bool:
        return any(did == mid and "reversed by" not in status for did, status in decisions)

    out = []
    for p in probes:
        kind, ev, answer = p["kind"], p.get("evidence") or [], str(p.get("answer") or "")
        kept = error = False
        if kind == "identifier":
            kept = bool(answer) and answer in full
        elif kind == "decision":
            kept = bool(answer) and (answer in full or any(compressed_in(answer, line) for line in lines))
        elif kind == "open_ask":
            superseded = any(aid == ev[0] and "superseded by" in status for aid, status, _ in asks)
            listed = any(aid == ev[0] and (current or _OPEN.search(status) or _ANSWERED.search(status))
                         for aid, status, current in asks)
            noted = any(ev[0] in r and (answer in line or compressed_in(answer, line)) for line, r in zip(lines, refs))
            kept = (listed or verbatim(ev[0]) or noted) and not superseded
        elif kind == "constraint":
            kept = present(ev[0])
        elif kind == "pinned":
            kept = verbatim(ev[0])
        elif kind in ("superseded_ask", "resolved_ask", "reversed_decision"):
            kept = present(ev[1])
            stale = listed_open(ev[0]) if kind != "reversed_decision" else listed_active_decision(ev[0])
            error = (stale or verbatim(ev[0])) and not kept
        elif kind == "suspect":
            old = originals.get(ev[0]) or answer
            if p.get("change") == "deleted":
                error = bool(old) and old in full or shown(old)
                kept = not error
            else:
                kept = any("SUSPECT" in line and ev[0] in r for line, r in zip(lines, refs))
                error = shown(old, unless="SUSPECT")
        out.append(ProbeResult(p["id"], kind, kept, error))
    return out


# Benchmark questions ---------------------------------------------------------------------------------------

HANDOFF_MARKS = (HANDOFF_HEADER, SUMMARY_MARK)
"""How a generated stand-in for earlier messages begins: the product's handoff, and the baselines' summaries."""
STOPWORDS = frozenset("""
the and for are but not you your yours with that this these those from have has had was were will would can
could should shall may might must did does doing done been being into onto over under about after before
than then them they their theirs there here what when where which who whom whose why how all any both each
few more most other some such only own same just also very too our ours out off she her hers him his its
itself myself yourself himself herself ourselves themselves because while during again further once until
upon yes one
""".split())
ANSWER_SHARE = 0.7
"""A text holds an answer when it has at least this share of the answer's content words (numbers included)."""
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_WORD = re.compile(r"[a-z0-9]+")
_DAY_LINE = re.compile(r"^\d{4}-\d{2}-\d{2}:?$")
_NEXT_NOTE = re.compile(r";\s+(?=\[)")
"""Where one note ends and the next begins on a handoff line (``- ana: [#1] …; [#2] …``)."""


@dataclass(frozen=True)
class QuestionResult:
    """How one benchmark question fared in a context, and in the baselines at the same spend.

    The content grades (``kept``, ``newest``, ``bm25``, ``recent_bm25``, ``bm25_neighbours``, ``without_recall``) mean something only
    for an ``answerable`` question: one whose evidence messages' own text holds its answer."""

    id: str
    kind: str
    answerable: bool
    kept: bool
    """The answer is in what the context holds for the evidence (verbatim messages, lines citing them)."""
    cited: bool
    """Every evidence message is in the context verbatim or cited by a handoff line (whatever the line says)."""
    newest: bool
    """The answer is in the evidence among the newest whole messages that fit the same spend."""
    bm25: bool | None = None
    """Asked questions: the answer is in the evidence among a plain BM25 pick of whole messages at the same spend."""
    recent_bm25: bool | None = None
    """Asked questions: the same for the context's own verbatim messages plus a BM25 fill of the rest."""
    bm25_neighbours: bool | None = None
    """Asked questions: the same for the BM25 pick with each hit's neighbours (the strongest simple pick)."""
    without_recall: bool | None = None
    """Asked questions: the answer is in what the context holds for the evidence without its recalled messages."""


def expand(entries: Sequence[ContextEntry], references: Mapping[str, str]) -> list[ContextEntry]:
    """The entries with every short reference (``#N``) written out as the message id it stands for, so a
    line is graded by the ids it actually cites."""
    def written(text: str) -> str:
        return REF.sub(lambda m: references.get(m.group(0), m.group(0)), text)
    return [replace(e, text=written(e.text)) for e in entries]


def is_handoff(entry: ContextEntry) -> bool:
    return entry.text.startswith(HANDOFF_MARKS)


def cited_ids(text: str) -> set[str]:
    """Every token inside a ``[...]`` reference on a line of ``text``, split at commas, semicolons and spaces."""
    out: set[str] = set()
    for line in text.splitlines():
        for group in _BRACKET.findall(line):
            out.update(t for t in re.split(r"[,;\s]+", group) if t)
    return out


def present_ids(entries: Sequence[ContextEntry]) -> set[str]:
    """Message ids a context holds: verbatim (a non-handoff entry's sources, recalled messages included) or
    cited by a handoff line. The system prompt cites nothing."""
    out: set[str] = set()
    for entry in entries:
        if is_handoff(entry):
            out |= cited_ids(entry.text)
        else:
            out.update(entry.source_ids)
    return out


def content_words(text: str) -> set[str]:
    """Lowercase words of three or more letters, or with a digit, that are not stopwords."""
    return {w for w in _WORD.findall(text.lower())
            if (len(w) >= 3 or any(c.isdigit() for c in w)) and w not in STOPWORDS}


def holds(answer: set[str], text: str) -> bool:
    """Whether ``text`` has at least :data:`ANSWER_SHARE` of the ``answer``'s content words."""
    return bool(answer) and len(answer & content_words(text)) >= ANSWER_SHARE * len(answer) - 1e-9


def held_text(entries: Sequence[ContextEntry], ids: Iterable[str]) -> str:
    """What a context holds for the messages ``ids``: each entry that is one of them verbatim, and, in an entry
    that stands in for several messages (a handoff, a summary, a recall block), each note or line that cites one
    of them, with the day heading and the author it sits under.

    This is what a reader of the context has for those messages: a line that cites a message in three words
    holds three words of it."""
    wanted = set(ids)
    out: list[str] = []
    for entry in entries:
        if is_handoff(entry) or entry.role == "system":
            day = ""
            for line in entry.text.splitlines():
                if _DAY_LINE.match(line.strip()):
                    day = line.strip()
                    continue
                parts = _NEXT_NOTE.split(line)
                lead = parts[0][:parts[0].find("[")] if "[" in parts[0] else ""  # "- ana: ", before the first note
                for i, part in enumerate(parts):
                    if cited_ids(part) & wanted:
                        out.append(f"{day} {lead if i else ''}{part}".strip())
        elif wanted & set(entry.source_ids):
            out.append(entry.text)
    return "\n".join(out)


def keep_newest(messages: Sequence[tuple[str, int]], spend: int) -> list[str]:
    """Ids of the newest ``(id, tokens)`` messages whose tokens sum to at most ``spend``, oldest first."""
    kept: list[str] = []
    used = 0
    for mid, tokens in reversed(messages):
        if used + tokens > spend:
            break
        kept.append(mid)
        used += tokens
    kept.reverse()
    return kept


@dataclass(frozen=True)
class Question:
    """A benchmark question with what grading it needs: its answer's content words, and whether its evidence
    messages' own text holds them."""

    id: str
    kind: str
    text: str
    evidence: tuple[str, ...]
    answer: frozenset[str]
    answerable: bool

    @classmethod
    def of(cls, q: Mapping[str, Any], texts: Mapping[str, str]) -> Question:
        evidence = tuple(q.get("evidence") or [])
        answer = frozenset(content_words(str(q.get("answer") or "")))
        own = "\n".join(texts.get(e, "") for e in evidence)
        return cls(str(q["id"]), str(q.get("kind") or "other"), str(q.get("question") or ""), evidence, answer,
                   bool(evidence) and holds(set(answer), own))

    def kept_in(self, entries: Sequence[ContextEntry]) -> bool:
        return self.answerable and holds(set(self.answer), held_text(entries, self.evidence))

    def kept_among(self, chosen: Iterable[str], texts: Mapping[str, str]) -> bool:
        """Whether whole messages ``chosen`` (ids) hold the answer in the evidence among them."""
        picked = set(chosen)
        return self.answerable and holds(set(self.answer), "\n".join(texts[e] for e in self.evidence if e in picked))


def grade_questions(questions: Sequence[dict[str, Any]], entries: Sequence[ContextEntry],
                    messages: Sequence[tuple[str, str, int]], spend: int, *,
                    standing: Sequence[ContextEntry] | None = None, pool: Any = None) -> list[QuestionResult]:
    """Grade each question against a context and against the baselines at ``spend`` tokens.

    ``messages`` are the thread's ``(id, text, tokens)`` in order; ``spend`` is the tokens the graded context
    used (its system prompt and the question excluded). For a context built for the question (``pool``, an
    :class:`evals.baselines.MessagePool` over the same messages): ``standing`` is that context without its
    recalled messages, and the two BM25 baselines are graded too.
    """
    texts = {mid: text for mid, text, _ in messages}
    present = present_ids(entries)
    newest = keep_newest([(mid, tokens) for mid, _, tokens in messages], spend)
    out = []
    for raw in questions:
        q = Question.of(raw, texts)
        bm25 = recent = around = None
        if pool is not None:
            own = [i for e in entries if e.role != "system" and not is_handoff(e) for i in e.source_ids if i in texts]
            bm25 = q.kept_among(pool.bm25(q.text, spend), texts)
            recent = q.kept_among(pool.bm25(q.text, spend, first=own), texts)
            around = q.kept_among(pool.bm25(q.text, spend, neighbours=True), texts)
        out.append(QuestionResult(q.id, q.kind, q.answerable, q.kept_in(entries),
                                  bool(q.evidence) and all(e in present for e in q.evidence),
                                  q.kept_among(newest, texts), bm25, recent, around,
                                  None if standing is None else q.kept_in(standing)))
    return out
