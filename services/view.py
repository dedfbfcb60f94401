"""The view: a pure function that renders ledger + narrative into the handoff message text.

Byte-for-byte stable for the same inputs: fixed section order, fixed formats, and deterministic
eviction under the token cap (lowest-priority section first, oldest line first, ties by key).
Every line derived from a message carries that message's id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .ledger import Ledger

HEADER = "[Threadkeeper handoff"


@dataclass(frozen=True)
class NarrativeLine:
    text: str
    source_ids: tuple[str, ...]


@dataclass(frozen=True)
class Narrative:
    lines: tuple[NarrativeLine, ...] = ()
    strategy: str = "extractive"


@dataclass
class _Line:
    text: str
    ids: tuple[str, ...]
    order: tuple[int, str]
    tokens: int = 0


@dataclass
class _Section:
    title: str
    evict_rank: int
    """Lower ranks are evicted first; the current ask (rank 99) is never evicted."""
    lines: list[_Line] = field(default_factory=list)


@dataclass(frozen=True)
class RenderedHandoff:
    text: str
    source_ids: list[str]
    evicted_lines: int


def _sections(ledger: Ledger, narrative: Narrative, suspects: Mapping[str, str]) -> list[_Section]:
    current = _Section("", 99)
    if ledger.current_ask:
        a = ledger.current_ask
        current.lines.append(_Line(f"Current ask [{a.id}] {a.author}: {a.text}", (a.id,), (a.seq, a.id)))
    open_asks = _Section("Open asks:", 6)
    closed = _Section("Resolved or superseded asks (closed: do not act on them):", 2)
    for a in ledger.asks:
        if a.status == "open":
            open_asks.lines.append(_Line(f"- [ask {a.id}] {a.author}: {a.text}", (a.id,), (a.seq, a.id)))
        else:
            closed.lines.append(_Line(f"- [{a.status} by {a.closed_by}; ask {a.id}] {a.author}: {a.text}",
                                      (a.id, a.closed_by or a.id), (a.seq, a.id)))
    decisions = _Section("Decisions:", 5)
    suspect = _Section("Suspect (the message this came from was edited or deleted; confirm before relying on it):", 7)
    for d in ledger.decisions:
        if d.id in suspects:
            suspect.lines.append(_Line(f"- SUSPECT [decision {d.id}] {d.author}: {d.text} ({suspects[d.id]})",
                                       (d.id,), (d.seq, d.id)))
        elif d.status == "reversed":
            decisions.lines.append(_Line(f"- [reversed by {d.reversed_by}; decision {d.id}] {d.author}: {d.text}",
                                         (d.id, d.reversed_by or d.id), (d.seq, d.id)))
        else:
            decisions.lines.append(_Line(f"- [decision {d.id}] {d.author}: {d.text}", (d.id,), (d.seq, d.id)))
    facts = _Section("Facts and constraints:", 4)
    for f in ledger.facts:
        label = f"{f.kind} {f.evidence_id}" + (" by model" if f.origin == "model" else "")
        if f.evidence_id in suspects:
            suspect.lines.append(_Line(f"- SUSPECT [{label}] {f.text} ({suspects[f.evidence_id]})",
                                       (f.evidence_id,), (f.seq, f.key)))
        else:
            facts.lines.append(_Line(f"- [{label} #{f.evidence_hash}] {f.text}", (f.evidence_id,), (f.seq, f.key)))
    artifacts = _Section("Artifacts:", 3)
    said = "\n".join(line.text for sec in (current, open_asks, closed, decisions, suspect, facts) for line in sec.lines)
    for art in ledger.artifacts:
        values = [v for v in art.values if v not in said]
        if not values:
            continue
        art = art.model_copy(update={"values": values})
        artifacts.lines.append(_Line(f"- [{art.source_id}] {', '.join(art.values)}", (art.source_id,),
                                     (art.seq, art.source_id)))
    people = _Section("", 1)
    if ledger.participants:
        ranked = sorted(ledger.participants.items(), key=lambda kv: (-kv[1], kv[0]))
        people.lines.append(_Line("Participants: " + ", ".join(f"{n} ({c})" for n, c in ranked[:30]), (), (0, "")))
    story = _Section(f"Narrative ({narrative.strategy}):", 0)
    for i, line in enumerate(narrative.lines):
        ids = ",".join(line.source_ids)
        story.lines.append(_Line(f"- [{ids}] {line.text}" if ids else f"- {line.text}", line.source_ids, (i, ids)))
    return [current, open_asks, closed, decisions, suspect, facts, artifacts, people, story]


def render_handoff(ledger: Ledger, narrative: Narrative, suspects: Mapping[str, str], *, cap_tokens: int,
                   count: Callable[[str], int]) -> RenderedHandoff:
    """Render within ``cap_tokens`` (as counted by ``count``), evicting deterministically."""
    head = (f"{HEADER} · generation {ledger.generation} · covers {ledger.covered_messages:,} earlier messages] "
            "This stands in for the earlier part of the thread.")
    sections = _sections(ledger, narrative, suspects)
    for section in sections:
        for line in section.lines:
            line.tokens = count(line.text) + 1
    fixed = count(head) + sum(count(s.title) + 1 for s in sections if s.title and s.lines)
    total = fixed + sum(line.tokens for s in sections for line in s.lines)
    evicted = 0
    for section in sorted((s for s in sections if s.evict_rank < 99), key=lambda s: s.evict_rank):
        if total <= cap_tokens:
            break
        ordered = sorted(section.lines, key=lambda line: line.order)
        drop = 0
        while total > cap_tokens and drop < len(ordered):
            total -= ordered[drop].tokens
            drop += 1
        if drop:
            gone = {id(line) for line in ordered[:drop]}
            section.lines = [line for line in section.lines if id(line) not in gone]
            evicted += drop
            if not section.lines and section.title:
                total -= count(section.title) + 1
    out = [head]
    ids: list[str] = []
    for section in sections:
        if not section.lines:
            continue
        if section.title:
            out.append(section.title)
        for line in section.lines:
            out.append(line.text)
            ids.extend(line.ids)
    text = "\n".join(out)
    if total > cap_tokens:  # only the current ask is left and it alone is too long
        text = _cut(text, cap_tokens, count)
    return RenderedHandoff(text=text, source_ids=list(dict.fromkeys(i for i in ids if i)), evicted_lines=evicted)


def _cut(text: str, cap_tokens: int, count: Callable[[str], int]) -> str:
    tokens = max(1, count(text))
    keep = max(40, int(len(text) * cap_tokens / tokens) - 60)
    return text[:keep] + f"\n[… {len(text) - keep:,} characters cut to fit the handoff cap …]"
