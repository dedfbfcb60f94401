"""Memory across conversations: what a team told the bot in one conversation helps in the next, within its scope.

Records are derived in two phases:

* **Extraction**, per conversation once it has been idle for a while (:meth:`Memory.extract`): one worker holds
  the conversation's extraction lease (renewed while it works); only the messages after the job's watermark are
  read; they are folded into a ledger (:mod:`services.ledger`), whose decisions, closed asks, model-recorded
  entries and notes (all of them by default, see ``MemoryConfig.notes_share``) become records. With a real
  model configured, one validated model call may add records (each cites real message ids and states no number
  its sources lack); never more than one per extraction and never past a daily cap. Every record is redacted
  and carries no instruction to the assistant.
* **Consolidation**, per scope under one lock (:meth:`Memory.consolidate`): duplicates merged, a newer decision on
  the same subject supersedes the older one (both kept, the older marked), records unused for
  ``max_unused_days`` dropped; each consolidation is a new version of the scope, the previous one kept.

Scopes and visibility: a record belongs to its source channel. One from a DM or a private channel is shown only
in that DM or channel, and a private channel's only to a person who is a member of it now (asked of Slack,
cached briefly); one from a public channel is shown in that channel. A record reaches the whole workspace only
when its source message says so explicitly ("remember this for everyone") in a public channel. A record is never
shown in the conversation it came from (that conversation has its own context).

Memory is off unless the settings allow it in the workspace and it is on for the channel (settings, or
``threadkeeper memory enable``). A deleted or edited source message retracts what was derived from it at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence

import bm25s
import numpy as np

from threadkeeper.persistence import CheckpointStore, Message, NotesStore
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
from ..handoff import LedgerBuilder, prose, select
from ..models import ModelClient, Tokenizer
from ..safety import redact, rejected
from ..text import extract as x
from ..text import terms
from .access import CachedAccess, ChannelAccess, NoAccess
from .config import DAY, MemoryConfig, day_of
from .consolidation import _scope_key, consolidated
from .extraction import EVERYONE, Extraction, _is_kind, _kind_of_note, clean, record_id
from .reading import (
    _STEMMER,
    CITED,
    DAY_TOKENS,
    MEMORY_HEADER,
    MIN_LINE_TOKENS,
    NEIGHBOUR_HITS,
    MemoryBlock,
    _Index,
    _who,
    render_block,
    searchable,
)

log = logging.getLogger("threadkeeper.memory")


class Memory:
    """Extraction, consolidation, the read path and forgetting, over one :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, checkpoints: CheckpointStore, notes: NotesStore, tokenizer: Tokenizer, *,
                 config: MemoryConfig | None = None, access: ChannelAccess | None = None,
                 model: ModelClient | None = None,
                 clock: Callable[[], float] = time.time, retention_days: float = 30.0) -> None:
        self.store, self.checkpoints, self.notes, self.tokenizer = store, checkpoints, notes, tokenizer
        self.config = config or MemoryConfig()
        self.access: ChannelAccess = CachedAccess(access or NoAccess(), self.config.membership_seconds)
        self.model = model
        """A real model for the validated extraction pass (None or the offline model: deterministic only)."""
        self.clock = clock
        self.retention_days = retention_days
        self._indexes: dict[str, _Index] = {}

    async def visibility(self, conversation: Conversation) -> Visibility:
        """Who may see what a conversation's channel says: the one rule every path uses (extraction from the bot's
        sweep or the command line, the read path). What the transport said when the messages arrived, else what
        the transport answers now (Slack: ``conversations.info``, cached; an error answers private); where nobody
        can be asked, :class:`PrivacyUnknownError`. Never guessed from an id."""
        if conversation.privacy != "unknown":
            return conversation.privacy
        return await self.access.visibility(conversation.workspace, conversation.channel)

    # -- switches ------------------------------------------------------------------------------

    async def enabled(self, where: Conversation) -> bool:
        """Memory works in a channel when the settings allow it in the workspace (no Redis read otherwise), the
        workspace is not switched off, and the channel is on (by the settings or a stored switch)."""
        if not self.allowed(where):
            return False
        switches, _ = await self.store.state(where.workspace)
        return self._on(where, switches)

    def allowed(self, where: Conversation) -> bool:
        return "*" in self.config.workspaces or where.workspace in self.config.workspaces

    def _on(self, where: Conversation, switches: dict[str, bool]) -> bool:
        cfg = self.config
        channel = switches.get(f"channel:{where.channel}", "*" in cfg.channels or where.channel in cfg.channels)
        return switches.get("workspace", True) and channel

    # -- phase 1: extraction -------------------------------------------------------------------

    async def extract(self, conversation: Conversation, *, force: bool = False) -> Extraction:
        """Extract records from the conversation's messages after its watermark, under its extraction lease."""
        where, conversation_id = conversation, conversation.id
        if not await self.enabled(where):
            return Extraction(conversation_id, "disabled")
        name = f"extract:{conversation_id}"
        token = await self.store.claim(where.workspace, name, self.config.lease_seconds)
        if token is None:
            return Extraction(conversation_id, "busy")
        heartbeat = asyncio.create_task(self._heartbeat(where.workspace, name, token))
        try:
            job = await self.store.job(where.workspace, conversation_id)
            now = self.clock()
            if not force and job.outcome == "failed" and job.retry_at > now:
                return Extraction(conversation_id, "waiting", error=job.error)
            try:
                result, job = await self._extract(conversation_id, where, job, now)
            except Exception as exc:  # noqa: BLE001 - a failed job is recorded and retried with backoff
                log.exception("memory extraction of %s failed", conversation_id)
                job.attempts += 1
                job.outcome, job.error = "failed", f"{type(exc).__name__}: {exc}"[:500]
                job.retry_at = now + self.config.retry_seconds * 2 ** min(job.attempts - 1, 10)
                await self.store.save_job(where.workspace, conversation_id, job)
                return Extraction(conversation_id, "failed", error=job.error)
            await self.store.save_job(where.workspace, conversation_id, job)
            return result
        finally:
            heartbeat.cancel()
            await self.store.release(where.workspace, name, token)

    async def _heartbeat(self, workspace: str, name: str, token: str) -> None:
        every = max(0.05, self.config.lease_seconds / 3)
        while True:
            await asyncio.sleep(every)
            if not await self.store.renew(workspace, name, token, self.config.lease_seconds):
                log.warning("memory lease %s of %s lost", name, workspace)
                return

    async def _extract(self, cid: str, where: Conversation, job: ExtractionJob, now: float
                       ) -> tuple[Extraction, ExtractionJob]:
        messages, changes = await self._messages(cid)
        seen = set(job.watermark_ids)
        new = [m for m in messages if m.created_at > job.watermark_at
               or (m.created_at == job.watermark_at and m.id not in seen)]
        job.attempts, job.error = 0, None
        if new:
            last = max(m.created_at for m in new)
            job.watermark_ids = sorted({m.id for m in new if m.created_at == last} |
                                       (seen if last == job.watermark_at else set()))
            job.watermark_at = last
        state = await self.checkpoints.get_state(cid)
        job.activity = max(job.activity, state.updated_at if state is not None else 0.0)
        if not new:
            job.outcome, job.records = "succeeded_empty", 0
            return Extraction(cid, "succeeded_empty"), job
        visibility = await self.visibility(where)
        records = self._from_ledger(cid, where, visibility, new, changes, now)
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
        await self.store.put(where.workspace, records)
        job.outcome = "succeeded" if records else "succeeded_empty"
        job.records = len(records)
        return Extraction(cid, job.outcome, len(records), len(new), calls), job

    async def _messages(self, cid: str) -> tuple[list[Message], dict[str, str | None]]:
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

    def _from_ledger(self, cid: str, where: Conversation, visibility: Visibility, new: Sequence[Message],
                     changes: dict[str, str | None], now: float) -> list[MemoryRecord]:
        """Records from the ledger of the new messages: decisions, closed asks, model-recorded entries and the
        most informative notes (``notes_share``). Edited and deleted messages give none (their records were
        retracted)."""
        changed = set(changes)
        kept = [m for m in new if m.id not in changed]
        if not kept:
            return []
        ledger = LedgerBuilder(count=self.tokenizer.count).fold(kept).build()
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
                                  subject=subject, supersedes=supersedes or [])
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
        total = sum(n.tokens or self.tokenizer.count(n.text) for n in notes)
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
            rid = "mem_" + hashlib.sha1(f"{cid}|model|{text}".encode()).hexdigest()[:8]
            if rid in taken:
                continue
            out.append(MemoryRecord(id=rid, text=text, kind=kind, workspace=where.workspace,
                                    channel=where.channel, conversation=cid, visibility=visibility, scope="channel",
                                    source_ids=sources,
                                    authors=[by_id[s].author or "" for s in sources if by_id[s].author],
                                    said_at=by_id[sources[0]].created_at, created_at=now,
                                    expires_at=now + self.config.ttl_days * DAY))
        return out

    async def sweep(self) -> list[Extraction]:
        """Extract from conversations idle for ``idle_seconds`` with activity the last run did not cover (a bounded
        number per sweep), then consolidate the scopes that changed."""
        now = self.clock()
        found = await self.store.idle_conversations(idle_before=now - self.config.idle_seconds,
                                                    active_after=now - self.retention_days * DAY,
                                                    limit=self.config.claims_per_sweep * 4)
        done: list[Extraction] = []
        touched: set[tuple[str, str]] = set()
        for cid, activity in found:
            if len(done) >= self.config.claims_per_sweep:
                break
            where = Conversation.of(cid)
            job = await self.store.job(where.workspace, cid)
            if job.activity >= activity or (job.outcome == "failed" and (job.retry_at > now or
                                                                         job.attempts >= self.config.max_attempts)):
                continue
            # what the transport said about the channel when the conversation's messages arrived
            where = where.said((await self.notes.get(cid)).flags.get(PRIVACY))
            result = await self.extract(where)
            if result.outcome in ("disabled", "busy"):
                continue
            done.append(result)
            if result.records:
                touched.add((where.workspace, f"channel:{where.channel}"))
                touched.add((where.workspace, "workspace"))
        for workspace, scope in sorted(touched):
            await self.consolidate(workspace, scope)
        return done

    # -- phase 2: consolidation ----------------------------------------------------------------

    async def consolidate(self, workspace: str, scope: str) -> MemoryVersion | None:
        """Merge duplicates, supersede older decisions on the same subject, drop the unused, as a new version of
        ``scope`` (``workspace`` or ``channel:<id>``); None when another worker holds the scope's lock."""
        name = f"consolidate:{scope}"
        token = await self.store.claim(workspace, name, self.config.lease_seconds)
        if token is None:
            return None
        heartbeat = asyncio.create_task(self._heartbeat(workspace, name, token))
        try:
            now = self.clock()
            every = await self.store.records(workspace, now=now)
            mine = [r for r in every if _scope_key(r) == scope]
            version, changed, removed = consolidated(mine, now=now, max_unused_days=self.config.max_unused_days)
            previous = await self.store.versions(workspace, scope)
            version.number = (previous[0].number + 1) if previous else 1
            await self.store.write_version(workspace, scope, version, changed, removed)
            return version
        finally:
            heartbeat.cancel()
            await self.store.release(workspace, name, token)

    # -- read path -----------------------------------------------------------------------------

    async def block(self, conversation: Conversation, query: str, *, asker: str | None,
                    cap_tokens: int) -> MemoryBlock:
        """The records visible to ``conversation`` (and to ``asker`` now) that best match ``query``, rendered
        within ``cap_tokens``; an empty block when memory is off here or nothing matches."""
        where, conversation_id = conversation, conversation.id
        if cap_tokens <= 0 or not query.strip() or not self.allowed(where):
            return MemoryBlock()
        switches, generation = await self.store.state(where.workspace)
        if not self._on(where, switches):
            return MemoryBlock()
        index = await self._index(where.workspace, generation)
        retriever = index.retriever
        if not index.records or retriever is None:
            return MemoryBlock()
        [words] = bm25s.tokenize(query, stopwords="en", stemmer=_STEMMER, show_progress=False, return_ids=False)
        known = list(dict.fromkeys(w for w in words if w in retriever.vocab_dict))
        if not known:
            return MemoryBlock()
        count = self.tokenizer.count
        used = count(MEMORY_HEADER) + 1
        shown: list[MemoryRecord] = []
        taken: dict[int, None] = {}
        days: set[str] = set()
        lines: set[tuple[str, str]] = set()
        members: dict[str, bool] = {}

        seen = index.seen_from(where, conversation_id)

        async def place(i: int) -> bool:
            """Show record ``i`` if it fits; False once no further record can."""
            nonlocal used
            if i in taken:
                return True
            record = index.records[i]
            if not seen[i] or not await self._member(record, asker, members):
                return True
            day, who = day_of(record.said_at), _who(record)
            cost = index.cost(i, count) + (0 if day in days else DAY_TOKENS) + \
                (0 if (day, who) in lines else index.lead(who, count))
            if used + cost > cap_tokens:
                return cap_tokens - used >= MIN_LINE_TOKENS
            used += cost
            shown.append(record)
            taken[i] = None
            days.add(day)
            lines.add((day, who))
            return True

        async def fill(order: list[int]) -> None:
            for i in order:
                if not await place(i):
                    return

        def ranked(terms_: list[str]) -> list[int]:
            scores = retriever.get_scores(terms_)
            found = np.flatnonzero((scores > 0) & seen)
            best: list[int] = found[np.lexsort((-found, -scores[found]))].tolist()  # best first; ties: newest first
            return best

        direct = ranked(known)
        # The best hits bring what was said next to them in their conversation (an answer is often the next
        # message), ahead of weaker hits.
        best = direct[:NEIGHBOUR_HITS]
        await fill([j for i in best for j in (i, *index.neighbours(i))])
        await fill(direct)
        if shown and cap_tokens - used >= MIN_LINE_TOKENS:
            # Room left once everything that shares a word with the question is in: the words the best records
            # have in common find what the question shares no word with (pseudo-relevance feedback).
            wider = index.feedback(list(taken), set(known))
            if wider:
                await fill(ranked(wider))
        if not shown:
            return MemoryBlock()
        text = render_block(shown)
        await self.store.touch(where.workspace, [r.id for r in shown], at=self.clock(), cited=False)
        return MemoryBlock(text, shown, used)

    async def _member(self, record: MemoryRecord, asker: str | None, members: dict[str, bool]) -> bool:
        """Who may see a record, past its scope (:meth:`_Index.seen_from`): a private channel's only a person who is
        a member of it now."""
        if record.visibility != "private":
            return True
        if not asker:
            return False
        if asker not in members:
            members[asker] = await self.access.is_member(record.workspace, record.channel, asker)
        return members[asker]

    async def _index(self, workspace: str, generation: int) -> _Index:
        index = self._indexes.get(workspace)
        if index is not None and index.generation == generation:
            return index
        records = await self.store.records(workspace, now=self.clock())
        retriever, words = None, []
        if records:
            words = bm25s.tokenize([searchable(r) for r in records], stopwords="en", stemmer=_STEMMER,
                                   show_progress=False, return_ids=False)
            retriever = bm25s.BM25()
            retriever.index(words, show_progress=False)
        index = self._indexes[workspace] = _Index(generation, records, retriever, words)
        index.prepare()
        return index

    async def cited(self, conversation: Conversation, reply: str, shown: Sequence[str]) -> int:
        """A reply that cites records its turn was shown (``shown``: their ids, in the block's order) raises their
        usage; how many it cited."""
        marks = {int(n) for n in CITED.findall(reply or "")}
        ids = [shown[n - 1] for n in sorted(marks) if 0 < n <= len(shown)]
        if not ids:
            return 0
        await self.store.touch(conversation.workspace, ids, at=self.clock(), cited=True)
        return len(ids)

    # -- retraction and forgetting -------------------------------------------------------------

    async def retract(self, conversation: Conversation, message_id: str) -> int:
        """A source message was deleted or edited: every record derived from it goes; how many went."""
        where, conversation_id = conversation, conversation.id
        records = await self.store.records(where.workspace, now=0.0)
        doomed = [r.id for r in records if message_id in r.source_ids
                  and (r.conversation == conversation_id or r.channel == where.channel)]
        return await self.store.delete(where.workspace, doomed)

    async def forget_conversation(self, conversation: Conversation) -> int:
        """A conversation is being forgotten: every record derived from it goes too (merged ones included), and its
        extraction job; how many records went. Call it before the conversation's messages are deleted."""
        where, conversation_id = conversation, conversation.id
        messages, _ = await self._messages(conversation_id)
        said = {m.id for m in messages}
        records = await self.store.records(where.workspace, now=0.0)
        doomed = [r.id for r in records if r.conversation == conversation_id
                  or (r.channel == where.channel and said.intersection(r.source_ids))]
        await self.store.forget_job(where.workspace, conversation_id)
        return await self.store.delete(where.workspace, doomed)

    async def forget(self, workspace: str, record_id: str) -> bool:
        return await self.store.delete(workspace, [record_id]) > 0

    async def forget_workspace(self, workspace: str) -> int:
        self._indexes.pop(workspace, None)
        return await self.store.forget_workspace(workspace)
