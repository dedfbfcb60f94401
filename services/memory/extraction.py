"""Extraction, memory's first phase: a conversation's new messages become records, once it has been idle a while.

One worker holds the conversation's extraction lease (renewed while it works); only the messages after the job's
watermark are read, and those edited since they were read (with their text now; what was derived from their earlier
text goes); they are folded into a ledger (:mod:`services.handoff`), whose decisions, closed asks,
model-recorded entries and notes (all of them by default, see ``MemoryConfig.notes_share``) become records. With a
real model configured, one validated model call may add records (each cites real message ids and states no number
its sources lack); never more than one per extraction and never past a daily cap. Every record is redacted and
carries no instruction to the assistant. The sweep finds the idle conversations, extracts a bounded number of them,
and has the scopes that changed consolidated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeGuard, get_args

from threadkeeper.persistence import CheckpointStore, Message, NotesStore, TextPart
from threadkeeper.persistence.memory import (
    ExtractionJob,
    Kind,
    MemoryRecord,
    MemoryStore,
    MemoryVersion,
    Scope,
    Visibility,
)

from ..conversation import PRIVACY, Conversation
from ..handoff import LedgerBuilder, fold, is_identifier, prose, select, whole_cost
from ..models import ModelClient, Tokenizer
from ..safety import redact, rejected, without_instructions
from ..text import extract as x
from ..text import terms
from .access import Access
from .config import DAY, MemoryConfig, day_of
from .forgetting import source_marks, source_version, strip
from .lease import held

log = logging.getLogger("threadkeeper.memory")

EVERYONE = re.compile(r"\bremember (?:this|that|it)? ?(?:for|to) (?:everyone|everybody|all|the (?:whole )?"
                      r"(?:workspace|company|team))\b", re.IGNORECASE)
"""The stated rule by which a record reaches workspace scope: its source message asks for it, in a public channel."""


@dataclass
class Extraction:
    conversation_id: str
    outcome: Literal["succeeded", "succeeded_empty", "failed", "disabled", "busy", "waiting"]
    records: int = 0
    messages: int = 0
    model_calls: int = 0
    error: str | None = None
    retry_at: float = 0.0
    """When a failed extraction is tried again."""


MEMORY_ID = "mem_"


def record_id(conversation_id: str, source: str, kind: str) -> str:
    """Stable per source: extracting the same message again rewrites the same record."""
    return MEMORY_ID + hashlib.sha1(f"{conversation_id}|{source}|{kind}".encode()).hexdigest()[:8]


def _is_kind(value: str) -> TypeGuard[Kind]:
    return value in get_args(Kind)


def _kind_of_note(text: str) -> Literal["fact", "constraint", "identifier"]:
    if x.CONSTRAINT.search(text):
        return "constraint"
    if any(is_identifier(t) for t in terms(text)):
        return "identifier"
    return "fact"


def clean(text: str) -> str:
    """What a record may say: no standing instruction to the assistant, no secret, one line."""
    return " ".join(redact(without_instructions(text)).split())[:2000]


class ScopeConsolidation(Protocol):
    """What consolidates the scopes a sweep's extractions changed (:class:`~.consolidation.Consolidator`)."""

    async def consolidate(self, workspace: str, scope: str) -> MemoryVersion | None: ...


