"""The application: the one object the Slack bot, the console, the command line and the evals talk to.

Messages and effects go in through :meth:`Pipeline.submit_item` (one dedup rule: ``InboxItem.dedup_keys``); turns
run through :meth:`Pipeline.run`; what the next turn would send comes from :meth:`Pipeline.context`, built by the
turn's own collaborators; the reply a conversation still owes, compaction on demand, forgetting, dead letters and
memory administration are here too. Transports never reach past it into the executor or the stores.

What runs turns (the model, its window and budget, the compactor, recall, memory) is built when first needed, so a
command that only reads what is stored never loads a model's stack."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from threadkeeper.persistence import (
    CheckpointKind,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointStore,
    ConversationSummary,
    Forgetter,
    Inbox,
    InboxItem,
    LineageEntry,
    MemoryRecord,
    MemoryStore,
    MemoryVersion,
    Message,
    MessageFlags,
    NotesStore,
    NotFoundError,
    Pace,
    Role,
    Signals,
    ThreadkeeperError,
)

from ._numpy import import_now as import_numpy
from .conversation import PRIVACY, Conversation, slack_id
from .handoff import CompactionReport, Compactor
from .lexicon import load as load_words
from .memory import Extraction, Memory, Source
from .models import ContextBudget, Tokenizer
from .recall import Recall
from .safety import read_rules
from .turn import Clock, ContextReport, Intake, Model, Preview, ReplyExecutor, TurnEvents, TurnResult

log = logging.getLogger("threadkeeper.app")

POSTED = "posted"
"""Conversation flag: the checkpoint whose reply the transport last confirmed delivered."""
RECOVER_WITHIN_SECONDS = 3_600.0
"""A committed turn whose reply was never confirmed is still owed if it is at most this old; an older one is left
(the thread has moved on)."""


@dataclass(frozen=True)
class Turns:
    """What runs and previews turns, built from the model's settings (see :func:`threadkeeper.root.build_pipeline`)."""

    executor: ReplyExecutor
    preview: Preview
    clock: Clock
    compactor: Compactor | None = None
    recall: Recall | None = None
    memory: Memory | None = None


@dataclass(frozen=True)
class OwedReply:
    """The reply of a committed turn that its transport never confirmed delivered."""

    checkpoint_id: str
    text: str
    committed_at: float
    notice: str | None = None
    """What the reply tells the person under it, as its turn stored it."""
    sources: tuple[Source, ...] = ()
    """Where the memory it cited was said, as its turn stored it."""


@dataclass(frozen=True)
class Forgotten:
    keys: int
    """Stored keys of the conversation's history that went."""
    records: int
    """Memory records derived from it that went."""


