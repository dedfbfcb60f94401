"""The reply executor: one entry point that runs a conversation's turns under its lease.

For each turn: take the inbox items that arrived since the last turn (:class:`TurnInput`: bounded, settled,
prepared, with the notes their edits, deletions and pins leave), load the head history, compact it first if it
reached the trigger, start a turn checkpoint, add the per-turn runtime context (:class:`ContextAssembler`), call the
model with tools (:class:`ModelLoop`), append the reply, complete the checkpoint and move the head by
compare-and-set, then post the reply; once it is posted, the compactor may plan the next compaction in the
background (``Compactor.prepare_after``), so the turn that reaches the trigger does not wait for the summarizer. It
loops while the inbox has items and releases the lease at the end. The preview of the next turn (``Preview``) calls
the same three collaborators, so it shows what a turn sends.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from threadkeeper.persistence import (
    Checkpoint,
    CheckpointStatus,
    ConversationState,
    HeadConflictError,
    History,
    Inbox,
    InvalidTransitionError,
    Lease,
    LeaseLostError,
    LeaseManager,
    Message,
    Opening,
    ThreadkeeperError,
)

from ..conversation import PRIVACY, Conversation
from ..models import (
    RECORDS,
    ContextBudget,
    ModelContextError,
    ModelError,
    ModelSetupError,
    ModelTimeoutError,
    ToolContext,
)
from ..tracing import TRACE, TURNS, event, new_trace_id
from .assembler import ContextAssembler
from .input import PreparedTurn, TurnInput
from .loop import ModelLoop
from .seams import CheckpointStore as Checkpoints
from .seams import Compactor, HeldFlags
from .types import (
    COMPACTING,
    THINKING,
    ExecutorConfig,
    InboxEffects,
    NoCompaction,
    SilentEvents,
    TurnEvents,
    TurnResult,
    TurnState,
    TurnStatus,
)

if TYPE_CHECKING:
    from ..handoff import CompactionReport
    from ..memory import Source

log = logging.getLogger("threadkeeper.executor")

_APPROVAL = re.compile(r"^\s*(yes|y|approve[d]?|ok|okay|go ahead|do it|confirm(ed)?)\b", re.IGNORECASE)


class _ContextOverflow(Exception):
    """The provider refused a turn's request as too long; the turn was superseded and took nothing."""


def notice(compaction: CompactionReport | None, said: str | None) -> str | None:
    """What a turn's reply tells the person under it (the one rule, stored with the turn so every delivery of the
    reply shows it): that the turn folded earlier messages, and what the transport said (``said``: a thread still
    being read, say)."""
    return " ".join(n for n in (compaction.notice() if compaction else None, said) if n) or None


class _LeaseLost(Exception):
    """The lease lapsed and another worker took the conversation over: between two turns, or during one (whose
    writes the store then refuses)."""


class TurnStopped(Exception):
    """A person asked to stop the turn (Slack's stop button) before its model answered."""


class _TakenOver(Exception):
    """The lease lapsed during a turn and another worker failed that turn on taking the conversation over."""


