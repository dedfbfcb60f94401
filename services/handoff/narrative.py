"""The narrative layer of a handoff: written by the summarizer model when one is configured.

:meth:`Summarizer.handoff_narrative` gives the model the previous handoff's narrative together with the
messages folded now, so the narrative accumulates across generations, and validates what comes back:
every cited id must exist in what it was given, every number and identifier must appear there, a reply
cut off by the output limit is trimmed to whole lines, and lines past the cap are dropped. Any failure
(error, timeout, nothing usable) keeps the previous narrative unchanged, so a compaction never depends
on a model call; the notes layer is there either way.

:func:`extractive` (the most informative sentences, each with its source id) serves the baseline
strategies of the continuity eval and the visible-thread memory.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from threadkeeper.persistence import Message

from ..context import quote, refs
from ..models import HANDOFF_PROMPT, HANDOFF_UPDATE, ModelClient, ModelError, Tokenizer
from ..safety import holds_secret, is_instruction, redact, rejected, secrets_in
from ..text import extract as x
from .ledger import NarrativeEntry, prose
from .view import Narrative, NarrativeLine

log = logging.getLogger("threadkeeper.narrative")

_CAPITALIZED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:[A-Z][a-z]+)*\b")
_LINE = re.compile(r"^\s*[-*•]\s*(?:\[([^\]]+)\]\s*)?(.+?)\s*$")


def _candidates(messages: Sequence[Message]) -> list[tuple[int, int, Message, str]]:
    out = []
    for mi, m in enumerate(messages):
        if m.flags.runtime or m.role not in ("user", "assistant") or m.flags.handoff:
            continue
        for si, sentence in enumerate(x.sentences(prose(m))):
            if not is_instruction(sentence):
                out.append((mi, si, m, sentence))
    return out


def extractive(messages: Sequence[Message], cap_tokens: int, tokenizer: Tokenizer, *,
               avoid: str = "") -> Narrative:
    """The most informative sentences within ``cap_tokens``, in thread order, each with its source id.

    Sentences already contained in ``avoid`` (the rendered ledger) are skipped.
    """
    candidates = [c for c in _candidates(messages) if c[3] not in avoid]
    if not candidates or cap_tokens <= 0:
        return Narrative((), "extractive")
    doc_freq: Counter[str] = Counter()
    term_sets = []
    for _, _, _, sentence in candidates:
        t = x.terms(sentence)
        term_sets.append(t)
        doc_freq.update(t)
    n = len(candidates)
    scored = []
    for (mi, si, m, sentence), t in zip(candidates, term_sets, strict=True):
        found = sum(1 for a in x.artifacts(prose(m)) if a.value in sentence)
        score = 3.0 * found + 1.0 * min(3, len(x.NUMBER.findall(sentence)))
        score += 0.7 * min(4, len(_CAPITALIZED.findall(sentence)))
        score += 2.5 if x.DECISION.search(sentence) else 0.0
        score += 2.0 if x.ASK.search(sentence) or sentence.endswith("?") else 0.0
        score += 1.5 if x.CONSTRAINT.search(sentence) else 0.0
        if t:
            score += sum(math.log(n / doc_freq[w]) for w in t) / (len(t) ** 0.5) * 0.5
        if m.role == "assistant":
            score *= 0.6
        if len(sentence.split()) < 5:
            score *= 0.5
        scored.append((-round(score, 6), mi, si, m, sentence))
    scored.sort(key=lambda s: (s[0], s[1], s[2]))
    chosen: list[tuple[int, int, NarrativeLine]] = []
    seen: list[set[str]] = []
    used = 0
    for _, mi, si, m, sentence in scored:
        t = x.terms(sentence)
        if any(t and len(t & s) / len(t | s) > 0.8 for s in seen):
            continue
        person = bool(m.author) and m.role == "user"
        room = 300 - (len(m.author or "") + 4 if person else 0)  # a line of at most 300 characters
        said = sentence if len(sentence) <= room else sentence[:room - 1] + "…"
        text = f"{m.author}: {quote(said)}" if person else said  # a person's words, quoted whole
        cost = tokenizer.count(text) + len(m.id) // 3 + 4
        if used + cost > cap_tokens:
            continue
        used += cost
        seen.append(t)
        chosen.append((mi, si, NarrativeLine(redact(text), (m.id,))))
    chosen.sort(key=lambda c: (c[0], c[1]))
    return Narrative(tuple(line for _, _, line in chosen), "extractive")


def _trim(text: str, cut: bool) -> str:
    """A reply cut off by the output limit loses its last, unfinished line."""
    if not cut:
        return text
    lines = text.rstrip("\n").split("\n")
    return "\n".join(lines[:-1]) if len(lines) > 1 else ""


class Summarizer:
    """Writes the narrative: one LLM call (chunked when needed) or the extractive fallback."""

    def __init__(self, model: ModelClient | None, tokenizer: Tokenizer, *, window_tokens: int,
                 timeout_seconds: float = 30.0) -> None:
        self.model = None if model is None or model.offline else model
        self.tokenizer = tokenizer
        self.window_tokens = window_tokens
        self.timeout_seconds = timeout_seconds

    async def narrate(self, messages: Sequence[Message], cap_tokens: int, *, avoid: str = "") -> Narrative:
        """The narrative of ``messages`` within ``cap_tokens``; ``avoid`` is text the handoff already says."""
        if self.model is None or cap_tokens < 32:
            return extractive(messages, cap_tokens, self.tokenizer, avoid=avoid)
        try:
            narrative = await self._llm(messages, cap_tokens)
        except (ModelError, ValueError) as exc:
            log.warning("summarizer failed, using the extractive narrative: %s", exc)
            return extractive(messages, cap_tokens, self.tokenizer, avoid=avoid)
        return narrative

    async def handoff_narrative(self, previous: Sequence[NarrativeEntry], messages: Sequence[Message],
                                cap_tokens: int, *, use_model: bool = True,
                                label: Callable[[str], str] = str) -> tuple[Narrative, list[NarrativeEntry]]:
        """The narrative of the previous narrative plus ``messages``, validated, and the entries to carry.

        Without a model, when the model fails, or for a preview (``use_model=False``: previews never pay
        for a model call), the previous narrative is carried unchanged.
        """
        kept = list(previous)
        if self.model is None:
            return Narrative((), "notes"), kept
        if not use_model:
            return Narrative((), "notes", "preview: the narrative is carried as it is (no summarizer call)"), kept
        if cap_tokens < 32:
            return Narrative((), "notes", "no room for a narrative"), kept
        lines = self._transcript(messages)
        if not lines and not previous:
            return Narrative((), "notes"), kept
        earlier = "\n".join(f"- [{','.join(label(i) for i in e.source_ids)}] {e.text}" if e.source_ids
                            else f"- {e.text}" for e in previous)
        valid_ids = {m.id: m.id for m in messages} | {i: i for e in previous for i in e.source_ids}
        valid_ids |= {refs.label(m.id, m.ref): m.id for m in messages} | {label(i): i for i in list(valid_ids)}
        secrets = self._secrets(messages)
        source_text = refs.REF.sub(" ", earlier + "\n" + "\n".join(lines))  # numbers must come from the words
        try:
            text, cut = await self._update(self.model, earlier, lines, cap_tokens, secrets)
        except (ModelError, ValueError) as exc:
            log.warning("summarizer failed; the previous narrative is carried unchanged: %s", exc)
            return Narrative((), "notes-fallback", f"summarizer failed: {exc}"[:300]), kept
        narrative, rejected = self._checked(text, valid_ids, source_text, cap_tokens, cut, secrets)
        if not narrative:
            return Narrative((), "notes-fallback", f"summarizer returned no usable lines ({rejected} rejected)"), kept
        entries = [NarrativeEntry(text=ln.text, source_ids=list(ln.source_ids)) for ln in narrative]
        cited = {i for e in entries for i in e.source_ids}
        dropped = sum(1 for e in previous if e.source_ids and not set(e.source_ids) & cited)
        detail = ", ".join(part for part in (f"{rejected} lines rejected" if rejected else "",
                                             "output cut at the limit; trimmed to whole lines" if cut else "",
                                             f"{dropped} earlier lines not carried" if dropped else "") if part)
        strategy = "llm-partial" if rejected or cut else "llm"
        return Narrative(tuple(narrative), strategy, detail), entries

    async def _update(self, model: ModelClient, earlier: str, lines: list[str], cap_tokens: int,
                      secrets: set[str]) -> tuple[str, bool]:
        """One call when the input fits the summarizer's window, else one per chunk, each carrying the result
        (without its lines that hold a secret)."""
        chunk_budget = max(512, int(self.window_tokens * 0.5) - cap_tokens)
        chunks: list[list[str]] = [[]]
        used = self.tokenizer.count(earlier)
        for line in lines:
            cost = self.tokenizer.count(line) + 1
            if used + cost > chunk_budget and chunks[-1]:
                chunks.append([])
                used = self.tokenizer.count(earlier)
            chunks[-1].append(line)
            used += cost
        cut = False
        for chunk in chunks:
            body = HANDOFF_UPDATE.format(earlier=earlier or "(none yet)", messages="\n".join(chunk) or "(none)")
            reply = await model.complete(
                [{"role": "system", "content": HANDOFF_PROMPT}, {"role": "user", "content": body}],
                max_output_tokens=self._output_limit(cap_tokens), timeout_seconds=self.timeout_seconds,
                kind="compaction")
            cut = reply.finish_reason == "length"
            earlier = "\n".join(ln for ln in _trim(reply.text, cut).split("\n") if not holds_secret(ln, secrets))
        return earlier, cut

    def _output_limit(self, cap_tokens: int) -> int:
        """Room for the narrative and some slack, never more than a quarter of the summarizer's window."""
        return max(64, min(cap_tokens + 64, self.window_tokens // 4))

    def _checked(self, text: str, valid_ids: Mapping[str, str], source: str, cap_tokens: int,
                 cut: bool, secrets: set[str]) -> tuple[list[NarrativeLine], int]:
        """Lines that cite only real ids and that the one check of a model's lines keeps
        (:func:`services.safety.rejected`: no number or identifier ``source`` lacks, no instruction, no secret, not
        one of ``secrets`` redacted from the input nor one the redaction rules find)."""
        out: list[NarrativeLine] = []
        dropped = 0
        used = 0
        for raw in text.splitlines():
            match = _LINE.match(raw)
            if not match or not match.group(2).strip():
                continue
            ids = tuple(i.strip() for i in (match.group(1) or "").split(",") if i.strip())
            body = match.group(2).strip()
            # the summarizer read its whole input: a line's numbers and identifiers must be in it
            if any(i not in valid_ids for i in ids) or rejected(body, [source], secrets=secrets):
                dropped += 1
                continue
            line = NarrativeLine(body[:400], tuple(dict.fromkeys(valid_ids[i] for i in ids)))
            cost = self.tokenizer.count(line.text) + 4
            if used + cost > cap_tokens:
                break
            used += cost
            out.append(line)
        return out, dropped

    @staticmethod
    def _secrets(messages: Sequence[Message]) -> set[str]:
        return {s for m in messages if not m.flags.runtime and m.role in ("user", "assistant")
                for s in secrets_in(prose(m))}

    def _transcript(self, messages: Sequence[Message]) -> list[str]:
        """The messages as the summarizer reads them: by author and reference, secrets redacted."""
        lines = []
        for m in messages:
            if m.flags.runtime or m.role not in ("user", "assistant"):
                continue
            who = m.author if m.role == "user" and m.author else m.role
            text = redact(prose(m))
            if text.strip():
                lines.append(f"[{refs.label(m.id, m.ref)}] {who}: {' '.join(text.split())[:2000]}")
        return lines

    async def _call(self, body: str, cap_tokens: int) -> str:
        assert self.model is not None
        reply = await self.model.complete([{"role": "system", "content": HANDOFF_PROMPT},
                                           {"role": "user", "content": body}],
                                          max_output_tokens=max(64, cap_tokens), timeout_seconds=self.timeout_seconds,
                                          kind="compaction")
        return reply.text

    async def _llm(self, messages: Sequence[Message], cap_tokens: int) -> Narrative:
        lines = self._transcript(messages)
        secrets = self._secrets(messages)
        valid_ids = {m.id: m.id for m in messages} | {refs.label(m.id, m.ref): m.id for m in messages}
        chunk_budget = max(512, int(self.window_tokens * 0.6))
        chunks: list[list[str]] = [[]]
        used = 0
        for line in lines:
            cost = self.tokenizer.count(line) + 1
            if used + cost > chunk_budget and chunks[-1]:
                chunks.append([])
                used = 0
            chunks[-1].append(line)
            used += cost
        if len(chunks) == 1:
            text = await self._call("\n".join(chunks[0]), cap_tokens)
        else:
            parts = [await self._call("\n".join(chunk), max(64, cap_tokens // len(chunks) * 2)) for chunk in chunks]
            text = await self._call("These are handoff notes of consecutive parts of one thread. Merge them into "
                                    "one handoff in the same format:\n\n" + "\n\n".join(parts), cap_tokens)
        return self._validate(text, valid_ids, cap_tokens, secrets)

    def _validate(self, text: str, valid_ids: Mapping[str, str], cap_tokens: int, secrets: set[str]) -> Narrative:
        lines: list[NarrativeLine] = []
        used = 0
        for raw in text.splitlines():
            match = _LINE.match(raw)
            if not match or not match.group(2).strip():
                continue
            ids = tuple(dict.fromkeys(valid_ids[i.strip()] for i in (match.group(1) or "").split(",")
                                      if i.strip() in valid_ids))
            if holds_secret(match.group(2), secrets):
                continue
            line = NarrativeLine(match.group(2).strip()[:400], ids)
            cost = self.tokenizer.count(line.text) + 4
            if used + cost > cap_tokens:
                break
            used += cost
            lines.append(line)
        if not lines:
            raise ValueError("the summarizer returned no usable handoff lines")
        return Narrative(tuple(lines), "llm")