class Pipeline:
    def __init__(self, *, checkpoints: CheckpointStore, inbox: Inbox, notes: NotesStore, forgetter: Forgetter,
                 memory_store: MemoryStore, signals: Signals, pace: Pace,
                 turns: Turns | Callable[[], Turns]) -> None:
        self.checkpoints = checkpoints
        self.signals = signals
        self.pace = pace
        self.inbox = inbox
        self.notes = notes
        self.forgetter = forgetter
        self.memory_store = memory_store
        self._turns = turns

    # -- what runs turns (built on first use) ----------------------------------------------------

    async def preload(self) -> None:
        """Build what runs turns and load what a first acknowledgement or a first turn would otherwise load while
        the event loop waits (the redaction rules from detect-secrets, the word lists and ``wordfreq``'s tokenizer,
        numpy: together about a second): a worker that serves Slack awaits it before it listens, so no
        acknowledgement and no other conversation's turn waits on an import. The loading runs in a thread."""
        self.turns  # noqa: B018 - built now, on the loop, as it would be by the first acknowledgement
        await asyncio.to_thread(_preloaded)

    @property
    def turns(self) -> Turns:
        if not isinstance(self._turns, Turns):
            self._turns = self._turns()
        return self._turns

    @property
    def executor(self) -> ReplyExecutor:
        return self.turns.executor

    @property
    def preview(self) -> Preview:
        return self.turns.preview

    @property
    def clock(self) -> Clock:
        """When the pipeline's own messages are written (a replay sets the thread's time)."""
        return self.turns.clock

    @property
    def compactor(self) -> Compactor | None:
        return self.turns.compactor

    @property
    def recall(self) -> Recall | None:
        return self.turns.recall

    @property
    def memory(self) -> Memory | None:
        return self.turns.memory

    @property
    def budget(self) -> ContextBudget:
        return self.executor.budget

    @property
    def model(self) -> Model:
        """The model turns call."""
        return self.executor.loop.model

    @property
    def tokenizer(self) -> Tokenizer:
        return self.executor.input.tokenizer

    def use_intake(self, intake: Intake) -> None:
        """What the transport settles as a turn takes its messages (authors' names, routing, a joined thread's
        earlier messages): set once, by the transport that serves this pipeline."""
        self.executor.input.intake = intake

    # -- what comes in ---------------------------------------------------------------------------

    def message(self, text: str, *, role: Role = "user", author: str | None = None, id: str | None = None,
                created_at: float | None = None, pinned: bool = False, late: bool = False) -> Message:
        """A message as the inbox and the history store it, counted once (a person's, unless ``role`` says);
        ``late``: see :attr:`persistence.MessageFlags.late`."""
        return self.executor.input.message(text, role=role, author=author, id=id, created_at=created_at,
                                           flags=MessageFlags(pinned=pinned, late=late))

    async def submit(self, conversation: Conversation | str, text: str, *, author: str | None = None,
                     id: str | None = None, created_at: float | None = None, reply_expected: bool = True,
                     pinned: bool = False, event_id: str | None = None) -> bool:
        """Append a person's message to the conversation's inbox (deduplicated by id and event id)."""
        message = self.message(text, author=author, id=id, created_at=created_at, pinned=pinned)
        return await self.submit_item(conversation, InboxItem(event_id=event_id, message=message,
                                                              reply_expected=reply_expected))

    async def submit_item(self, conversation: Conversation | str, item: InboxItem, *, front: bool = False,
                          flags: Mapping[str, str] | None = None, reply: Conversation | None = None) -> bool:
        """Queue ``item`` (a message or an effect) once: a copy of it is a duplicate by ``InboxItem.dedup_keys``,
        whichever transport or replay sent it. ``front``: before every waiting item (see :meth:`Inbox.append`).
        What the transport said about the channel's privacy, and its own ``flags``, are kept with the item (in the
        same step): the worker that takes the turn, and memory later, know them without asking again. ``reply``:
        the item is a reply in the conversation's thread, known elsewhere as ``reply`` (see :meth:`thread_of`).
        A person's message is kept with its secrets redacted, after the end of its author's last message when this
        process stored that one (:meth:`TurnInput.arriving`). One round trip to Redis."""
        conversation = as_conversation(conversation)
        item = self.executor.input.arriving(item, conversation.id)
        known = {PRIVACY: conversation.privacy} if conversation.privacy != "unknown" else {}
        kept = {**known, **(flags or {})}
        appended = await self.inbox.append(conversation.id, item, front=front, flags=kept,
                                           thread_of=(reply.id, conversation.thread) if reply is not None else None)
        if appended:
            self.executor.input.stored(conversation.id, item)
        if appended and kept:
            self.notes.heard(conversation.id, kept)
        return appended

    async def arriving(self, conversation: Conversation, flag: str, person: str | None) -> tuple[str | None,
                                                                                             str | None]:
        """For a message arriving, before its event is acknowledged, in one round trip: the conversation's ``flag``
        as stored now, and what ``person`` has open in the transport (:meth:`remember_view`), kept with their
        message as a hint for the turn answering it."""
        return await self.notes.arriving(conversation.id, flag,
                                         (conversation.workspace, person) if person is not None else None)

    # -- turns -----------------------------------------------------------------------------------

    async def pending(self, conversation: Conversation | str) -> int:
        """Inbox items no turn has taken yet (items held by a turn awaiting resume do not count)."""
        return await self.executor.pending(as_conversation(conversation).id)

    async def run(self, conversation: Conversation | str, events: TurnEvents | None = None) -> list[TurnResult]:
        """Run the conversation's turns while its inbox has items, under its lease (none when another worker holds
        it)."""
        return await self.executor.run(as_conversation(conversation), events)

    async def settle(self, seconds: float | None = None) -> None:
        """Wait for what turns left running in the background: the compactions planned ahead (a worker that stops in
        order, a command that exits, a test). With ``seconds``, at most that long: what still runs then is cancelled,
        so nothing of it writes after the process stopped."""
        if isinstance(self._turns, Turns):  # (nothing runs before turns are built)
            await self._turns.executor.compactor.settle(seconds)

    async def stop(self, conversation: Conversation | str) -> None:
        """A person asked to stop the conversation's running turn: whichever worker runs it stops it (see
        :meth:`services.turn.ReplyExecutor.stop`); nothing happens when no turn runs."""
        await self.signals.stop(as_conversation(conversation).id)

    async def honour_stops(self) -> None:
        """Listen for stop requests and stop the turns this worker runs (until cancelled)."""
        async for conversation_id in self.signals.stops():
            if self.executor.stop(conversation_id):
                log.info("%s: its running turn was stopped by a person", conversation_id)

    async def take_call(self, name: str, interval_seconds: float) -> float:
        """Take the next call of an outside service's rate-limited method ``name`` for the whole fleet: 0.0 when it
        may be made now, else the seconds left before it may (see :class:`persistence.Pace`)."""
        return await self.pace.take(name, interval_seconds)

    async def hold_calls(self, name: str, seconds: float) -> None:
        """No worker calls ``name`` for ``seconds`` (the service answered ``Retry-After``)."""
        await self.pace.hold(name, seconds)

    async def owing(self) -> list[str]:
        """Conversations that owe work (queued items, a reply not confirmed): what a sweep resumes."""
        return await self.inbox.pending_conversations()

    async def reply_owed(self, conversation: Conversation | str) -> OwedReply | None:
        """The reply of the conversation's last turn, when that turn committed but its delivery was never confirmed
        (:meth:`delivered`) and it is recent enough to matter; None otherwise."""
        conversation_id = as_conversation(conversation).id
        # read with the lease by the worker settling it (its flags too), else read now
        state = self.executor.opened(conversation_id) or await self.checkpoints.get_state(conversation_id)
        if state is None or state.head_checkpoint_id is None or \
                await self.notes.flag(conversation_id, POSTED) == state.head_checkpoint_id:
            return None
        head = await self.checkpoints.get(conversation_id, state.head_checkpoint_id)
        done_at = head.outcome.at if head.outcome else head.meta.created_at
        if head.kind is not CheckpointKind.TURN or head.status is not CheckpointStatus.COMPLETED or \
                time.time() - done_at > RECOVER_WITHIN_SECONDS:
            return None
        if not head.message_count:
            return None  # a turn that added no message (a pin, an unpin): the reply before it is an earlier turn's
        last = (await self.checkpoints.load_history(conversation_id, head.id)).messages[-1]
        if last.role != "assistant" or not last.text.strip() or \
                any(p.type in ("tool_call", "tool_result") for p in last.parts):
            return None  # a turn that only recorded messages
        shown = head.outcome or CheckpointOutcome()
        return OwedReply(head.id, last.text, head.meta.created_at, shown.notice,
                         tuple(Source.of(s) for s in shown.sources))

    async def delivered(self, conversation: Conversation | str, checkpoint_id: str) -> None:
        """The transport confirmed the reply of ``checkpoint_id`` delivered whole."""
        await self.notes.set_flag(as_conversation(conversation).id, POSTED, checkpoint_id)

    async def was_delivered(self, conversation: Conversation | str, checkpoint_id: str) -> bool:
        return await self.notes.flag(as_conversation(conversation).id, POSTED) == checkpoint_id

    # -- on demand -------------------------------------------------------------------------------

    async def compact(self, conversation: Conversation | str, *, dry_run: bool = False, reason: str = "manual",
                      with_model: bool = False) -> CompactionReport:
        """Compact now with this pipeline's budget (the internal compaction command); returns the report.

        A dry run computes everything and writes nothing, and calls no model unless ``with_model`` (the
        narrative is then carried as it is). A conversation whose turn awaits resume is refused. The summarized
        checkpoint stays untouched; the new one forks from it."""
        if self.compactor is None:
            raise ThreadkeeperError("this pipeline has no compactor")
        return await self.compactor.compact(as_conversation(conversation).id, budget=self.budget, dry_run=dry_run,
                                            reason=reason, with_model=with_model)

    async def context(self, conversation: Conversation | str, *, arriving: Sequence[Message] = (),
                      asker: str | None = None) -> ContextReport:
        """What the next turn would send to the model, written nowhere (see :class:`services.turn.Preview`)."""
        return await self.preview(as_conversation(conversation), arriving=arriving, asker=asker)

    async def references(self, conversation: Conversation | str) -> dict[str, str]:
        """Message id by short reference (``#N``), over the conversation's whole lineage."""
        conversation_id = as_conversation(conversation).id
        state = await self.checkpoints.require_state(conversation_id)
        if state.head_checkpoint_id is None or self.recall is None:
            return {}
        history = await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id)
        index = await self.recall.sync(conversation_id, history)
        return {f"#{ref}": ident for ref, ident in index.ref_map().items()}

    # -- what is stored --------------------------------------------------------------------------

    async def healthy(self) -> bool:
        """Whether the store answers now."""
        return await self.checkpoints.reachable()

    async def durability(self) -> str:
        """How the store keeps acknowledged messages across its own restart: ``aof``, ``rdb`` or ``none``."""
        return await self.checkpoints.durability()

    async def eviction(self) -> str:
        """The store's ``maxmemory-policy``: ``noeviction``, an evicting policy, or ``unknown``."""
        return await self.checkpoints.eviction()

    async def exists(self, conversation: Conversation | str) -> bool:
        return await self.checkpoints.conversation_exists(as_conversation(conversation).id)

    async def has_history(self, conversation: Conversation | str) -> bool:
        """Whether a turn of the conversation was committed (it has a head checkpoint)."""
        state = await self.checkpoints.get_state(as_conversation(conversation).id)
        return state is not None and state.head_checkpoint_id is not None

    async def lineage(self, conversation: Conversation | str) -> list[LineageEntry]:
        """Every checkpoint of the conversation, oldest first."""
        return await self.checkpoints.lineage(as_conversation(conversation).id)

    async def messages(self, conversation: Conversation | str) -> int:
        """The conversation's messages so far (``persistence.messages_so_far``): the count ``conversations``,
        ``history`` and ``context`` all show."""
        conversation_id = as_conversation(conversation).id
        state = await self.checkpoints.require_state(conversation_id)
        return await self.checkpoints.messages_at(conversation_id, state.head_checkpoint_id)

    async def conversations(self, limit: int) -> tuple[list[ConversationSummary], int]:
        """The ``limit`` conversations active most recently, newest first, and how many are stored (from the store's
        directory of conversations: what it costs grows with ``limit``, not with what is stored)."""
        ids, total = await self.checkpoints.recent(limit)
        rows = []
        for cid in ids:
            try:
                rows.append(await self.checkpoints.summary(cid))
            except NotFoundError:  # its keys expired or were deleted since it was listed
                await self.checkpoints.unlist(cid)
                total -= 1
        return rows, total

    async def flag(self, conversation: Conversation | str, name: str) -> str | None:
        """A transport's fact about a conversation (a subscribed thread, the message showing a status, …)."""
        return await self.notes.flag(as_conversation(conversation).id, name)

    async def set_flag(self, conversation: Conversation | str, name: str, value: str) -> None:
        await self.notes.set_flag(as_conversation(conversation).id, name, value)

    async def remember_thread(self, reply: Conversation, thread_ts: str) -> None:
        """Remember which thread a reply was posted in; ``reply`` is the conversation its own ts would be as a thread
        (a deletion that names only the reply finds its thread)."""
        await self.notes.remember_thread(reply.id, thread_ts)

    async def thread_of(self, reply: Conversation) -> str | None:
        return await self.notes.thread_of(reply.id)

    async def remember_view(self, workspace: str, user: str, view: str) -> None:
        """What a person has open in the transport now (a channel, a message): a hint for the turns answering them,
        never an instruction ("" forgets it)."""
        await self.notes.remember_view(workspace, user, view)

    async def view_of(self, workspace: str, user: str) -> str | None:
        return await self.notes.view_of(workspace, user)

    # -- forgetting ------------------------------------------------------------------------------

    async def forget(self, conversation: Conversation | str) -> Forgotten:
        """Delete a conversation: what memory derived from it first (while its messages still say what they were),
        then its whole history. Refused (``InvalidTransitionError``) while a turn holds it."""
        conversation = as_conversation(conversation)
        records = await self.memory.forget_conversation(conversation) if self.memory is not None else 0
        return Forgotten(await self.forgetter.conversation(conversation.id), records)

    async def forgettable(self, conversation: Conversation | str) -> list[str]:
        """The stored keys :meth:`forget` would delete (none: nothing is stored)."""
        return await self.forgetter.keys_of(as_conversation(conversation).id)

    async def conversations_of_workspace(self, workspace: str) -> list[str]:
        slack_id("team", workspace)
        return await self.forgetter.conversations_of_team(workspace)

    async def forget_workspace(self, workspace: str) -> tuple[int, list[str]]:
        """Delete every conversation of a workspace and its memory: how many keys went, and the conversations left
        because a turn held them (forget those again once it has finished)."""
        slack_id("team", workspace)
        deleted, busy = await self.forgetter.team(workspace)
        if self.memory is not None:
            deleted += await self.memory.forget_workspace(workspace)
        else:
            deleted += await self.memory_store.forget_workspace(workspace)
        return deleted, busy

    # -- dead letters ----------------------------------------------------------------------------

    async def dead_letter_counts(self) -> dict[str, int]:
        return await self.inbox.dead_letter_counts()

    async def dead_letters(self, conversation: Conversation | str) -> list[str]:
        return await self.inbox.dead_letters(as_conversation(conversation).id)

    async def retry_dead_letters(self, conversation: Conversation | str) -> tuple[int, list[str]]:
        return await self.inbox.retry_dead_letters(as_conversation(conversation).id)

    # -- memory administration -------------------------------------------------------------------

    async def memory_records(self, workspace: str | None = None, channel: str | None = None) -> list[MemoryRecord]:
        """The live records of one workspace (or every workspace), of one channel if given."""
        _named(workspace, channel)
        spaces = [workspace] if workspace else await self.memory_store.workspaces()
        return [r for w in spaces for r in await self.memory_store.records(w)
                if not channel or r.channel == channel]

    async def memory_record(self, record_id: str, workspace: str | None = None) -> MemoryRecord:
        for record in await self.memory_records(workspace):
            if record.id == record_id:
                return record
        raise ThreadkeeperError(f"no memory record {record_id!r}" + (f" in workspace {workspace}" if workspace
                                                                     else "") + "; `threadkeeper memory list` "
                                "shows the ids")

    async def forget_memory_record(self, record_id: str, workspace: str | None = None) -> MemoryRecord:
        record = await self.memory_record(record_id, workspace)
        await self.memory_store.delete(record.workspace, [record.id])
        return record

    async def forget_memory(self, workspace: str) -> int:
        """Every memory key of a workspace (records, versions, switches, jobs)."""
        slack_id("team", workspace)
        return await self.memory_store.forget_workspace(workspace)

    async def switch_memory(self, workspace: str, channel: str | None, on: bool) -> None:
        """Switch memory on or off for a workspace or one of its channels. Switched on, the conversations already
        stored there owe extraction again (the sweep had let go of them while memory was off): the idle sweep
        extracts them without waiting for their next message."""
        _named(workspace, channel)
        await self.memory_store.set_switch(workspace, f"channel:{channel}" if channel else "workspace", on)
        if on:
            await self.memory_store.owe(await self.checkpoints.listed(Conversation.beginning(workspace, channel)))

    async def memory_seen_by(self, workspace: str, person: str) -> dict[str, list[MemoryRecord]]:
        """The live records of a workspace that a person may see now (memory's access rule, asked of the transport),
        by channel, newest first; none where memory is not configured."""
        if self.memory is None:
            return {}
        seen = await self.memory.seen_by(await self.memory_store.records(workspace), person)
        by_channel: dict[str, list[MemoryRecord]] = {}
        for record in sorted(seen, key=lambda r: (-r.said_at, r.id)):
            by_channel.setdefault(record.channel, []).append(record)
        return by_channel

    async def forget_seen_memory(self, workspace: str, person: str, record_id: str) -> MemoryRecord | None:
        """Forget one record for a person who may see it now (the rule of :meth:`memory_seen_by`, asked again): the
        record forgotten, or None (no such record, or one the person may not see: nothing changes)."""
        if self.memory is None:
            return None
        record = next((r for r in await self.memory_store.records(workspace) if r.id == record_id), None)
        if record is None or not await self.memory.seen_by([record], person):
            return None
        await self.memory.forget(workspace, record.id)
        return record

    async def memory_switched_on(self, workspace: str, channel: str) -> bool:
        """Whether memory works in a channel now (the settings and its switches)."""
        return self.memory is not None and await self.memory.channel_enabled(workspace, channel)

    async def extract_memory(self, conversation: Conversation | str) -> Extraction:
        """Extract the conversation's new messages into memory now (idle or not)."""
        conversation = as_conversation(conversation)
        flags = (await self.notes.get(conversation.id)).flags
        return await self._memory().extract(conversation.said(flags.get(PRIVACY)), force=True)

    async def consolidate_memory(self, workspace: str, channel: str | None) -> MemoryVersion | None:
        _named(workspace, channel)
        return await self._memory().consolidate(workspace, f"channel:{channel}" if channel else "workspace")

    @property
    def memory_on(self) -> bool:
        """Whether the settings allow memory in any workspace (the memory sweep has work to look for)."""
        return self.memory is not None and bool(self.memory.config.workspaces)

    async def sweep_memory(self) -> list[Extraction]:
        """Extract from conversations that have gone idle (a bounded number), then consolidate what changed."""
        return await self._memory().sweep()

    def _memory(self) -> Memory:
        if self.memory is None:
            raise ThreadkeeperError("memory is not configured for this pipeline")
        return self.memory


def _preloaded() -> None:
    """What :meth:`Pipeline.preload` loads, each once per process."""
    read_rules()
    load_words()
    import_numpy()


def _named(workspace: str | None, channel: str | None) -> None:
    """A workspace and a channel a command names, each checked when given (:func:`slack_id`)."""
    if workspace is not None:
        slack_id("team", workspace)
    if channel is not None:
        slack_id("channel", channel)


def as_conversation(value: Conversation | str) -> Conversation:
    """A conversation as the face takes it: the typed value a transport built, or a stored id (a command's argument,
    the sweep's registry), parsed once here."""
    return value if isinstance(value, Conversation) else Conversation.of(value)