class ReplyExecutor:
    def __init__(self, *, checkpoints: Checkpoints, inbox: Inbox, leases: LeaseManager, budget: ContextBudget,
                 config: ExecutorConfig, input: TurnInput, assembler: ContextAssembler, loop: ModelLoop,
                 compactor: Compactor | None = None, effects: InboxEffects | None = None,
                 held: HeldFlags | None = None) -> None:
        self.checkpoints = checkpoints
        self.inbox = inbox
        self.leases = leases
        self.budget = budget
        self.config = config
        self.input = input
        """Inbox items → a prepared turn."""
        self.assembler = assembler
        """The turn's runtime context: recall and memory within their shares."""
        self.loop = loop
        """The model and its tools."""
        self.compactor: Compactor = compactor or NoCompaction()
        self.effects = effects
        self.held = held
        """Where the conversation's flags are read from the opening's copy while this worker holds its lease."""
        self._opened: dict[str, ConversationState | None] = {}
        """conversation → its state as its opening read it, until the reply an earlier holder owed is settled."""
        self._turning: set[str] = set()
        """Conversations whose turns this worker runs now."""
        self._calls: dict[str, asyncio.Future[tuple[TurnStatus, str]]] = {}
        """conversation → its turn's model loop, while it runs (what a stop abandons)."""
        self._stops: set[str] = set()
        """Conversations whose running turn a person asked to stop before its model was called."""
        self._lost: set[str] = set()
        """Conversations whose lease another worker took while this one ran a turn (its model call is abandoned)."""

    def opened(self, conversation_id: str) -> ConversationState | None:
        """The conversation's state as this worker's opening read it with the lease, while it settles what an
        earlier holder owed (before its first turn); None otherwise."""
        return self._opened.get(conversation_id)

    def stop(self, conversation_id: str) -> bool:
        """A person asked to stop the conversation's running turn (Slack's stop button): if this worker runs it, its
        model call is abandoned (or never made), its checkpoint superseded, nothing it began showing stays, and
        the people's messages it took are kept in the history, unanswered; the next message starts a fresh turn.
        Returns whether this worker runs that turn."""
        if conversation_id not in self._turning:
            return False
        call = self._calls.get(conversation_id)
        self._stops.add(conversation_id)
        if call is not None:
            call.cancel()
        return True

    # -- public --------------------------------------------------------------------------------

    async def run(self, conversation: Conversation, events: TurnEvents | None = None) -> list[TurnResult]:
        """Run turns while the inbox has items. Returns at once (no turns) if another worker holds the lease.

        Everything a conversation shows is done by the lease holder: it first delivers what an earlier holder
        left owed (``TurnEvents.recover``), and posts each reply with the lease still renewed, before the next
        turn and before the release. Once the inbox is drained and every reply delivered, it takes the
        conversation off the registry of owed work (the sweep's) and looks once more for items that arrived
        meanwhile; a conversation left owing anything (a reply Slack did not confirm, a failure) stays on it.

        A run of one turn costs five round trips to Redis, and its transport's record of delivery a sixth: the
        opening (the lease with the state, the active turn, the inbox and the flags, which the turn and its
        transport then read from that copy), the turn's checkpoint with its messages, the commit (after which
        this process holds the history it committed), leaving the registry of owed work, and one more look at
        the inbox that releases the lease when nothing waits. A worker that does not hold the history reads
        its new part (one more)."""
        events = events or SilentEvents()
        conversation_id = conversation.id
        opening = await self.checkpoints.open_turn(conversation_id, lease_seconds=self.config.lease_seconds)
        if opening is None:
            return []
        # what the transport said about the channel when its messages arrived, if this value does not say
        conversation = conversation.said(opening.notes.flags.get(PRIVACY))
        lease = opening.lease
        results: list[TurnResult] = []
        released = settled = False
        self._turning.add(conversation_id)
        if self.held is not None:
            self.held.hold(conversation_id, opening.notes.flags, opening.lease.token)
        self._opened[conversation_id] = opening.state
        try:
            # Recovery may read Slack back for as long as its reads lag (a reply or a half-written draft a stopped
            # worker left): the lease is renewed meanwhile, so no other worker takes the thread over and posts too.
            renewing = asyncio.create_task(self._heartbeat(lease))
            try:
                owed = not await events.recover(conversation)
            except LeaseLostError as exc:  # another worker holds the conversation now: it delivers what is owed
                log.warning("%s: %s", conversation_id, exc)
                released = True
                return results
            finally:
                renewing.cancel()
            self._opened.pop(conversation_id, None)
            prepared = await self.input.intake.prepare(conversation) if self.input.intake is not None else None
            if prepared is not None and prepared.queued:
                opening = None  # it queued messages: read the inbox again
            said = prepared.notice if prepared is not None and prepared.more else None
            idle = 0
            while not owed:
                # The lease is renewed while the turn runs and while its reply is posted, so a long model call
                # or a slow Slack never lets another worker take the thread over mid-turn (and both answer it).
                heartbeat = asyncio.create_task(self._heartbeat(lease))
                try:
                    result = await self._turn_with_retries(conversation, events, lease, opening, said)
                    if result is not None and result.reply:
                        delivered = await events.reply(conversation, result.reply, kind=result.status,
                                                       trace_id=result.trace_id, checkpoint_id=result.checkpoint_id,
                                                       notice=result.notice, sources=result.sources)
                        owed = delivered is False
                except (_LeaseLost, LeaseLostError):  # a refused write of the turn, or of its reply's flags
                    log.warning("lease on %s lost; another worker continues", conversation_id)
                    released = True
                    break
                except _TakenOver:  # the worker that took over answers, and shows what it does
                    released = True
                    if await self.leases.release(lease):  # still ours after all: nobody else shows anything
                        await events.status(conversation, None)
                    break
                except asyncio.CancelledError:
                    await self._set_aside(conversation_id)
                    raise
                finally:
                    heartbeat.cancel()
                if result is not None and result.status in ("completed", "recorded") and \
                        self.config.prepare_compaction:
                    # after its reply: the next handoff may be planned ahead, off the path of any reply
                    self.compactor.prepare_after(conversation_id, result.checkpoint_id, self.budget)
                if result is not None and result.status in ("completed", "recorded"):
                    await self.assembler.after_reply(conversation_id)  # (and what recall readies for the next turn)
                opening = None  # the next turn opens with the lease renewed
                if result is not None:
                    results.append(result)
                if owed or (result is not None and result.status == "awaiting_resume"):
                    break
                idle = idle + 1 if result is None else 0
                if result is None or result.inbox_left == 0:
                    if idle > 2:  # items counted but none taken, again and again: the sweep tries later
                        break
                    waiting = await self._settle(conversation, events, paused=result is None,
                                                 lease=lease if not (prepared is not None and prepared.more) else None)
                    if waiting is None:  # drained, and the lease released with the same look at the inbox
                        settled = released = True
                        break
                    if waiting == 0:
                        settled = True
                        break
            if prepared is not None and prepared.more and not released:
                await self.inbox.mark_pending(conversation_id)  # the transport comes back to it (a rate limit)
                settled = False
            if owed:
                log.warning("%s: a reply is still owed; the sweep delivers it", conversation_id)
            elif not released and not settled and results and results[-1].status == "awaiting_resume":
                settled = await self._settle(conversation, events, paused=True) == 0
        finally:
            self._turning.discard(conversation_id)
            self._stops.discard(conversation_id)
            self._lost.discard(conversation_id)
            self._opened.pop(conversation_id, None)
            self.checkpoints.let_go(conversation_id)
            try:
                if not released:
                    if not settled:  # its flags' writes still fenced by the lease it releases next
                        await events.status(conversation, None)
                    await self.leases.release(lease)
            finally:
                if self.held is not None:
                    self.held.let_go(conversation_id)
        return results

    async def _settle(self, conversation: Conversation, events: TurnEvents, *, paused: bool,
                      lease: Lease | None = None) -> int | None:
        """Under the lease, with nothing owed: the work shown is over, and the conversation leaves the registry of
        owed work unless items arrived meanwhile (then it stays, and this returns how many wait). ``paused``: a
        turn may await resume, holding items that do not count (else every queued item counts). With ``lease``
        (and not ``paused``), the look at the inbox also releases the lease when nothing waits: None says it did
        (or that the lease was no longer this worker's)."""
        conversation_id = conversation.id
        await events.status(conversation, None)
        await self.inbox.unmark_pending(conversation_id)
        if lease is not None and not paused:
            waiting = await self.leases.release_if_drained(lease)
            if not waiting:
                return None
        else:
            waiting = await self.pending(conversation_id) if paused else await self.inbox.size(conversation_id)
        if waiting:
            await self.inbox.mark_pending(conversation_id)
        return waiting

    async def pending(self, conversation_id: str) -> int:
        """Inbox items no turn has taken yet (items held by a turn awaiting resume do not count)."""
        paused = await self.checkpoints.paused_turn(conversation_id)
        return max(0, await self.inbox.size(conversation_id) - (paused.inbox_consumed if paused else 0))

    async def _set_aside(self, conversation_id: str) -> None:
        """A turn stopped from outside (shutdown): its running checkpoint is superseded, not failed; its inbox
        items were never consumed, so whoever takes the lease next runs the turn again from the start."""
        try:
            state = await self.checkpoints.get_state(conversation_id)
            if state and state.active_turn_id:
                active = await self.checkpoints.get(conversation_id, state.active_turn_id)
                if active.status is CheckpointStatus.RUNNING:
                    await self.checkpoints.supersede(conversation_id, active.id)
        except Exception:  # noqa: BLE001 - best effort: a turn left running is failed by the next worker
            log.exception("setting aside the stopped turn of %s failed", conversation_id)

    async def _heartbeat(self, lease: Lease) -> None:
        """Renew ``lease`` every third of its duration until cancelled. Once it lapsed, watch it instead: when
        another worker holds it, the turn's model call is abandoned at once (:meth:`_lose`), since nothing it writes
        would be kept (a lease that lapsed with nobody taking it still lets the turn finish)."""
        every = max(0.05, self.config.lease_seconds / 3)
        conversation_id = lease.conversation_id
        lapsed = False
        while True:
            await asyncio.sleep(every)
            if not lapsed and await self.leases.renew(lease, self.config.lease_seconds) is not None:
                continue
            if not lapsed:
                log.warning("lease on %s lapsed during a turn; its commit will not overwrite newer work",
                            conversation_id)
                lapsed = True
            if await self.leases.holder(conversation_id) not in (None, lease.token):
                self._lose(conversation_id)
                return

    def _lose(self, conversation_id: str) -> None:
        """Another worker holds the conversation now: the running turn's model call is abandoned (a streamed reply
        stops being read, and its connection is closed), and the turn ends as one whose lease was lost."""
        log.warning("lease on %s taken by another worker during a turn; its model call is abandoned",
                    conversation_id)
        self._lost.add(conversation_id)
        call = self._calls.get(conversation_id)
        if call is not None:
            call.cancel()

    # -- one turn ------------------------------------------------------------------------------

    async def _turn_with_retries(self, conversation: Conversation, events: TurnEvents, lease: Lease,
                                 opening: Opening | None, said: str | None = None) -> TurnResult | None:
        conversation_id = conversation.id
        overflowed = False
        for attempt in range(self.config.commit_attempts):
            if opening is None:
                opening = await self.checkpoints.open_turn(conversation_id, lease_seconds=self.config.lease_seconds,
                                                           lease=lease)
                if opening is None:
                    raise _LeaseLost(conversation_id)
            try:
                return await self._turn(conversation, events, opening, overflowed, said)
            except LeaseLostError as exc:  # another worker holds the lease now: nothing more is written here
                log.warning("%s: %s", conversation_id, exc)
                raise _LeaseLost(conversation_id) from exc
            except HeadConflictError as conflict:
                log.info("head of %s moved during a turn (attempt %d): %s", conversation_id, attempt + 1, conflict)
            except _ContextOverflow as overflow:
                overflowed = True
                await self._compact_tighter(conversation, events, str(overflow))
            opening = None
        raise HeadConflictError(conversation_id, None, None)

    async def _compact_tighter(self, conversation: Conversation, events: TurnEvents, why: str) -> None:
        """After a context-length refusal: compact to half the usual target, so the retried request fits
        however differently the provider counts."""
        conversation_id = conversation.id
        log.warning("%s: the provider refused the request as too long; compacting tighter (%s)", conversation_id, why)
        await events.status(conversation, COMPACTING)
        b = self.budget
        tighter = replace(b, target_tokens=b.target_tokens // 2, retained_user_tokens=b.retained_user_tokens // 2,
                          pin_tokens=b.pin_tokens // 2)
        try:
            await self.compactor.compact(conversation_id, budget=tighter, reason="context-length")
        except ThreadkeeperError as exc:  # nothing to compact, or the head moved: the retry says what happens
            log.warning("%s: tighter compaction not done: %s", conversation_id, exc)

    async def _turn(self, conversation: Conversation, events: TurnEvents, opening: Opening, overflowed: bool = False,
                    said: str | None = None) -> TurnResult | None:
        """One turn under its own trace id, logged as one line (``threadkeeper.turn``). ``said``: what the transport
        tells the person under the reply (:func:`notice`)."""
        conversation_id = conversation.id
        token = TRACE.set(new_trace_id())
        try:
            result = await self._run_turn(conversation, events, opening, overflowed, said)
            if result is not None:
                spend = result.spend
                report = result.compaction
                event(TURNS, "turn", conversation_id=conversation_id, checkpoint_id=result.checkpoint_id,
                      status=result.status, consumed=result.consumed, model_calls=result.model_calls,
                      model_seconds=round(result.model_seconds, 3),
                      input_tokens=spend.input_tokens if spend else 0,
                      output_tokens=spend.output_tokens if spend else 0,
                      cost_usd=round(spend.cost_usd, 6) if spend else 0.0,
                      compaction=report.new_checkpoint_id if report is not None else None)
            return result
        finally:
            TRACE.reset(token)

    async def _run_turn(self, conversation: Conversation, events: TurnEvents, opening: Opening,
                        overflowed: bool = False, said: str | None = None) -> TurnResult | None:
        conversation_id = conversation.id
        state, active = opening.state, opening.active
        paused: Checkpoint | None = None
        if active is not None:
            if active.awaiting_resume:
                paused = active
            elif active.status is CheckpointStatus.RUNNING:
                await self.checkpoints.fail(conversation_id, active.id,
                                            error="abandoned: its worker's lease expired before it completed")
        items = self.input.bounded(await self.inbox.peek(conversation_id, start=opening.inbox_start,
                                                         quarantine=True, raw=opening.inbox_raw))
        if not items:
            return None
        head_id = state.head_checkpoint_id if state else None
        history = await self.checkpoints.load_history(conversation_id, head_id) if head_id and not paused else None
        later = opening.inbox_start + len(items)

        async def mention_waiting() -> bool:
            return any(i.kind == "message" and i.reply_expected and not i.route
                       for i in await self.inbox.peek(conversation_id, start=later))

        # A paused turn already decided to answer; its routing is not asked again.
        prepared = await self.input.prepare(conversation, items, history, opening.notes, route=paused is None,
                                            mention_waiting=mention_waiting)
        if prepared.effects and self.effects is not None:
            await self.effects.apply(conversation, prepared.effects)
        if paused is not None:
            turn = await self._resume(conversation_id, paused, prepared)
        else:
            incoming = self.input.numbered(history.messages if history else [], prepared.incoming)
            history, compaction = await self._maybe_compact(conversation, history, incoming, prepared, events)
            turn = await self._start(conversation, history, prepared, incoming)
            turn.compaction = compaction
            if not prepared.wants_reply:
                await self._commit(conversation_id, turn)
                return TurnResult(conversation_id, turn.checkpoint.id, "recorded", consumed=len(items),
                                  compaction=compaction, inbox_left=turn.inbox_left)
        await events.status(conversation, THINKING)
        trace_id = TRACE.get() or new_trace_id()
        try:
            draft = await events.draft(conversation) if self.loop.model.streams else None
            status, reply = await self._stoppable(conversation_id, self.loop.run(conversation, turn, events, draft))
        except TurnStopped:
            return await self._stopped(conversation_id, turn, trace_id)
        except ModelTimeoutError as exc:
            await self.checkpoints.pause(conversation_id, turn.checkpoint.id,
                                         resume={"reason": "timeout", "error": str(exc),
                                                 **ContextAssembler.paused(turn.runtime)},
                                         outcome=self.loop.outcome(turn))
            reply = ("The model did not answer in time. I saved this turn exactly as it was and will continue "
                     "from there with your next message.")
            return TurnResult(conversation_id, turn.checkpoint.id, "awaiting_resume", reply, len(items), trace_id,
                              compaction=turn.compaction, model_calls=turn.calls, spend=turn.spend)
        except HeadConflictError:
            await self.checkpoints.supersede(conversation_id, turn.checkpoint.id)
            raise
        except LeaseLostError:  # its writes are refused: the worker holding the lease now answers
            raise
        except ModelContextError as exc:
            if overflowed or paused is not None:
                return await self._fail(conversation_id, turn, exc, trace_id)
            await self.checkpoints.supersede(conversation_id, turn.checkpoint.id)  # its inbox items stay queued
            raise _ContextOverflow(str(exc)[:300]) from exc
        except Exception as exc:  # noqa: BLE001 - every failure is recorded and answered
            return await self._fail(conversation_id, turn, exc, trace_id)
        sources = await self.assembler.answered(conversation, reply, turn.runtime)
        said = notice(turn.compaction, said)
        if status == "awaiting_resume":
            return TurnResult(conversation_id, turn.checkpoint.id, status, reply, len(items), trace_id,
                              turn.usage, turn.compaction, turn.calls, spend=turn.spend, sources=sources, notice=said)
        try:
            await self._commit(conversation_id, turn, said, sources)
        except HeadConflictError:
            await self.checkpoints.supersede(conversation_id, turn.checkpoint.id)
            raise
        except InvalidTransitionError as exc:
            # This worker lost the thread (its lease lapsed, say in a long pause) and another worker failed the
            # turn on taking it over: that worker answers from the inbox; this result is dropped, unposted.
            log.warning("turn %s of %s was taken over by another worker; its reply is dropped (%s)",
                        turn.checkpoint.id, conversation_id, exc)
            raise _TakenOver(conversation_id) from exc
        return TurnResult(conversation_id, turn.checkpoint.id, status, reply, len(items), trace_id, turn.usage,
                          turn.compaction, turn.calls, turn.inbox_left, turn.model_seconds, turn.spend, sources=sources,
                          notice=said)

    async def _maybe_compact(self, conversation: Conversation, history: History | None, incoming: list[Message],
                             prepared: PreparedTurn, events: TurnEvents,
                             ) -> tuple[History | None, CompactionReport | None]:
        if history is None:
            return None, None

        async def waiting() -> None:  # no handoff planned ahead can be adopted now: the person is told why they wait
            await events.status(conversation, COMPACTING)

        return await self.compactor.before_turn(conversation.id, history, incoming, self.budget, prepared.notes,
                                                waiting)

    async def _start(self, conversation: Conversation, history: History | None, prepared: PreparedTurn,
                     incoming: list[Message]) -> TurnState:
        conversation_id = conversation.id
        base = list(history.messages) if history else []
        head_id = history.checkpoint.id if history else None
        new = list(incoming)
        stored = list(incoming)
        runtime_id = ""
        if prepared.wants_reply:
            runtime = await self.assembler.assemble(conversation, history, base + new, new, prepared.notes,
                                                    asker=prepared.asker, hint=prepared.hint,
                                                    zone=prepared.zone)
            runtime_id = runtime.message.id
            new.append(runtime.message)
            stored.append(runtime.stored)
        checkpoint = await self.checkpoints.start_turn(conversation_id, parent_id=head_id, from_head=False,
                                                       messages=stored, inbox_consumed=len(prepared.items))
        return TurnState(checkpoint, head_id, base + new, runtime_id, prepared.items, incoming)

    async def _resume(self, conversation_id: str, paused: Checkpoint, prepared: PreparedTurn) -> TurnState:
        history = await self.checkpoints.load_history(conversation_id, paused.id)
        await self.checkpoints.resume(conversation_id, paused.id)
        resume = (paused.outcome.resume or {}) if paused.outcome else {}
        messages = ContextAssembler.resumed(list(history.messages), resume)
        incoming = self.input.numbered(messages, prepared.incoming)
        new: list[Message] = []
        if resume.get("reason") == "authorization":
            call = resume["tool_call"]
            approved = any(_APPROVAL.match(m.text) for m in incoming)
            ctx = ToolContext(conversation_id, paused.id, messages + incoming)
            content = (await self.loop.tools.run(call["name"], call["arguments"], ctx)) if approved else \
                "The person declined this call; it was not run."
            new.append(self.loop.tool_result(call["id"], call["name"], content, ctx.extras.get(RECORDS)))
        new.extend(incoming)
        runtime_ids = [m.id for m in messages if m.flags.runtime]
        await self.checkpoints.append(conversation_id, paused.id, new, inbox_consumed=len(prepared.items))
        checkpoint = await self.checkpoints.get(conversation_id, paused.id)
        return TurnState(checkpoint, paused.meta.parent_id, messages + new, runtime_ids[-1] if runtime_ids else "",
                         prepared.items, incoming)

    # -- helpers -------------------------------------------------------------------------------

    async def _commit(self, conversation_id: str, turn: TurnState, said: str | None = None,
                      sources: Sequence[Source] = ()) -> None:
        """Commit the turn; with its reply, what is shown under it (``said``, ``sources``), so whoever delivers the
        reply (this worker, or the next holder of the lease after a crash) shows the same."""
        outcome = self.loop.outcome(turn).model_copy(update={"notice": said,
                                                              "sources": tuple(s.stored() for s in sources)})
        done = await self.checkpoints.commit(conversation_id, turn.checkpoint.id, expected_head=turn.expected_head,
                                             outcome=outcome, messages=turn.final)
        turn.inbox_left = done.inbox_left
        self.assembler.committed(conversation_id, [*turn.incoming, *turn.final])

    async def _stoppable(self, conversation_id: str,
                         work: Coroutine[Any, Any, tuple[TurnStatus, str]]) -> tuple[TurnStatus, str]:
        """Run the turn's model loop so that :meth:`stop` can abandon it: :class:`TurnStopped` when it did (or when
        the stop came before the loop began), :class:`LeaseLostError` when another worker took the lease
        (:meth:`_lose`); a cancellation from outside (a shutdown) stays one."""
        if conversation_id in self._lost:
            work.close()
            raise LeaseLostError(f"another worker holds {conversation_id} now; its model is not asked")
        if conversation_id in self._stops:
            work.close()
            raise TurnStopped(conversation_id)
        call = asyncio.ensure_future(work)
        self._calls[conversation_id] = call
        try:
            return await call
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if call.cancelled() and not (current and current.cancelling()):
                if conversation_id in self._lost:
                    raise LeaseLostError(f"another worker holds {conversation_id} now; its model call was "
                                         "abandoned") from None
                if conversation_id in self._stops:
                    raise TurnStopped(conversation_id) from None
            raise
        finally:
            self._calls.pop(conversation_id, None)
            self._stops.discard(conversation_id)

    async def _stopped(self, conversation_id: str, turn: TurnState, trace_id: str) -> TurnResult:
        """The turn a person stopped: superseded, its people's messages kept (recorded, unanswered), no reply."""
        log.info("turn %s of %s stopped by a person (trace %s)", turn.checkpoint.id, conversation_id, trace_id)
        await self.checkpoints.supersede(conversation_id, turn.checkpoint.id)
        await self._record_only(conversation_id, turn)
        return TurnResult(conversation_id, turn.checkpoint.id, "stopped", None, len(turn.items), trace_id,
                          compaction=turn.compaction, model_calls=turn.calls, spend=turn.spend)

    async def _record_only(self, conversation_id: str, turn: TurnState) -> None:
        """Keep the turn's people's messages in the history, in a turn of their own that also takes them out of the
        inbox (so neither a failure nor a stop repeats)."""
        salvage = await self.checkpoints.start_turn(conversation_id, parent_id=turn.expected_head, from_head=False,
                                                    messages=turn.incoming, inbox_consumed=len(turn.items))
        try:
            await self.checkpoints.commit(conversation_id, salvage.id, expected_head=turn.expected_head)
        except HeadConflictError:
            await self.checkpoints.supersede(conversation_id, salvage.id)

    async def _fail(self, conversation_id: str, turn: TurnState, exc: BaseException, trace_id: str) -> TurnResult:
        if isinstance(exc, ModelError):  # its message says what the provider said; the traceback only at DEBUG
            log.error("turn %s of %s failed (trace %s): %s", turn.checkpoint.id, conversation_id, trace_id, exc,
                      exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)
        else:
            log.exception("turn %s of %s failed (trace %s)", turn.checkpoint.id, conversation_id, trace_id,
                          exc_info=exc)
        error = f"{type(exc).__name__}: {exc}"[:2000]
        await self.checkpoints.fail(conversation_id, turn.checkpoint.id, error=error, trace_id=trace_id)
        await self._record_only(conversation_id, turn)
        text = f"Sorry, something went wrong while answering (trace id {trace_id}). Please try again."
        problem = None
        if isinstance(exc, ModelSetupError):  # asking again cannot help: no "try again"
            problem = str(exc)
            text = (f"Sorry, I cannot answer: the model provider refuses this bot's configuration (trace id "
                    f"{trace_id}). Whoever runs the bot needs to fix it; its log says how.")
        elif isinstance(exc, ModelError):
            text = f"Sorry, the model could not answer (trace id {trace_id}). Please try again in a moment."
        return TurnResult(conversation_id, turn.checkpoint.id, "failed", text, len(turn.items), trace_id,
                          compaction=turn.compaction, model_calls=turn.calls, spend=turn.spend, problem=problem)


