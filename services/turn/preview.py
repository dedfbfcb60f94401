"""The next turn's request, written nowhere: what ``context`` shows, what the evals grade.

It is built by the turn's own collaborators, in the turn's order: :class:`TurnInput` takes the queued items (and
any arriving message) as the turn would, with the notes their edits, deletions and pins would leave; the compactor
plans the compaction the turn would make (no model call: a narrative is carried as it is); the
:class:`ContextAssembler` adds the runtime context with its recall and memory. Only the writes and the model are
left out, so the preview is the request the next turn sends (a test holds it to that)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from threadkeeper.persistence import Inbox, InboxItem, Message, NotesStore, messages_so_far

from ..context import ContextEntry, entries, measure, to_chat, visible
from ..conversation import PRIVACY, Conversation
from ..models import ContextBudget
from .assembler import ContextAssembler
from .input import TurnInput
from .seams import CheckpointStore, Compactor

if TYPE_CHECKING:
    from ..handoff import CompactionReport


@dataclass
class ContextReport:
    """What the next turn of a conversation would send to the model."""

    conversation_id: str
    budget: ContextBudget
    context: list[ContextEntry]
    history_tokens: int
    would_compact: bool
    compaction: CompactionReport | None = None
    request: list[dict[str, Any]] = field(default_factory=list)
    """The chat messages themselves, as the model would receive them (system prompt first)."""
    messages: int = 0
    """The conversation's messages so far (``persistence.messages_so_far``: the count ``conversations`` and
    ``history`` show); ``context`` holds fewer entries once earlier messages were folded into a handoff."""

    @property
    def context_tokens(self) -> int:
        return sum(e.tokens for e in self.context)

    def as_dict(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "messages": self.messages,
                "window_tokens": self.budget.window_tokens,
                "budget": self.budget.as_dict(), "would_compact": self.would_compact,
                "context": [e.as_dict() for e in self.context], "context_tokens": self.context_tokens}


class Preview:
    def __init__(self, *, checkpoints: CheckpointStore, inbox: Inbox, notes: NotesStore, budget: ContextBudget,
                 system_prompt: str, input: TurnInput, assembler: ContextAssembler, compactor: Compactor) -> None:
        self.checkpoints = checkpoints
        self.inbox = inbox
        self.notes = notes
        self.budget = budget
        self.system_prompt = system_prompt
        self.input = input
        self.assembler = assembler
        self.compactor = compactor

    async def __call__(self, conversation: Conversation, *, arriving: Sequence[Message] = (),
                       asker: str | None = None) -> ContextReport:
        """The next turn's context; if that turn would compact first, the context after it (nothing written).

        ``arriving`` are messages to preview as if they reached the inbox now, each asking for a reply
        (``context --message``), sent by ``asker`` (a transport's user id: what memory may show them). A
        conversation that does not exist yet is previewed as a new one when a message arrives. What a turn would
        take is bounded as a turn bounds it: a question behind a long backlog waits for a later turn, and the
        preview says so by leaving it out."""
        conversation_id = conversation.id
        state = await self.checkpoints.get_state(conversation_id) if arriving else \
            await self.checkpoints.require_state(conversation_id)
        system = ContextEntry(role="system", text=self.system_prompt, source_ids=[],
                              tokens=self.budget.fixed_prompt_tokens)
        head = state.head_checkpoint_id if state is not None else None
        paused = await self.checkpoints.paused_turn(conversation_id) if state is not None else None
        history = await self.checkpoints.load_history(conversation_id, head) if head is not None else None
        tokens = measure(history, fixed_prompt_tokens=self.budget.fixed_prompt_tokens)
        so_far = messages_so_far(history.messages) if history is not None else 0
        queued = await self.inbox.peek(conversation_id, start=paused.inbox_consumed if paused else 0)
        items = self.input.bounded([*queued, *(InboxItem(message=m, reply_expected=True, author_id=asker)
                                               for m in arriving)])
        notes = await self.notes.get(conversation_id)
        conversation = conversation.said(notes.flags.get(PRIVACY))
        prepared = await self.input.prepare(conversation, items, history, notes, route=False)  # asks no model
        incoming = self.input.numbered(history.messages if history else [], prepared.incoming)
        compaction = None
        # The turn's own rule, loop breaker included, so the preview never disagrees with the turn.
        would = history is not None and paused is None and self.compactor.should_compact(history, incoming,
                                                                                          self.budget)
        if would and history is not None:
            compaction, history = await self.compactor.preview(conversation_id, history, incoming, self.budget,
                                                               prepared.notes)
        messages = [*(history.messages if history else []), *incoming]
        runtime_id = None
        if paused is not None:  # the turn resumes it: its history and the runtime context it sent, then what came
            resume = (paused.outcome.resume or {}) if paused.outcome else {}
            earlier = ContextAssembler.resumed(list((await self.checkpoints.load_history(conversation_id,
                                                                                        paused.id)).messages), resume)
            messages = [*earlier, *self.input.numbered(earlier, prepared.incoming)]
            runtime_id = next((m.id for m in reversed(earlier) if m.flags.runtime), None)
        elif prepared.wants_reply:
            runtime = await self.assembler.assemble(conversation, history, messages, incoming, prepared.notes,
                                                    asker=prepared.asker, hint=prepared.hint,
                                                    zone=prepared.zone)
            messages.append(runtime.message)
            runtime_id = runtime.message.id
        shown = visible(messages, runtime_id)
        return ContextReport(conversation_id, self.budget, [system, *entries(shown)], tokens, would, compaction,
                             to_chat(self.system_prompt, shown), messages=so_far)