class Extractor:
    """Extraction over one :class:`MemoryStore`, from the conversations' durable history and notes."""

    def __init__(self, store: MemoryStore, checkpoints: CheckpointStore, notes: NotesStore, tokenizer: Tokenizer,
                 gate: Access, consolidation: ScopeConsolidation, *, config: MemoryConfig,
                 model: ModelClient | None = None, clock: Callable[[], float] = time.time,
                 retention_days: float = 30.0) -> None:
        self.store, self.checkpoints, self.notes, self.tokenizer = store, checkpoints, notes, tokenizer
        self.gate, self.consolidation, self.config = gate, consolidation, config
        self.model = model
        """A real model for the validated extraction pass (None or the offline model: deterministic only)."""
        self.clock = clock
        self.retention_days = retention_days

    async def extract(self, conversation: Conversation, *, force: bool = False) -> Extraction:
        """Extract records from the conversation's messages after its watermark, under its extraction lease."""
        where, conversation_id = conversation, conversation.id
        if not await self.gate.enabled(where):
            return Extraction(conversation_id, "disabled")
        async with held(self.store, where.workspace, f"extract:{conversation_id}", self.config.lease_seconds) as token:
            if token is None:
                return Extraction(conversation_id, "busy")
            job = await self.store.job(where.workspace, conversation_id)
            now = self.clock()
            if not force and job.outcome == "failed" and job.retry_at > now:
                return Extraction(conversation_id, "waiting", error=job.error, retry_at=job.retry_at)
            try:
                result, job = await self._extract(conversation_id, where, job, now)
            except Exception as exc:  # noqa: BLE001 - a failed job is recorded and retried with backoff
                log.exception("memory extraction of %s failed", conversation_id)
                job.attempts += 1
                job.outcome, job.error = "failed", f"{type(exc).__name__}: {exc}"[:500]
                job.retry_at = now + self.config.retry_seconds * 2 ** min(job.attempts - 1, 10)
                await self.store.save_job(where.workspace, conversation_id, job)
                return Extraction(conversation_id, "failed", error=job.error, retry_at=job.retry_at)
            await self.store.save_job(where.workspace, conversation_id, job)
            return result

    async def _extract(self, cid: str, where: Conversation, job: ExtractionJob, now: float
                       ) -> tuple[Extraction, ExtractionJob]:
        messages, changes = await self.messages(cid)
        seen = set(job.watermark_ids)

        def unread(m: Message) -> bool:
            return m.created_at > job.watermark_at or (m.created_at == job.watermark_at and m.id not in seen)

        # An edited message is read with its text now; one read before at another text is read again (its records
        # from the earlier text are suspect until then).
        edited = {m.id: self._revised(m, text) for m in messages if (text := changes.get(m.id)) is not None}
        again = [m for m in edited.values() if not unread(m) and job.revised.get(m.id) != source_version(m)]
        new = [m for m in messages if unread(m)]
        job.attempts, job.error = 0, None
        if new:
            last = max(m.created_at for m in new)
            job.watermark_ids = sorted({m.id for m in new if m.created_at == last} |
                                       (seen if last == job.watermark_at else set()))
            job.watermark_at = last
        state = await self.checkpoints.get_state(cid)
        job.activity = max(job.activity, state.updated_at if state is not None else 0.0)
        if not new and not again:
            job.outcome, job.records = "succeeded_empty", 0
            return Extraction(cid, "succeeded_empty"), job
        new = sorted([*again, *(edited.get(m.id, m) for m in new)], key=lambda m: (m.created_at, m.id))
        job.revised.update({m.id: source_version(m) for m in new if m.id in edited})
        visibility = await self.gate.visibility(where)
        records = await self._from_ledger(cid, where, visibility, new, changes, now)
        calls = 0
        if self.model is not None and not self.model.offline:
            today = day_of(now)
            if job.model_calls_day != today:
                job.model_calls_day, job.model_calls = today, 0
            if job.model_calls < self.config.model_calls_per_day:
                job.model_calls += 1
                calls = 1
                try:
                    records += await self._from_model(self.model, cid, where, visibility, new, now,
                                                      {r.id for r in records})
                except Exception as exc:  # noqa: BLE001 - the deterministic records stand without the model's
                    log.warning("memory model pass for %s failed: %s", cid, exc)
        retracted = set(await self.store.put(where.workspace, records))  # a source retracted meanwhile: not written
        records = [r for r in records if r.id not in retracted]
        if again:  # what was derived from their earlier text goes (what cites the text now was just written)
            await strip(self.store, where.workspace, {k for m in again for k in source_marks(where.channel, m.id)})
        job.outcome = "succeeded" if records else "succeeded_empty"
        job.records = len(records)
        return Extraction(cid, job.outcome, len(records), len(new), calls), job

    async def messages(self, cid: str) -> tuple[list[Message], dict[str, str | None]]:
        """Every message of the conversation's lineage, earliest epoch first, and the edits and deletions of them."""
        state = await self.checkpoints.get_state(cid)
        if state is None or state.head_checkpoint_id is None:
            return [], {}
        history = await self.checkpoints.load_history(cid, state.head_checkpoint_id)
        epochs = [history.messages, *(e.messages for e in await self.checkpoints.earlier_epochs(cid, history))]
        out: dict[str, Message] = {}
        for epoch in reversed(epochs):
            for m in epoch:
                if m.role in ("user", "assistant") and not m.flags.runtime and not m.flags.handoff:
                    out.setdefault(m.id, m)
        notes = await self.notes.get(cid)
        changes = {i: (c.text if c.kind == "edited" else None) for i, c in notes.changes.items()}
        return sorted(out.values(), key=lambda m: (m.created_at, m.id)), changes

    def _revised(self, message: Message, text: str) -> Message:
        """An edited message as it reads now."""
        return message.model_copy(update={"parts": [TextPart(text=text)], "note": None, "note_tokens": [],
                                          "tokens": self.tokenizer.count(text)})

    async def _from_ledger(self, cid: str, where: Conversation, visibility: Visibility, new: Sequence[Message],
                     changes: dict[str, str | None], now: float) -> list[MemoryRecord]:
        """Records from the ledger of the new messages (an edited one with its text now): decisions, closed asks,
        model-recorded entries and the most informative notes (``notes_share``). Deleted messages give none (their
        records were retracted)."""
        deleted = {i for i, text in changes.items() if text is None}
        kept = [m for m in new if m.id not in deleted]
        if not kept:
            return []
        ledger = (await fold(LedgerBuilder(count=self.tokenizer.count), kept, {})).build()
        by_id = {m.id: m for m in kept}
        expires = now + self.config.ttl_days * DAY
        out: dict[str, MemoryRecord] = {}

        def add(kind: Kind, text: str, sources: list[str], authors: list[str], subject: str = "",
                supersedes: list[str] | None = None) -> MemoryRecord | None:
            text = clean(text)
            sources = [s for s in sources if s in by_id]
            if not text or not sources:
                return None
            scope: Scope = "channel"
            if visibility == "public" and any(EVERYONE.search(prose(by_id[s])) for s in sources):
                scope = "workspace"
            rid = record_id(cid, sources[0], kind)
            record = MemoryRecord(id=rid, text=text, kind=kind, workspace=where.workspace,
                                  channel=where.channel, conversation=cid, visibility=visibility,
                                  scope=scope, source_ids=sources,
                                  authors=list(dict.fromkeys(a for a in authors if a)),
                                  said_at=by_id[sources[0]].created_at, created_at=now, expires_at=expires,
                                  subject=subject, supersedes=supersedes or [],
                                  versions={s: source_version(by_id[s]) for s in sources})
            out.setdefault(rid, record)
            return out[rid]

        decided: set[str] = set()
        for d in ledger.decisions:
            add("decision", d.text, [d.id], [d.author], subject=" ".join(sorted(x.terms(d.text))[:12]))
            decided.add(d.id)
        for d in ledger.decisions:  # a reversal supersedes what it reversed
            if d.reversed_by and d.reversed_by in by_id:
                old, new_id = record_id(cid, d.id, "decision"), record_id(cid, d.reversed_by, "decision")
                if old in out and new_id in out:
                    out[old].superseded_by = new_id
                    out[new_id].supersedes.append(old)
        replies = {m.id: m for m in kept if m.role == "assistant"}
        for a in ledger.asks:  # an answer that says something: the ask and its outcome are one record
            if a.status == "answered" and a.closed_by in replies and a.id not in decided:
                answer = replies[a.closed_by].note or prose(replies[a.closed_by])
                if len(terms(answer)) >= 3 and add("outcome", f"{a.note or a.text} → {answer}",
                                                   [a.id, a.closed_by], [a.author]) is not None:
                    decided |= {a.id, a.closed_by}
        for f in ledger.model_facts:
            add("decision" if f.kind == "decision" else "fact", f.text, [f.evidence_id], [])
        notes = [n for n in ledger.notes if n.id not in decided and n.id in by_id]
        total = whole_cost(notes, self.tokenizer.count)  # what ``select`` spends, headings and lead-ins included
        chosen = select(notes, ledger.stats, cap_tokens=max(64, int(total * self.config.notes_share)), now=now,
                        count=self.tokenizer.count).notes if notes else []
        for n in chosen:
            add(_kind_of_note(n.text), n.text, [n.id], [n.author])
        return list(out.values())

    async def _from_model(self, model: ModelClient, cid: str, where: Conversation, visibility: Visibility,
                          new: Sequence[Message], now: float, taken: set[str]) -> list[MemoryRecord]:
        """One model call proposing records as JSON; each kept only when valid: it cites ids of the new messages,
        every number or identifier it states is in its sources, and it is no instruction."""
        lines = [f"[{m.id}] {m.author or m.role}: {redact(prose(m))[:1500]}" for m in new[-200:]]
        prompt = ("List what this conversation established that would help people in later conversations: facts, "
                  "decisions, constraints, identifiers, outcomes of requests. Answer with JSON only: a list of objects "
                  '{"text": "...", "kind": "fact|decision|constraint|identifier|outcome", "source_ids": ["<id>"]}. '
                  "Cite only ids shown in brackets; state nothing the cited messages do not say.")
        reply = await model.complete([{"role": "system", "content": prompt},
                                      {"role": "user", "content": "\n".join(lines)}], max_output_tokens=1024,
                                     kind="memory")
        raw = reply.text.strip()
        start, end = raw.find("["), raw.rfind("]")
        items = json.loads(raw[start:end + 1]) if start >= 0 and end > start else []
        by_id = {m.id: m for m in new}
        out = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            raw, kind = str(item.get("text") or ""), str(item.get("kind") or "fact")
            sources = [s for s in item.get("source_ids") or [] if isinstance(s, str) and s in by_id]
            # the one check of a model's lines: cited sources, no number they lack, no instruction, no secret
            if not _is_kind(kind) or rejected(raw, [prose(by_id[s]) for s in sources]) is not None:
                continue
            text = clean(raw)
            if not text:
                continue
            rid = MEMORY_ID + hashlib.sha1(f"{cid}|model|{text}".encode()).hexdigest()[:8]
            if rid in taken:
                continue
            out.append(MemoryRecord(id=rid, text=text, kind=kind, workspace=where.workspace,
                                    channel=where.channel, conversation=cid, visibility=visibility, scope="channel",
                                    source_ids=sources,
                                    authors=[by_id[s].author or "" for s in sources if by_id[s].author],
                                    said_at=by_id[sources[0]].created_at, created_at=now,
                                    expires_at=now + self.config.ttl_days * DAY,
                                    versions={s: source_version(by_id[s]) for s in sources}))
        return out

    async def sweep(self) -> list[Extraction]:
        """Extract from conversations idle for ``idle_seconds`` that owe extraction (a bounded number per sweep, the
        longest idle first), then consolidate the scopes that changed.

        The registry of conversations owing extraction holds only those: one extracted (or found extracted already),
        with memory off, or past its attempts leaves it, and one whose extraction failed is due again at its retry;
        an item arriving puts it back. So a sweep reads at most ``4 × claims_per_sweep`` entries of it and does a
        bounded number of Redis commands for each, and a conversation that goes idle is extracted within
        (the conversations owing extraction before it) / ``claims_per_sweep`` sweeps, whatever else is stored."""
        now = self.clock()
        idle = self.config.idle_seconds
        found = await self.store.idle_conversations(idle_before=now - idle,
                                                    active_after=now - self.retention_days * DAY,
                                                    limit=self.config.claims_per_sweep * 4)
        done: list[Extraction] = []
        touched: set[tuple[str, str]] = set()
        switches: dict[str, dict[str, bool]] = {}  # (each workspace's stored switches, read once a sweep)
        for cid, activity in found:
            if len(done) >= self.config.claims_per_sweep:
                break
            where = Conversation.of(cid)
            if self.gate.allows(where.workspace) and where.workspace not in switches:
                switches[where.workspace] = (await self.store.state(where.workspace))[0]
            if not self.gate.allows(where.workspace) or not self.gate.channel_on(where.channel,
                                                                              switches[where.workspace]):
                await self.store.settle(cid, activity)  # memory is off there: it leaves the registry at once
                continue
            job = await self.store.job(where.workspace, cid)
            if job.activity >= activity or (job.outcome == "failed" and job.attempts >= self.config.max_attempts):
                await self.store.settle(cid, activity)
                continue
            if job.outcome == "failed" and job.retry_at > now:
                await self.store.settle(cid, activity, until=job.retry_at - idle)
                continue
            # what the transport said about the channel when the conversation's messages arrived
            where = where.said((await self.notes.get(cid)).flags.get(PRIVACY))
            result = await self.extract(where)
            if result.outcome == "busy":  # its holder settles it
                continue
            if result.outcome in ("failed", "waiting"):
                await self.store.settle(cid, activity, until=result.retry_at - idle)
            else:  # extracted, or memory is off here: an item arriving puts it back
                await self.store.settle(cid, activity)
            if result.outcome == "disabled":
                continue
            done.append(result)
            if result.records:
                touched.add((where.workspace, f"channel:{where.channel}"))
                touched.add((where.workspace, "workspace"))
        for workspace, scope in sorted(touched):
            await self.consolidation.consolidate(workspace, scope)
        return done
