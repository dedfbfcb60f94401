"""The application: the one object the Slack bot, the console, the command line and the evals talk to.

Messages and effects go in through :meth:`Pipeline.submit` (one dedup rule: ``InboxItem.dedup_keys``); turns run
through :meth:`Pipeline.run`; what the next turn would send comes from :meth:`Pipeline.context`, built by the turn's
own collaborators; compaction on demand, forgetting and memory administration are here too. Transports never reach
past it into the executor or the stores."""

from __future__ import annotations

from collections.abc import Sequence

from threadkeeper.persistence import CheckpointStore, Inbox, InboxItem, Message, MessageFlags, Role

from .handoff import CompactionReport, Compactor
from .memory import Memory
from .models import ContextBudget, Tokenizer
from .recall import Recall
from .turn import Clock, ContextReport, Intake, Model, Preview, ReplyExecutor, TurnEvents, TurnResult


class Pipeline:
    def __init__(self, *, checkpoints: CheckpointStore, inbox: Inbox, executor: ReplyExecutor, preview: Preview,
                 clock: Clock, compactor: Compactor | None = None, recall: Recall | None = None,
                 memory: Memory | None = None) -> None:
        self.clock = clock
        """When the pipeline's own messages are written (a replay sets the thread's time)."""
        self.checkpoints = checkpoints
        self.inbox = inbox
        self.executor = executor
        self.preview = preview
        self.compactor = compactor
        self.recall = recall
        self.memory = memory

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
                created_at: float | None = None, pinned: bool = False) -> Message:
        """A message as the inbox and the history store it, counted once (a person's, unless ``role`` says)."""
        return self.executor.input.message(text, role=role, author=author, id=id, created_at=created_at,
                                           flags=MessageFlags(pinned=pinned))

    async def submit(self, conversation_id: str, text: str, *, author: str | None = None, id: str | None = None,
                     created_at: float | None = None, reply_expected: bool = True, pinned: bool = False,
                     event_id: str | None = None) -> bool:
        """Append a person's message to the conversation's inbox (deduplicated by id and event id)."""
        message = self.message(text, author=author, id=id, created_at=created_at, pinned=pinned)
        return await self.submit_item(conversation_id, InboxItem(event_id=event_id, message=message,
                                                                 reply_expected=reply_expected))

    async def submit_item(self, conversation_id: str, item: InboxItem, *, front: bool = False) -> bool:
        """Queue ``item`` (a message or an effect) once: a copy of it is a duplicate by ``InboxItem.dedup_keys``,
        whichever transport or replay sent it. ``front``: before every waiting item (see :meth:`Inbox.append`)."""
        return await self.inbox.append(conversation_id, item, front=front)

    # -- turns -----------------------------------------------------------------------------------

    async def pending(self, conversation_id: str) -> int:
        """Inbox items no turn has taken yet (items held by a turn awaiting resume do not count)."""
        return await self.executor.pending(conversation_id)

    async def run(self, conversation_id: str, events: TurnEvents | None = None) -> list[TurnResult]:
        return await self.executor.run(conversation_id, events)

    async def compact(self, conversation_id: str, *, dry_run: bool = False, reason: str = "manual",
                      with_model: bool = False) -> CompactionReport:
        """Compact now with this pipeline's budget (the internal compaction command); returns the report.

        A dry run computes everything and writes nothing, and calls no model unless ``with_model`` (the
        narrative is then carried as it is). A conversation whose turn awaits resume is refused. The summarized
        checkpoint stays untouched; the new one forks from it."""
        if self.compactor is None:
            from threadkeeper.persistence import ThreadkeeperError

            raise ThreadkeeperError("this pipeline has no compactor")
        return await self.compactor.compact(conversation_id, budget=self.budget, dry_run=dry_run, reason=reason,
                                            with_model=with_model)

    async def context(self, conversation_id: str, *, arriving: Sequence[Message] = (),
                      asker: str | None = None) -> ContextReport:
        """What the next turn would send to the model, written nowhere (see :class:`services.turn.Preview`)."""
        return await self.preview(conversation_id, arriving=arriving, asker=asker)

    async def references(self, conversation_id: str) -> dict[str, str]:
        """Message id by short reference (``#N``), over the conversation's whole lineage."""
        state = await self.checkpoints.require_state(conversation_id)
        if state.head_checkpoint_id is None or self.recall is None:
            return {}
        history = await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id)
        index = await self.recall.sync(conversation_id, history)
        return {f"#{ref}": ident for ref, ident in index.refs.items()}
