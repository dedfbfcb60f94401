"""What a turn is made of and what it talks to: the executor's seams (compaction, inbox effects, the
transport's intake and events), its configuration, the state of a turn in progress and its result."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal, Protocol

from threadkeeper.persistence import Checkpoint, History, InboxItem, Message, Notes, ThreadkeeperError, Usage

from ..conversation import Conversation
from ..memory import Source
from ..models import ContextBudget, Draft, ModelReply

if TYPE_CHECKING:
    from ..handoff import CompactionReport

TurnStatus = Literal["completed", "recorded", "awaiting_resume", "failed", "refused", "stopped"]

THINKING = "thinking…"
"""The status while the model is called (tools announce their own, compaction says "compacting history…")."""
COMPACTING = "compacting history…"


class NoCompaction:
    """A compactor that never compacts (an executor built without one)."""

    def should_compact(self, history: History, incoming: Sequence[Message], budget: ContextBudget) -> bool:
        return False

    async def before_turn(self, conversation_id: str, history: History | None, incoming: Sequence[Message],
                          budget: ContextBudget, notes: Notes, waiting: Callable[[], Awaitable[None]] | None = None,
                          ) -> tuple[History | None, CompactionReport | None]:
        return history, None

    def prepare_after(self, conversation_id: str, checkpoint_id: str, budget: ContextBudget) -> None:
        return None

    async def settle(self, seconds: float | None = None) -> None:
        return None

    async def preview(self, conversation_id: str, history: History, pending: Sequence[Message],
                      budget: ContextBudget, notes: Notes) -> tuple[CompactionReport, History]:
        raise ThreadkeeperError("this pipeline has no compactor")

    async def compact(self, conversation_id: str, *, budget: ContextBudget, dry_run: bool = False,
                      reason: str = "manual", with_model: bool = False) -> CompactionReport:
        raise ThreadkeeperError("this pipeline has no compactor")


class InboxEffects(Protocol):
    """Applies non-message inbox items (edits, deletes, pins) to conversation notes."""

    async def apply(self, conversation: Conversation, items: Sequence[InboxItem]) -> None: ...


@dataclass(frozen=True)
class Preparation:
    """What a transport's :meth:`Intake.prepare` did before a conversation's next turn."""

    queued: bool = False
    """It queued messages (the turn reads the inbox again)."""
    more: bool = False
    """It has more to do that has to wait (a rate limit): the conversation stays on the registry of owed work,
    so that a worker comes back to it, and ``notice`` is said with each reply meanwhile."""
    notice: str | None = None


class Intake(Protocol):
    """What a transport settles when a turn takes a message instead of before acknowledging its event, so an
    acknowledgement never waits on a lookup or a model call."""

    async def author(self, conversation: Conversation, author_id: str) -> str:
        """The display name of the author the transport knows as ``author_id`` in that conversation."""
        ...

    async def zone(self, conversation: Conversation, author_id: str) -> str | None:
        """The time zone (an IANA name) of the person the transport knows as ``author_id``; None when unknown."""
        ...

    async def route(self, conversation: Conversation, text: str, recent: Sequence[str]) -> bool:
        """Whether the bot should answer ``text``, a message not addressed to it; ``recent`` are the thread's
        last lines (``author: text``)."""
        ...

    async def prepare(self, conversation: Conversation) -> Preparation:
        """Work owed to the conversation before its next turn, done by whichever worker holds its lease (the
        Slack bot reads the earlier messages of a thread it was brought into, as fast as Slack allows)."""
        ...


class TurnEvents(Protocol):
    """What a transport (Slack, console) hears from a turn. The executor calls it only while it holds the
    conversation's lease, so one worker at a time shows, posts, updates or deletes anything of a conversation."""

    async def status(self, conversation: Conversation, text: str | None) -> None: ...

    async def reply(self, conversation: Conversation, text: str, *, kind: str, trace_id: str | None,
                    checkpoint_id: str | None = None, notice: str | None = None,
                    sources: Sequence[Source] = ()) -> bool | None:
        """Deliver a turn's reply. False: it could not be delivered now (nor shown to be delivered already);
        the conversation then stays owed and ``recover`` delivers it later. None or True: delivered (or given
        up for good, say the channel is gone). ``notice``: a line shown with the reply, once (the turn compacted
        the thread), apart from the reply's own text; ``sources``: where the memory records it cites were said
        (a transport shows them as links a person can open)."""
        ...

    async def recover(self, conversation: Conversation) -> bool:
        """Deliver what an earlier holder of the lease left owed (the committed turn whose reply it never
        confirmed, a reply it left half-written), reading back what the transport already shows before posting
        anything again. Returns False when something is still owed."""
        ...

    async def draft(self, conversation: Conversation) -> Draft | None:
        """Where the reply of the turn about to call the model is shown as it is written (None: only whole
        replies). ``reply`` then finishes it, or replaces it when the reply turned out different."""
        ...


