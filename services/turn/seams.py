"""The seams services are built on, as protocols: what they need of the checkpoint store, the compactor and the
model client. The composition root (``threadkeeper.root``) passes the real ones; tests may pass others."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from threadkeeper.persistence import (
    Checkpoint,
    CheckpointOutcome,
    Commit,
    ConversationState,
    History,
    Lease,
    Message,
    Notes,
    Opening,
)

if TYPE_CHECKING:
    from ..handoff import CompactionReport
    from ..models import ContextBudget, Draft, ModelReply


class CheckpointStore(Protocol):
    """Checkpoints, the head and the state of each conversation (``persistence.CheckpointStore``)."""

    async def open_turn(self, conversation_id: str, *, lease_seconds: float, lease: Lease | None = None,
                        ) -> Opening | None: ...

    async def get_state(self, conversation_id: str) -> ConversationState | None: ...

    async def require_state(self, conversation_id: str) -> ConversationState: ...

    async def get(self, conversation_id: str, checkpoint_id: str) -> Checkpoint: ...

    async def paused_turn(self, conversation_id: str) -> Checkpoint | None: ...

    async def load_history(self, conversation_id: str, checkpoint_id: str | None = None) -> History: ...

    async def start_turn(self, conversation_id: str, *, parent_id: str | None = None, from_head: bool = True,
                         info: dict[str, Any] | None = None, messages: Sequence[Message] = (),
                         inbox_consumed: int = 0) -> Checkpoint: ...

    async def append(self, conversation_id: str, checkpoint_id: str, messages: Sequence[Message], *,
                     inbox_consumed: int = 0) -> int: ...

    async def commit(self, conversation_id: str, checkpoint_id: str, *, expected_head: str | None,
                     outcome: CheckpointOutcome | None = None, messages: Sequence[Message] = ()) -> Commit: ...

    async def fork_compaction(self, conversation_id: str, *, forked_from: str, messages: Sequence[Message],
                              covered_ids: Sequence[str], info: dict[str, Any] | None = None,
                              outcome: CheckpointOutcome | None = None) -> Checkpoint: ...

    async def fail(self, conversation_id: str, checkpoint_id: str, *, error: str,
                   trace_id: str | None = None) -> None: ...

    async def pause(self, conversation_id: str, checkpoint_id: str, *, resume: dict[str, Any],
                    outcome: CheckpointOutcome | None = None) -> None: ...

    async def resume(self, conversation_id: str, checkpoint_id: str) -> None: ...

    async def supersede(self, conversation_id: str, checkpoint_id: str) -> None: ...

    def let_go(self, conversation_id: str) -> None:
        """This process no longer writes under the lease its opening took (the writes it makes are not fenced)."""


class HeldFlags(Protocol):
    """Where a conversation's transport flags are served from the copy its turn's opening read, while this process
    holds its lease (``persistence.NotesStore``)."""

    def hold(self, conversation_id: str, flags: Mapping[str, str], token: str = "") -> None:
        """Serve ``flags`` (read with the lease ``token``) and fence the flags' writes by that lease."""

    def let_go(self, conversation_id: str) -> None: ...


class Compactor(Protocol):
    """Replaces a history that outgrew its budget by recent messages and a handoff (``services.compactor``)."""

    def should_compact(self, history: History, incoming: Sequence[Message], budget: ContextBudget) -> bool:
        """Whether the turn about to run compacts first (the one rule the executor and ``context`` ask)."""

    async def before_turn(self, conversation_id: str, history: History | None, incoming: Sequence[Message],
                          budget: ContextBudget, notes: Notes, waiting: Callable[[], Awaitable[None]] | None = None,
                          ) -> tuple[History | None, CompactionReport | None]:
        """The history the turn uses: ``history``, or its compaction when ``should_compact`` (read with ``notes``,
        the conversation's notes as the turn's edits, deletions and pins leave them): the one planned ahead when it
        can be adopted, else one made now, after calling ``waiting``."""

    def prepare_after(self, conversation_id: str, checkpoint_id: str, budget: ContextBudget) -> None:
        """A turn committed ``checkpoint_id`` and its reply was delivered: plan the next compaction ahead, in the
        background, when the history is past the preparation threshold."""

    async def settle(self, seconds: float | None = None) -> None:
        """Wait for the work :meth:`prepare_after` started: with ``seconds``, at most that long, then cancel what is
        still running."""

    async def preview(self, conversation_id: str, history: History, pending: Sequence[Message],
                      budget: ContextBudget, notes: Notes) -> tuple[CompactionReport, History]:
        """What compacting now would give, written nowhere: the report, and the history the turn would go on with
        (``context``)."""

    async def compact(self, conversation_id: str, *, budget: ContextBudget, dry_run: bool = False,
                      reason: str = "manual", with_model: bool = False) -> CompactionReport:
        """Compact now, whatever the trigger says."""


class Model(Protocol):
    """One chat model (``services.llm.ModelClient``)."""

    model: str
    timeout_seconds: float

    @property
    def streams(self) -> bool:
        """Whether replies are streamed to a draft as they are written."""

    async def complete(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                       max_output_tokens: int | None = None, timeout_seconds: float | None = None,
                       draft: Draft | None = None, kind: str = "turn", window: str | None = None) -> ModelReply: ...
