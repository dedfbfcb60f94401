"""Pre-turn compaction: replace an oversized history with pinned and recent user messages plus a handoff.

The result is written as a new ``compaction`` checkpoint forked from the summarized one; the head
moves to it by compare-and-set. Nothing earlier is edited, trimmed or deleted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from pydantic import ValidationError

from threadkeeper.persistence import (
    CheckpointKind,
    CheckpointStore,
    CorruptRecordError,
    HeadConflictError,
    History,
    InvalidTransitionError,
    Message,
    MessageFlags,
    Notes,
    NotesStore,
    NotFoundError,
    PreparedHandoff,
    TextPart,
    compaction_checkpoint,
    new_id,
)

from ..context import calibration, current_text, label, measure, next_ref, visible
from ..models import ContextBudget, Tokenizer, bound_text
from ..safety import redact
from ..tracing import COMPACTIONS, event
from .compaction import (
    RUNNING_NOTES,
    CompactionReport,
    Narrated,
    Plan,
    RunningFold,
    changes_of,
    fold,
    foldable,
    suspects,
    target_for,
)
from .ledger import Ledger, LedgerBuilder, NarrativeEntry, load_ledger
from .narrative import Summarizer
from .view import SHARES, Narrative, RenderedHandoff, render_handoff

log = logging.getLogger("threadkeeper.compactor")

HANDOFF_OVERHEAD = 8
"""Tokens the handoff message costs beyond its text (role, separators): kept out of its cap."""
PREPARED_SECONDS = 24 * 3600.0
"""How long a handoff planned ahead is kept unused (a thread quiet for longer plans again, or compacts as before)."""
PREPARING_SECONDS = 30.0
"""The lease of the job planning a handoff ahead, renewed every third of it while the job runs."""
PLANNED_CONVERSATIONS = 10_000
"""How many conversations this process remembers having planned ahead for (least recently used first out)."""


def unadoptable(record: PreparedHandoff, history: History, notes: Notes) -> str | None:
    """Why the compaction of ``history`` cannot adopt the handoff planned ahead in ``record`` (None: it can): the
    head no longer descends from the checkpoint it was planned from, or a message it read was edited or deleted
    since (``notes``: as they are now). The one rule by which a turn adopts a plan and a job plans again."""
    at = record.message_count
    if record.from_checkpoint_id not in history.chain or len(history.messages) < at \
            or (at > 0 and history.messages[at - 1].id != record.last_message_id):
        return "the head no longer descends from it"
    if record.changes != changes_of(notes):
        return "messages were edited or deleted since"
    return None


class Compactor:
    def __init__(self, *, checkpoints: CheckpointStore, notes: NotesStore, tokenizer: Tokenizer,
                 summarizer: Summarizer, fixed_prompt_tokens: int) -> None:
        self.checkpoints = checkpoints
        self.notes = notes
        self.tokenizer = tokenizer
        self.summarizer = summarizer
        self.fixed_prompt_tokens = fixed_prompt_tokens
        self._running: OrderedDict[str, RunningFold] = OrderedDict()
        self._running_notes = 0
        self._preparing: dict[str, asyncio.Task[None]] = {}
        """conversation → the job planning its next handoff ahead, while it runs in this process."""
        self._planned: OrderedDict[str, tuple[str, float, dict[str, str | None]]] = OrderedDict()
        """conversation → the checkpoint its kept handoff was planned from here, when, and the edits and deletions it
        read (so each epoch is planned once while that plan is kept and still adoptable)."""
        self._later: dict[str, tuple[str, ContextBudget]] = {}
        """conversation → the newest checkpoint a turn committed while its job planning ahead ran (and the budget):
        the job looks again from there once done."""

    # -- the running fold ----------------------------------------------------------------------

    async def advance(self, conversation_id: str, history: History, budget: ContextBudget,
                      previous: Ledger | None = None, changes: dict[str, str | None] | None = None) -> RunningFold:
        """Fold the committed messages no compaction can keep into the conversation's running fold.

        Called before every turn that holds it (see :meth:`_folds_ahead`), and by whatever compacts or plans a handoff
        ahead; ``previous`` and ``changes`` when the caller has them (a compaction), else
        the epoch's ledger is read once and the edits last seen are assumed (a compaction checks them)."""
        root = history.chain[0]
        running = self._running.pop(conversation_id, None)
        if running is not None:
            self._running_notes -= len(running.builder.ledger.notes)
        if changes is None:
            changes = running.changes if running is not None else {}
        if running is None or running.root != root or not running.matches(history.messages, changes):
            if previous is None:
                previous = await self._previous_ledger(conversation_id, history)
            running = RunningFold(root, dict(changes), [], LedgerBuilder(previous, count=self.tokenizer.count))
        # Twice the retained share, as the compaction may count tokens differently by then; it checks.
        end = foldable(history.messages, 2 * budget.retained_user_tokens)
        if end > len(running.consumed):
            fresh = history.messages[len(running.consumed):end]
            # This fold is out of ``_running`` until it is done, and callers that hold one use it at once (``plan``
            # clones it first), so no other caller reads it meanwhile.
            await fold(running.builder, fresh, running.changes)
            running.consumed.extend(m.id for m in fresh)
        replaced = self._running.pop(conversation_id, None)  # (another caller's, put while this one folded)
        if replaced is not None:
            self._running_notes -= len(replaced.builder.ledger.notes)
        self._running[conversation_id] = running
        self._running_notes += len(running.builder.ledger.notes)
        while self._running_notes > RUNNING_NOTES and len(self._running) > 1:  # the least recently used leave
            _, gone = self._running.popitem(last=False)
            self._running_notes -= len(gone.builder.ledger.notes)
        return running

    # -- hook used by the reply executor -------------------------------------------------------

    async def before_turn(self, conversation_id: str, history: History | None, incoming: Sequence[Message],
                          budget: ContextBudget, notes: Notes, waiting: Callable[[], Awaitable[None]] | None = None,
                          ) -> tuple[History | None, CompactionReport | None]:
        """The history the turn goes on with: ``history``, or, when it reached the trigger, its compaction, forked
        and made the head (``notes``: the conversation's notes as the turn's edits, deletions and pins leave them).

        The compaction is the handoff planned ahead (:meth:`prepare_after`) when one can be adopted, else one
        planned now; ``waiting`` is called first when the turn has to wait for it (the transport says so)."""
        if history is None:
            return history, None
        if self._folds_ahead(conversation_id, history):
            try:
                await self.advance(conversation_id, history, budget)
            except CorruptRecordError as exc:  # the compaction, if one is due, reports it
                log.warning("running fold of %s skipped: %s", conversation_id, exc)
        if not self.should_compact(history, incoming, budget):
            return history, None
        narrated = await self._adoptable(conversation_id, history, notes, waiting)
        if narrated is None and waiting is not None:
            await waiting()
        report, plan = await self._plan_and_report(conversation_id, history, incoming, budget, "trigger", notes=notes,
                                                   narrated=narrated)
        try:
            new_history = await self._write(conversation_id, history, plan, report)
        except HeadConflictError:
            state = await self.checkpoints.require_state(conversation_id)
            return await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id), report
        return new_history, report

    def _folds_ahead(self, conversation_id: str, history: History) -> bool:
        """Whether the turn brings the running fold up to date before it goes on: only when this process holds it
        for the epoch already (a turn's few messages). A process that does not (its first turn in the thread after a
        restart, one of many threads a worker serves in turn, a fold let go) would fold the epoch's hundreds of
        messages while the person waits: whatever compacts or plans the next handoff ahead (after the turn, in the
        background) folds them (:meth:`advance`), and holds the fold from then on."""
        running = self._running.get(conversation_id)
        return running is not None and running.root == history.chain[0]

    def should_compact(self, history: History, incoming: Sequence[Message], budget: ContextBudget) -> bool:
        """Whether this turn compacts first: the history with what arrives reached the trigger.

        Loop breaker: an epoch that is only a compaction has nothing new to fold, so it is compacted again
        only when what arrives needs room that a tighter handoff can give (never twice for the same input).
        """
        tokens = measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens, extra=incoming)
        if tokens < budget.trigger_tokens:
            return False
        if len(history.chain) == 1 and history.checkpoint.kind is CheckpointKind.COMPACTION:
            estimates = budget.in_estimates(calibration(history, fixed_prompt_tokens=budget.fixed_prompt_tokens))
            return sum(m.tokens for m in visible(history.messages)) > target_for(estimates, incoming)
        return True

    async def preview(self, conversation_id: str, history: History, pending: Sequence[Message],
                      budget: ContextBudget, notes: Notes) -> tuple[CompactionReport, History]:
        """What the compaction a turn would make now gives, written nowhere and with no model call: its report and
        the history the turn would go on with (the fork it would write, in memory): the handoff planned ahead when
        the turn would adopt it."""
        narrated = await self._adoptable(conversation_id, history, notes)
        report, plan = await self._plan_and_report(conversation_id, history, pending, budget, "preview", dry_run=True,
                                                   use_model=False, notes=notes, narrated=narrated)
        fork = compaction_checkpoint(conversation_id, forked_from=history.checkpoint.id, messages=plan.messages,
                                     covered_ids=plan.covered_ids, info=self._info(plan, report))
        return report, History.model_construct(checkpoint=fork, messages=plan.messages, chain=[fork.id])

    # -- planned ahead ---------------------------------------------------------------------------

    def prepare_after(self, conversation_id: str, checkpoint_id: str, budget: ContextBudget) -> None:
        """A turn committed ``checkpoint_id`` (and its reply was delivered): when that leaves the history past the
        preparation threshold (:meth:`ContextBudget.preparing`: four turns like it before the trigger, asked
        through :meth:`should_compact`), plan the next compaction from that checkpoint in the background, as a job
        of its own under its own lease, and keep it for the turn that reaches the trigger (:meth:`before_turn`
        adopts it). A kept plan that the head has left behind (messages it read were edited or deleted since, or the
        head no longer descends from where it was planned) is planned again from the new head, so the turn that
        reaches the trigger still finds one it can adopt. When a job is already planning for the conversation here,
        it looks again from the newest such checkpoint once done. Returns at once."""
        if budget.preparing() is None:
            return
        if conversation_id in self._preparing:
            self._later[conversation_id] = (checkpoint_id, budget)
            return
        task = asyncio.create_task(self._prepare_from(conversation_id, checkpoint_id, budget),
                                   name=f"prepare:{conversation_id}")
        self._preparing[conversation_id] = task
        task.add_done_callback(lambda done: self._preparing.pop(conversation_id, None)
                               if self._preparing.get(conversation_id) is done else None)

    async def settle(self, seconds: float | None = None) -> None:
        """Wait for the handoffs this process is planning ahead (a worker's orderly stop, a command that exits;
        tests). With ``seconds``, for at most that long: the jobs still planning then are cancelled (planning ahead
        only saves a later turn the summarizer's wait; that turn compacts as before), so none is left to write
        after the process stopped."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while self._preparing:
            jobs = list(self._preparing.values())
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            _, pending = await asyncio.wait(jobs, timeout=left)
            for job in pending:
                job.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _prepare_from(self, conversation_id: str, checkpoint_id: str, budget: ContextBudget) -> None:
        """:meth:`_prepare` from ``checkpoint_id``, then from the newest checkpoint a turn committed meanwhile (see
        :meth:`prepare_after`), until no newer one came."""
        try:
            while True:
                await self._prepare(conversation_id, checkpoint_id, budget)
                later = self._later.pop(conversation_id, None)
                if later is None or later[0] == checkpoint_id:
                    return
                checkpoint_id, budget = later
        except asyncio.CancelledError:
            self._later.pop(conversation_id, None)
            raise

    async def _prepare(self, conversation_id: str, checkpoint_id: str, budget: ContextBudget) -> None:
        """Plan the next compaction from ``checkpoint_id`` and keep it (see :meth:`prepare_after`). Writes no
        checkpoint and never moves the head: a crash anywhere in it leaves the head as it was."""
        try:
            history = await self.checkpoints.load_history(conversation_id, checkpoint_id)
            added = len(history.messages) - history.checkpoint.message_count  # what its last turn grew it by
            ahead = budget.preparing(history.visible_tokens() - history.visible_tokens(added))
            if ahead is None or not self.should_compact(history, (), ahead):
                return
            notes = await self.notes.get(conversation_id)
            planned, at, read = self._planned.get(conversation_id, ("", 0.0, {}))
            if planned in history.chain and read == changes_of(notes) and \
                    time.monotonic() - at < PREPARED_SECONDS / 2:
                self._planned.move_to_end(conversation_id)
                return  # this epoch's next handoff is planned already, still kept, and nothing it read changed
            token = await self.checkpoints.claim_preparation(conversation_id, PREPARING_SECONDS)
            if token is None:
                return  # another worker plans it
            heartbeat = asyncio.create_task(self._renew_preparation(conversation_id, token))
            try:
                await self._plan_ahead(conversation_id, history, budget, notes)
            finally:
                heartbeat.cancel()
                await self.checkpoints.release_preparation(conversation_id, token)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - planning ahead is an optimization: the turn compacts as before
            log.warning("%s: the next handoff was not planned ahead: %s", conversation_id, exc)

    async def _plan_ahead(self, conversation_id: str, history: History, budget: ContextBudget, notes: Notes) -> None:
        try:
            kept = await self.checkpoints.prepared(conversation_id)
        except CorruptRecordError:
            kept = None  # planned again, in its place
        if kept is not None and unadoptable(kept, history, notes) is None:
            self._remember(conversation_id, kept.from_checkpoint_id, kept.changes)
            return
        if await self.checkpoints.paused_turn(conversation_id) is not None:
            return  # a turn awaiting resume is never compacted
        report, plan = await self._plan_and_report(conversation_id, history, (), budget, "trigger", notes=notes)
        record = PreparedHandoff(from_checkpoint_id=history.checkpoint.id, message_count=len(history.messages),
                                 last_message_id=history.messages[-1].id if history.messages else "",
                                 narrative=[e.model_dump(mode="json") for e in plan.ledger.narrative],
                                 strategy=plan.strategy, detail=plan.detail, changes=changes_of(notes))
        if await self.checkpoints.keep_prepared(conversation_id, record, ttl_seconds=PREPARED_SECONDS):
            self._remember(conversation_id, history.checkpoint.id, record.changes)
            event(COMPACTIONS, "prepared", conversation_id=conversation_id, from_checkpoint_id=history.checkpoint.id,
                  strategy=report.strategy, tokens_before=report.tokens_before, duration_ms=report.duration_ms)

    def _remember(self, conversation_id: str, checkpoint_id: str, changes: dict[str, str | None]) -> None:
        self._planned[conversation_id] = (checkpoint_id, time.monotonic(), dict(changes))
        self._planned.move_to_end(conversation_id)
        while len(self._planned) > PLANNED_CONVERSATIONS:
            self._planned.popitem(last=False)

    async def _renew_preparation(self, conversation_id: str, token: str) -> None:
        while True:
            await asyncio.sleep(PREPARING_SECONDS / 3)
            if not await self.checkpoints.renew_preparation(conversation_id, token, PREPARING_SECONDS):
                return

    async def _adoptable(self, conversation_id: str, history: History, notes: Notes,
                         waiting: Callable[[], Awaitable[None]] | None = None) -> Narrated | None:
        """What the compaction planned ahead gives the compaction of ``history`` (the summarizer's narrative,
        written then), when it can be adopted: the head still descends from the checkpoint it was planned from,
        and the messages it read were not edited or deleted since. None: the compaction asks the summarizer now.
        When this process is planning it at the moment, the turn waits for that (it finishes sooner than a
        summarizer call started now)."""
        planning = self._preparing.get(conversation_id)
        if planning is not None:
            if waiting is not None:
                await waiting()
            await asyncio.wait([planning])
        try:
            record = await self.checkpoints.prepared(conversation_id)
        except CorruptRecordError as exc:
            log.warning("%s: the handoff planned ahead is not adopted: %s", conversation_id, exc)
            return None
        if record is None:
            return None
        why = unadoptable(record, history, notes)
        if why is not None:
            log.info("%s: the handoff planned from %s is not adopted: %s", conversation_id, record.from_checkpoint_id,
                     why)
            return None
        try:
            entries = [NarrativeEntry.model_validate(e) for e in record.narrative]
        except ValidationError as exc:
            log.warning("%s: the handoff planned ahead is not adopted: %s", conversation_id, exc)
            return None
        return Narrated(Narrative((), record.strategy, record.detail), entries, record.from_checkpoint_id)

    async def compact(self, conversation_id: str, *, budget: ContextBudget, dry_run: bool = False,
                      reason: str = "manual", with_model: bool = False) -> CompactionReport:
        """Compact now, whatever the trigger says (the internal compaction command).

        A dry run calls no model unless ``with_model`` (its narrative is then the previous one, carried)."""
        state = await self.checkpoints.require_state(conversation_id)
        paused = await self.checkpoints.paused_turn(conversation_id)
        if paused is not None:
            raise InvalidTransitionError(
                f"conversation {conversation_id} has a turn awaiting resume ({paused.id}); it is never "
                "compacted. Resume or answer it first.")
        if state.head_checkpoint_id is None:
            raise NotFoundError(f"conversation {conversation_id} has no completed checkpoint to compact")
        history = await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id)
        if len(history.chain) == 1 and history.checkpoint.kind is CheckpointKind.COMPACTION:
            tokens = measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens)
            if tokens <= budget.target_tokens:  # nothing new since the last compaction, and it fits
                return CompactionReport(
                    conversation_id=conversation_id, previous_checkpoint_id=history.checkpoint.id,
                    new_checkpoint_id=None, tokens_before=tokens, tokens_after=tokens,
                    kept_messages=len(history.messages), dropped_messages=0, summary_tokens=0,
                    headroom_tokens=budget.trigger_tokens - tokens, strategy="none", duration_ms=0.0, reason=reason,
                    dry_run=dry_run, notes=["nothing to compact: the head is a compaction with no newer messages "
                                            f"and already within the target ({budget.target_tokens:,} tokens)"])
        report, plan = await self._plan_and_report(conversation_id, history, [], budget, reason, dry_run=dry_run,
                                                   use_model=not dry_run or with_model)
        if not dry_run:
            try:
                await self._write(conversation_id, history, plan, report, reload=False)
            except HeadConflictError:
                report.superseded = True
        return report

    # -- planning ------------------------------------------------------------------------------

    async def _plan_and_report(self, conversation_id: str, history: History, incoming: Sequence[Message],
                               budget: ContextBudget, reason: str, *, dry_run: bool = False,
                               use_model: bool = True, notes: Notes | None = None,
                               narrated: Narrated | None = None) -> tuple[CompactionReport, Plan]:
        started = time.perf_counter()
        fixed = budget.fixed_prompt_tokens
        tokens_before = measure(history, fixed_prompt_tokens=fixed)
        # The plan is made in the local estimate's units, with the thresholds converted by how this provider
        # counts (never loosened below the estimate: the request guard counts in estimates, and a compaction must
        # fit by both measures); the report states sizes as the provider counts them.
        ratio = calibration(history, fixed_prompt_tokens=fixed)
        planned = max(1.0, ratio)
        if notes is None:
            notes = await self.notes.get(conversation_id)
        previous = await self._previous_ledger(conversation_id, history)
        running = await self.advance(conversation_id, history, budget, previous, changes_of(notes))
        plan = await self.plan(history.messages, incoming, notes, previous, budget.in_estimates(planned),
                               use_model=use_model, running=running, narrated=narrated)
        plan.calibration = planned
        tokens_after = plan.tokens_after if ratio == 1.0 else round(ratio * (fixed + plan.tokens_after)) - fixed
        report = CompactionReport(
            conversation_id=conversation_id, previous_checkpoint_id=history.checkpoint.id, new_checkpoint_id=None,
            tokens_before=tokens_before, tokens_after=tokens_after, kept_messages=plan.kept,
            dropped_messages=plan.dropped, summary_tokens=plan.summary_tokens,
            headroom_tokens=budget.trigger_tokens - tokens_after, strategy=plan.strategy,
            duration_ms=round((time.perf_counter() - started) * 1000, 2), reason=reason,
            generation=plan.ledger.generation, dry_run=dry_run, tightened=plan.tightened, carried=plan.carried,
            notes=[plan.detail] if plan.detail else [])
        return report, plan

    async def _previous_ledger(self, conversation_id: str, history: History) -> Ledger | None:
        root_id = history.chain[0]
        root = history.checkpoint if root_id == history.checkpoint.id else \
            await self.checkpoints.get(conversation_id, root_id)
        raw = root.meta.info.get("ledger") if root.kind is CheckpointKind.COMPACTION else None
        if not raw:
            return None
        try:
            return load_ledger(raw)
        except ValidationError as exc:
            raise CorruptRecordError(f"ledger of compaction checkpoint {root.id} in {conversation_id}",
                                     str(exc).splitlines()[0]) from None

    async def plan(self, messages: Sequence[Message], incoming: Sequence[Message], notes: Notes,
                   previous: Ledger | None, budget: ContextBudget, *, use_model: bool = True,
                   running: RunningFold | None = None, narrated: Narrated | None = None) -> Plan:
        """The replacement history for ``messages``; pure apart from the summarizer call. ``running``: the
        ledger already folded over the oldest of them (used when none of those is kept). ``narrated``: the
        narrative the summarizer wrote ahead of need for an earlier checkpoint of this epoch, used instead of
        asking it now (the rest of the plan is made as always, over every message up to now)."""
        people = [m for m in messages if m.role == "user" and not m.flags.handoff and not m.flags.runtime]
        live = [m for m in (self._current(m, notes) for m in people) if m is not None]
        pinned_ids = {m.id for m in live if notes.pins.get(m.id, m.flags.pinned)}
        changes = changes_of(notes)
        # Taken now: the running fold may be extended while this plan waits for the summarizer.
        base = running.builder.clone() if running is not None and running.matches(messages, changes) else None
        consumed = list(running.consumed) if base is not None and running is not None else []
        changed = suspects(notes)
        last_reply = _last_reply(messages)
        now = max([m.created_at for m in messages] + [m.created_at for m in incoming] or [time.time()])
        target = target_for(budget, incoming)
        # The handoff always keeps room for at least the summary cap: a large input makes room by keeping
        # fewer recent messages verbatim, never by evicting what earlier generations accumulated.
        room = max(0, target - min(budget.summary_cap_tokens, target))
        retained_budget, pin_budget, shrink = min(budget.retained_user_tokens, room), min(budget.pin_tokens, room), 1.0
        # What a compaction of this history with nothing pressing on it would give the handoff: the notes such a
        # handoff would show are carried even when this one has less room to show them.
        calm_room = max(0, budget.target_tokens - min(budget.summary_cap_tokens, budget.target_tokens))
        calm = self._retain(live, pinned_ids, min(budget.retained_user_tokens, calm_room),
                            min(budget.pin_tokens, calm_room), calm_room)
        carry = budget.target_tokens - sum(m.tokens for m in calm) - HANDOFF_OVERHEAD
        deleted = {mid for mid, text in changes.items() if text is None}
        # an earlier narrative line that cites a message deleted since is not carried (nor shown to the summarizer)
        carried_before = [e for e in (previous.narrative if previous else []) if deleted.isdisjoint(e.source_ids)]
        narrative: Narrative | None = narrated.narrative if narrated is not None else None
        entries: list[NarrativeEntry] = list(narrated.entries) if narrated is not None else carried_before
        tightened = 0
        while True:
            kept = self._retain(live, pinned_ids, retained_budget, pin_budget, room)
            kept_ids = {m.id for m in kept}
            folded = [m for m in messages if m.id not in kept_ids and not m.flags.runtime and not m.flags.handoff]
            if base is not None and kept_ids.isdisjoint(consumed):
                builder = await fold(base.clone(), messages[len(consumed):], changes, kept_ids)
            else:
                builder = await fold(LedgerBuilder(previous, count=self.tokenizer.count), messages, changes, kept_ids)
            ledger = builder.evict().build()
            ledger.generation = (previous.generation if previous else 0) + 1
            kept_tokens = sum(m.tokens for m in kept)
            cap = max(64, int((target - kept_tokens) * shrink) - HANDOFF_OVERHEAD)
            if narrative is None:  # the summarizer reads messages as they read now: a deleted one not at all
                narrative, entries = await self.summarizer.handoff_narrative(
                    carried_before, [c for c in (self._current(m, notes) for m in folded
                                                 if m.role in ("user", "assistant")) if c is not None],
                    int(cap * SHARES["narrative"]), use_model=use_model, label=ledger.label)
            # rendered in a thread (choosing among the ledger's notes and redacting the text take a few hundred
            # milliseconds once an epoch holds hundreds of notes): the event loop serves others meanwhile
            rendered, handoff = await asyncio.to_thread(self._handoff, ledger, entries, changed, cap, max(cap, carry),
                                                        last_reply, next_ref(messages) - 1, now)
            replacement = [handoff, *kept]
            after = sum(m.tokens for m in replacement)
            if after <= target or tightened >= 8:
                break
            tightened += 1
            if retained_budget or pin_budget:
                retained_budget, pin_budget = int(retained_budget * 0.7), int(pin_budget * 0.7)
            else:
                shrink *= 0.9
        ledger.notes = rendered.notes
        ledger.narrative = entries
        ledger.keep_refs()
        covered = [m.id for m in messages if m.id not in kept_ids and not m.flags.runtime and not m.flags.handoff]
        dropped = len([m for m in messages if m.id not in kept_ids])
        carried = {"notes": len(rendered.notes), "notes_evicted": rendered.evicted_lines,
                   "narrative_lines": len(entries)}
        return Plan(messages=replacement, covered_ids=covered, ledger=ledger, strategy=narrative.strategy,
                    summary_tokens=handoff.tokens, kept=len(kept), dropped=dropped, tokens_after=after,
                    tightened=tightened, carried=carried, detail=narrative.detail,
                    prepared_from=narrated.checkpoint_id if narrated is not None else None)

    def _handoff(self, ledger: Ledger, entries: list[NarrativeEntry], changed: dict[str, str], cap: int, carry: int,
                 last_reply: str | None, top_ref: int, now: float) -> tuple[RenderedHandoff, Message]:
        """The handoff rendered within ``cap`` tokens, and its message with every secret redacted."""
        rendered = render_handoff(ledger, entries, changed, cap_tokens=cap, count=self.tokenizer.count, now=now,
                                  carry_tokens=carry, last_reply=last_reply)
        return rendered, self._message(redact(rendered.standing), redact(rendered.notes_text), rendered.source_ids,
                                       top_ref, now)

    def _current(self, message: Message, notes: Notes) -> Message | None:
        text = current_text(message, notes)
        if text is None:
            return None
        if message.id not in notes.changes:
            return message
        return self.tokenizer.counted(message.model_copy(update={"parts": [TextPart(text=text)]}))

    def _retain(self, people: list[Message], pinned_ids: set[str], retained_budget: int,
                pin_budget: int, room: int) -> list[Message]:
        """Pinned messages within the pin budget, then the newest people's messages within the retained budget,
        all within ``room``."""
        chosen: dict[str, Message] = {}
        used = 0
        for m in reversed([m for m in people if m.id in pinned_ids]):
            if used + m.tokens > pin_budget:
                continue
            chosen[m.id] = m.model_copy(update={"flags": m.flags.model_copy(update={"pinned": True})})
            used += m.tokens
        retained_budget = min(retained_budget, room - used)
        used = 0
        for m in reversed(people):
            if m.id in chosen:
                continue
            if used + m.tokens <= retained_budget:
                chosen[m.id] = m
                used += m.tokens
                continue
            left = retained_budget - used
            if left >= 48:
                text, _ = bound_text(m.text, self.tokenizer, left - 24)
                chosen[m.id] = self.tokenizer.counted(m.model_copy(update={"parts": [TextPart(text=text)]}))
            break
        order = {m.id: i for i, m in enumerate(people)}
        return sorted(chosen.values(), key=lambda m: order[m.id])

    def _message(self, standing: str, notes: str, source_ids: list[str], top_ref: int, now: float) -> Message:
        """The handoff message: its standing part and, as a second part, its notes (``note_tokens`` counts
        them, so a turn can leave them out; see :func:`services.context.visible`). It carries the highest
        reference it covers, so numbering continues after it, and the thread's time (the newest message's),
        not the clock's."""
        base = Message(id=new_id("handoff"), role="user",
                       parts=[TextPart(text=standing), *([TextPart(text=notes)] if notes else [])],
                       flags=MessageFlags(handoff=True),
                       tokens=0, source_ids=source_ids, ref=top_ref or None, created_at=now)
        return self.tokenizer.counted(base).model_copy(
            update={"note_tokens": [self.tokenizer.count("\n" + notes)] if notes else []})

    # -- writing -------------------------------------------------------------------------------

    @staticmethod
    def _info(plan: Plan, report: CompactionReport) -> dict[str, object]:
        """What the compaction checkpoint records of its plan (the ledger the next generation continues)."""
        info: dict[str, object] = {"reason": report.reason, "strategy": plan.strategy,
                                   "tokens_before": report.tokens_before, "tokens_after": plan.tokens_after,
                                   "generation": plan.ledger.generation, "calibration": plan.calibration,
                                   "ledger": plan.ledger.model_dump(mode="json")}
        if plan.prepared_from:
            info["prepared_from"] = plan.prepared_from
        return info

    async def _write(self, conversation_id: str, history: History, plan: Plan, report: CompactionReport, *,
                     reload: bool = True) -> History | None:
        """Fork and commit the compaction; with ``reload``, the history at the new head (what the turn goes on with)."""
        try:  # forked and made the head in one atomic step: nothing half-written survives a crash
            fork = await self.checkpoints.fork_compaction(conversation_id, forked_from=history.checkpoint.id,
                                                          messages=plan.messages, covered_ids=plan.covered_ids,
                                                          info=self._info(plan, report))
        except HeadConflictError:
            report.superseded = True
            raise
        report.new_checkpoint_id = fork.id
        event(COMPACTIONS, "compaction", conversation_id=conversation_id, checkpoint_id=fork.id,
              forked_from=history.checkpoint.id, reason=report.reason, strategy=report.strategy,
              tokens_before=report.tokens_before, tokens_after=report.tokens_after,
              generation=report.generation, duration_ms=report.duration_ms)
        return await self.checkpoints.load_history(conversation_id, fork.id) if reload else None


def _last_reply(messages: Sequence[Message]) -> str | None:
    """The assistant's last answer in ``messages`` (``[#N] text``), if the history ends with one (people's messages
    after it are kept anyway): what a short answer right after a compaction refers to."""
    for m in reversed(messages):
        if m.flags.runtime or m.flags.handoff:
            continue
        if m.role == "assistant" and m.text.strip() and not any(p.type in ("tool_call", "tool_result")
                                                                 for p in m.parts):
            return f"[{label(m.id, m.ref)}] {m.text.strip()}"
        if m.role == "assistant":
            continue  # a tool step: the answer is before or after it
        if m.role == "user" and m.flags.addressed:
            return None  # a question to the bot came after its last reply: that one is what the thread is on
    return None