class SilentEvents:
    async def status(self, conversation: Conversation, text: str | None) -> None:
        return None

    async def recover(self, conversation: Conversation) -> bool:
        return True

    async def draft(self, conversation: Conversation) -> Draft | None:
        return None

    async def reply(self, conversation: Conversation, text: str, *, kind: str, trace_id: str | None,
                    checkpoint_id: str | None = None, notice: str | None = None,
                    sources: Sequence[Source] = ()) -> bool | None:
        return None


class Clock:
    """The time a turn's own messages are written at (replies, notices, the runtime context's "now"): the wall
    clock, or a replayed thread's own time. One per pipeline, shared by what writes messages."""

    def __init__(self, source: Callable[[], float] = time.time) -> None:
        self.source = source

    def __call__(self) -> float:
        return self.source()


@dataclass
class Spend:
    """What a turn's model calls consumed, over every call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    """Calls to a model litellm's price map does not price (their cost is not in ``cost_usd``)."""

    def add(self, reply: ModelReply) -> None:
        if reply.usage is not None:
            self.input_tokens += reply.usage.input_tokens
            self.output_tokens += reply.usage.output_tokens
        if reply.cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += reply.cost_usd


@dataclass
class TurnResult:
    conversation_id: str
    checkpoint_id: str
    status: TurnStatus
    reply: str | None = None
    consumed: int = 0
    trace_id: str | None = None
    usage: Usage | None = None
    compaction: CompactionReport | None = None
    model_calls: int = 0
    inbox_left: int | None = None
    """Inbox items left when the turn committed (None: unknown); 0 lets the worker stop at once."""
    model_seconds: float = 0.0
    """Time the turn spent waiting for the model (bounded by ``ExecutorConfig.turn_model_seconds``)."""
    spend: Spend | None = None
    """Tokens and cost of the turn's model calls (None: it called no model)."""
    problem: str | None = None
    """When the turn failed because the provider refuses a setting for good (:class:`ModelSetupError`): the one line
    naming it, for whoever runs the bot (the reply only says it cannot answer)."""
    sources: tuple[Source, ...] = ()
    """Where the memory records the reply cited were said, by mark."""
    notice: str | None = None
    """What the reply tells the person under it (``executor.notice``)."""


@dataclass
class ExecutorConfig:
    system_prompt: str
    lease_seconds: float = 120.0
    max_tool_steps: int = 4
    tool_output_fraction: float = 0.05
    """Tool output is cut to this fraction of the usable window."""
    commit_attempts: int = 3
    prepare_compaction: bool = True
    """Plan the next compaction in the background once a committed turn leaves the history past the preparation
    threshold, so the turn that reaches the trigger adopts it instead of waiting for the summarizer
    (``THREADKEEPER_PREPARE_COMPACTION``)."""
    turn_model_seconds: float = 300.0
    """The most model time one turn may spend over all its calls and retries; past it, the turn is saved as
    it is (awaiting resume) like a call that timed out."""


RuntimeHeader = Callable[[str, Sequence[Message], Sequence[Message], float], str]
"""``(conversation_id, history, incoming, now)``: the first line of a turn's runtime context; ``now`` is the turn's
clock (the thread's time in a replay)."""


def default_runtime_context(conversation_id: str, history: Sequence[Message], incoming: Sequence[Message],
                            at: float) -> str:
    people = sorted({m.author for m in [*history, *incoming] if m.role == "user" and m.author and not m.flags.handoff})
    now = datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shown = ", ".join(people[:20]) + (f" and {len(people) - 20} more" if len(people) > 20 else "")
    return f"[runtime context] now: {now}; conversation: {conversation_id}; participants: {shown or 'unknown'}"


@dataclass
class TurnState:
    checkpoint: Checkpoint
    expected_head: str | None
    messages: list[Message]
    runtime_id: str
    items: list[InboxItem]
    incoming: list[Message]
    compaction: CompactionReport | None = None
    usage: Usage | None = None
    covered: int = 0
    calls: int = 0
    final: list[Message] = field(default_factory=list)
    """The turn's last messages, written by the commit itself."""
    inbox_left: int | None = None
    model_seconds: float = 0.0
    """Time spent waiting for the model, over every call and retry of the turn."""
    spend: Spend = field(default_factory=Spend)

    @property
    def runtime(self) -> Message | None:
        """The turn's runtime context, as its request carries it."""
        return next((m for m in reversed(self.messages) if m.id == self.runtime_id), None) if self.runtime_id else None
