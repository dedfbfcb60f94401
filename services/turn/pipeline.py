"""The one pipeline the bot, the console, the CLI and the evals share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from threadkeeper.persistence import (
    CheckpointStore,
    Inbox,
    InboxItem,
    Message,
    MessageFlags,
    ThreadkeeperError,
)

from ..context import ContextEntry, entries, measure, visible
from ..models import ContextBudget
from .executor import ReplyExecutor
from .types import TurnEvents, TurnResult


@dataclass
class ContextReport:
    """What the next turn of a conversation would send to the model."""

    conversation_id: str
    budget: ContextBudget
    context: list[ContextEntry]
    history_tokens: int
    would_compact: bool
    compaction: Any = None

    @property
    def context_tokens(self) -> int:
        return sum(e.tokens for e in self.context)

    def as_dict(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "window_tokens": self.budget.window_tokens,
                "budget": self.budget.as_dict(), "would_compact": self.would_compact,
                "context": [e.as_dict() for e in self.context], "context_tokens": self.context_tokens}


@dataclass
class Pipeline:
    checkpoints: CheckpointStore
    inbox: Inbox
    executor: ReplyExecutor

    @property
    def budget(self) -> ContextBudget:
        return self.executor.budget

    async def submit(self, conversation_id: str, text: str, *, author: str | None = None, id: str | None = None,
                     created_at: float | None = None, reply_expected: bool = True, pinned: bool = False,
                     event_id: str | None = None) -> bool:
        """Append a person's message to the conversation's inbox (deduplicated by id and event id)."""
        message = self.executor.make_message(text, author=author, id=id, created_at=created_at,
                                             flags=MessageFlags(pinned=pinned))
        return await self.submit_item(conversation_id, InboxItem(event_id=event_id, message=message,
                                                                 reply_expected=reply_expected))

    async def submit_item(self, conversation_id: str, item: InboxItem, *, front: bool = False) -> bool:
        """Queue ``item`` once (deduplicated by its event id and message id); ``front``: before every waiting
        item (see :meth:`Inbox.append`)."""
        keys = [k for k in (item.event_id, f"{item.kind}:{item.message.id}" if item.message else None) if k]
        return await self.inbox.append(conversation_id, item, dedup_keys=keys, front=front)

    async def pending(self, conversation_id: str) -> int:
        """Inbox items no turn has taken yet (items held by a turn awaiting resume do not count)."""
        return await self.executor.pending(conversation_id)

    async def run(self, conversation_id: str, events: TurnEvents | None = None) -> list[TurnResult]:
        return await self.executor.run(conversation_id, events)

    async def compact(self, conversation_id: str, *, dry_run: bool = False, reason: str = "manual",
                      with_model: bool = False) -> Any:
        """Compact now with this pipeline's budget (the internal compaction command); returns the report.

        A dry run computes everything and writes nothing, and calls no model unless ``with_model`` (the
        narrative is then carried as it is). A conversation whose turn awaits resume is refused. The summarized checkpoint stays untouched; the new one forks from it.
        """
        compact = getattr(self.executor.compactor, "compact", None)
        if compact is None:
            raise ThreadkeeperError("this pipeline has no compactor")
        return await compact(conversation_id, budget=self.budget, dry_run=dry_run, reason=reason,
                             with_model=with_model)

    async def context(self, conversation_id: str, *, arriving: Sequence[Message] = (),
                      asker: str | None = None) -> ContextReport:
        """The next turn's context; if that turn would compact first, the context after it (nothing written).

        ``arriving`` are messages to preview as if they reached the inbox now, each asking for a reply
        (``context --message``): the report then holds exactly what that turn would send, the runtime
        context with its recalled messages included. No model is called: a previewed compaction carries the
        narrative as it is. A conversation that does not exist yet is previewed as a new one when a message
        arrives; ``asker`` is who sends it (a Slack user id: what memory may show them).
        """
        state = await self.checkpoints.get_state(conversation_id) if arriving else \
            await self.checkpoints.require_state(conversation_id)
        executor = self.executor
        system = ContextEntry(role="system", text=executor.config.system_prompt, source_ids=[],
                              tokens=self.budget.fixed_prompt_tokens)
        history = await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id) \
            if state is not None and state.head_checkpoint_id is not None else None
        tokens = measure(history, fixed_prompt_tokens=self.budget.fixed_prompt_tokens)
        # What the next turn takes: the queue, then the arriving messages, as far as one turn's bound goes (a
        # question behind a long backlog waits for a later turn, and the preview says so by leaving it out).
        taken = executor.bounded([*await self.inbox.peek(conversation_id),
                                  *(InboxItem(message=m, reply_expected=True, author_id=asker) for m in arriving)])
        taken = await executor.settled(conversation_id, taken, history, route=False)  # a preview asks no model
        incoming = sorted([executor.prepare_incoming(i.message, addressed=i.reply_expected)
                           for i in taken if i.kind == "message" and i.message is not None],
                          key=lambda m: m.created_at)
        messages: list[Message] = list(history.messages) if history else []
        incoming = executor.numbered(messages, incoming)
        compaction = None
        # The executor's own rule, loop breaker included, so the preview never disagrees with the turn.
        would = history is not None and executor.compactor.should_compact(history, incoming, self.budget)
        if would and history is not None:
            compaction, messages = await executor.compactor.preview(conversation_id, history, incoming, self.budget)
        shown = visible(messages)
        if arriving:
            asker = next((i.author_id for i in reversed(taken) if i.reply_expected and i.author_id), None)
            runtime = await executor.runtime_message(conversation_id, history, [*messages, *incoming], incoming,
                                                     asker=asker)
            shown = visible([*messages, *incoming, runtime], runtime.id)
        return ContextReport(conversation_id, self.budget, [system, *entries(shown)], tokens,
                             would, compaction)

    async def references(self, conversation_id: str) -> dict[str, str]:
        """Message id by short reference (``#N``), over the conversation's whole lineage."""
        state = await self.checkpoints.require_state(conversation_id)
        recall = self.executor.recall
        if state.head_checkpoint_id is None or recall is None:
            return {}
        history = await self.checkpoints.load_history(conversation_id, state.head_checkpoint_id)
        index = await recall.sync(conversation_id, history)
        return {f"#{ref}": ident for ref, ident in index.refs.items()}
