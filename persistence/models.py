"""Stored shapes: messages, checkpoints, conversation state and inbox items.

Every record carries a schema version ``v``. Records are validated when read back; a record that
fails validation raises :class:`~persistence.errors.CorruptRecordError` naming its key. Fields a newer
version added are ignored, so workers of two versions can share one Redis during a deploy.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter

SCHEMA_VERSION = 1


class _Record(BaseModel):
    # A field this version does not know was added by a newer one (a rolling deploy runs both): it is ignored,
    # never a reason to refuse the record. A missing or mistyped field still fails validation.
    model_config = ConfigDict(extra="ignore", frozen=True)


class TextPart(_Record):
    type: Literal["text"] = "text"
    text: str


class ImagePart(_Record):
    """An image: a reference (URL or Slack file id) and, rarely, an inline base64 payload."""

    type: Literal["image"] = "image"
    url: str | None = None
    mime: str | None = None
    data_b64: str | None = None


class ToolCallPart(_Record):
    type: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments: str = "{}"


class ToolResultPart(_Record):
    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    truncated: bool = False
    data: list[dict[str, Any]] | None = None
    """Structured records the tool returned beside its text (``record_state``'s accepted entries), stored
    whole even when the text was cut to fit."""


ContentPart = Annotated[TextPart | ImagePart | ToolCallPart | ToolResultPart, Field(discriminator="type")]

Role = Literal["user", "assistant", "system", "tool"]


class MessageFlags(_Record):
    runtime: bool = False
    """Per-turn runtime context (time, participants, channel, the messages recalled for the turn); sent with its
    own turn only, never kept by compaction. Stored by reference: no text, the recalled message ids in
    ``source_ids``, and ``tokens`` what it cost in its turn's request (a turn awaiting resume keeps its text in
    its resume record, so the resumed request is the one it would have sent)."""
    handoff: bool = False
    """The handoff message a compaction wrote."""
    pinned: bool = False
    """A Slack-pinned message, kept verbatim across compactions within the pin budget."""
    addressed: bool = False
    """The message asked the bot for an answer (a mention, a DM, or one the router chose)."""
    late: bool = False
    """Said before messages that precede it in the history: read after the bot had answered in the thread (it was
    catching up on a thread it joined mid-way, as fast as Slack allowed). Shown with the time it was said."""


class Message(_Record):
    v: int = SCHEMA_VERSION
    id: str
    """Stable id: the Slack ``ts`` for Slack messages, a generated id otherwise."""
    role: Role
    parts: list[ContentPart]
    author: str | None = None
    flags: MessageFlags = MessageFlags()
    tokens: int = Field(ge=0)
    """Token count, computed once when the message is written."""
    created_at: float = Field(default_factory=time.time)
    source_ids: list[str] = Field(default_factory=list)
    """Input message ids this message carries (a handoff: every id it cites)."""
    ref: int | None = Field(default=None, ge=1)
    """Short stable reference: the message's number in its conversation (1, 2, 3… in the order turns took them),
    shown to the model as ``#N`` and accepted wherever an id is. A handoff carries the highest number it covers,
    so numbering continues after a compaction. None: written before references existed, or a tool step."""
    note: str | None = None
    """What the message said, compressed (its most informative sentences); computed once, when its turn
    commits, and folded into handoffs. None: nothing worth a note, or not computed yet."""
    note_tokens: list[int] = Field(default_factory=list)
    """Tokens the note adds after a space (the first item; messages written by earlier versions may carry a
    second count, no longer used), counted with it; empty: not counted. A handoff: the tokens of its notes
    part (see ``parts``)."""
    brief: str | None = None
    """Written by earlier versions (a shortened form of the note); no longer used."""
    line_tokens: dict[str, list[int]] = Field(default_factory=dict)
    """Tokens of the message's line as recall shows it (``[#N] author: text``) with its line break: written out, then
    as its note (0: no note), per tokenizer (by its encoding's name); counted once, when its turn commits. Empty or
    without this tokenizer's name: not counted (written before, or for another model): recall counts the line."""

    @property
    def text(self) -> str:
        """The message's text parts joined; tool calls and results rendered briefly."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, TextPart):
                out.append(part.text)
            elif isinstance(part, ToolResultPart):
                out.append(part.content)
            elif isinstance(part, ToolCallPart):
                out.append(f"[tool call {part.name}({part.arguments})]")
            elif isinstance(part, ImagePart):
                out.append(f"[image {part.url or 'inline'}]")
        return "\n".join(out)


def messages_so_far(messages: Sequence[Message]) -> int:
    """How many messages a conversation has had by the end of ``messages`` (a history, or the newest part of one):
    people's messages and replies, by the highest ``#N`` reference (a handoff carries the highest it covers, so a
    compacted history still counts every earlier message). The one count that ``conversations``, ``history`` and
    ``context`` show; 0 before the first turn."""
    return max((m.ref or 0 for m in messages), default=0)


def carried_tokens(message: Message) -> int:
    """Tokens ``message`` adds to every later request: its own, or none for a turn's runtime context (sent once,
    with its turn). The one rule by which a history, the lineage and the next request count tokens."""
    return 0 if message.flags.runtime else message.tokens


class CheckpointKind(StrEnum):
    TURN = "turn"
    COMPACTION = "compaction"


class CheckpointStatus(StrEnum):
    RUNNING = "running"
    AWAITING_RESUME = "awaiting_resume"
    COMPLETED = "completed"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class CheckpointMeta(_Record):
    """What is fixed when a checkpoint is created."""

    v: int = SCHEMA_VERSION
    id: str
    conversation_id: str
    kind: CheckpointKind
    parent_id: str | None = None
    forked_from: str | None = None
    covered_ids: list[str] = Field(default_factory=list)
    """Compaction only: the message ids the summary covers."""
    created_at: float = Field(default_factory=time.time)
    info: dict[str, Any] = Field(default_factory=dict)
    """Free-form facts about how the checkpoint was made (compaction reason, strategy, tokens)."""


class Usage(_Record):
    """What a provider reported for one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


class CitedSource(_Record):
    """Where a memory record a turn's reply cited was said: its mark in the reply (``M1`` → 1), the message's
    channel and id, when and by whom (``services.memory.Source`` as a turn stores it)."""

    mark: int
    channel: str
    message_id: str
    said_at: float
    authors: tuple[str, ...] = ()


class CheckpointOutcome(_Record):
    """What is recorded when a checkpoint stops running."""

    v: int = SCHEMA_VERSION
    at: float = Field(default_factory=time.time)
    usage: Usage | None = None
    """Usage of the last model call of the turn: ground truth for a prefix of the history."""
    usage_covered_messages: int = 0
    """How many history messages (from the start of the epoch) that call's input covered."""
    error: str | None = None
    trace_id: str | None = None
    resume: dict[str, Any] | None = None
    """For ``awaiting_resume``: what the turn needs to continue (reason, pending tool call)."""
    notice: str | None = None
    """What a completed turn's reply tells the person under it (that the turn folded earlier messages, …)."""
    sources: tuple[CitedSource, ...] = ()
    """Where the memory its reply cited was said: whoever delivers the reply shows them under it."""


class Checkpoint(_Record):
    meta: CheckpointMeta
    status: CheckpointStatus
    message_count: int
    """Messages this checkpoint itself stores (a turn: only what it added)."""
    token_count: int
    outcome: CheckpointOutcome | None = None
    inbox_consumed: int = 0

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def awaiting_resume(self) -> bool:
        """A turn saved as it was (a timeout, an approval asked for): never compacted, resumed from exactly its
        history, and the inbox items it took stay with it."""
        return self.status is CheckpointStatus.AWAITING_RESUME

    @property
    def kind(self) -> CheckpointKind:
        return self.meta.kind


class History(_Record):
    """The full message history at a checkpoint: its epoch's messages in order (read-only once built).

    Its token totals are kept as running sums, built once and extended with the new messages when the store
    assembles the next history from this one, so measuring a long history before a turn costs its new
    messages, not all of them."""

    checkpoint: Checkpoint
    messages: list[Message]
    chain: list[str]
    """Checkpoint ids from the epoch start (a compaction or the first turn) to ``checkpoint``."""
    _sums: array[int] | None = PrivateAttr(default=None)
    """``_sums[i]``: carried tokens of ``messages[:i]`` (:func:`carried_tokens`: runtime context left out, a
    request never carries an earlier turn's)."""
    _runtimes: array[int] | None = PrivateAttr(default=None)
    """Indexes of the runtime-context messages."""

    @property
    def token_total(self) -> int:
        return sum(m.tokens for m in self.messages)

    def visible_tokens(self, upto: int | None = None) -> int:
        """Stored tokens of the first ``upto`` messages (default all), runtime context left out."""
        sums, _ = self._totals()
        return sums[len(self.messages) if upto is None else max(0, min(upto, len(self.messages)))]

    def last_runtime(self, before: int) -> Message | None:
        """The last runtime-context message among the first ``before`` messages."""
        _, runtimes = self._totals()
        k = bisect_left(runtimes, before)
        return self.messages[runtimes[k - 1]] if k else None

    def extended(self, checkpoint: Checkpoint, messages: list[Message], chain: list[str]) -> History:
        """The history at ``checkpoint``, which adds ``messages`` to this one: built without validating the
        messages again, its sums extended by the new ones only."""
        sums, runtimes = self._totals()
        out = History.model_construct(checkpoint=checkpoint, messages=[*self.messages, *messages], chain=chain)
        out._sums, out._runtimes = array("q", sums), array("q", runtimes)
        _grow(out._sums, out._runtimes, len(self.messages), messages)
        return out

    def _totals(self) -> tuple[array[int], array[int]]:
        if self._sums is None or self._runtimes is None or len(self._sums) != len(self.messages) + 1:
            self._sums, self._runtimes = array("q", [0]), array("q")
            _grow(self._sums, self._runtimes, 0, self.messages)
        return self._sums, self._runtimes


def _grow(sums: array[int], runtimes: array[int], start: int, messages: list[Message]) -> None:
    total = sums[-1]
    for index, message in enumerate(messages, start):
        if message.flags.runtime:
            runtimes.append(index)
        total += carried_tokens(message)
        sums.append(total)


class PreparedHandoff(_Record):
    """The slow part of a conversation's next compaction, done ahead of need in the background: the summarizer's
    narrative of the history at a fixed checkpoint of the current epoch. The turn that reaches the trigger compacts
    with it instead of asking the summarizer while a person waits. Kept under its own key, with an expiry."""

    v: int = SCHEMA_VERSION
    from_checkpoint_id: str
    """The checkpoint whose history it was planned for (the head then)."""
    message_count: int
    """How many messages that history held."""
    last_message_id: str
    narrative: list[dict[str, Any]] = Field(default_factory=list)
    """The narrative entries to carry (``text``, ``source_ids``), as the summarizer's checked reply left them."""
    strategy: str = "notes"
    """How the narrative was made (``llm``, ``llm-partial``, ``notes-fallback``, ``notes``)."""
    detail: str = ""
    changes: dict[str, str | None] = Field(default_factory=dict)
    """The edits (current text) and deletions (None) the summarizer read the messages with."""
    created_at: float = Field(default_factory=time.time)


class ConversationState(_Record):
    conversation_id: str
    head_checkpoint_id: str | None
    active_turn_id: str | None
    version: int
    created_at: float
    updated_at: float


class InboxItem(_Record):
    """One inbound event waiting for the next turn, in arrival order."""

    v: int = SCHEMA_VERSION
    kind: Literal["message", "edit", "delete", "pin", "unpin"] = "message"
    event_id: str | None = None
    message: Message | None = None
    """For ``message`` and ``edit``: the message (an edit carries the new text under the same id)."""
    target_id: str | None = None
    """For ``delete``, ``pin`` and ``unpin``: the message id the event is about."""
    reply_expected: bool = True
    route: bool = False
    """Whether to answer is decided when a turn takes the message (a router reads the thread), not before the
    event is acknowledged; until then ``reply_expected`` is False."""
    author_id: str | None = None
    """The transport's id of the author, whose display name is looked up when a turn takes the message (not
    before the event is acknowledged); ``message.author`` holds the id until then."""
    received_at: float = Field(default_factory=time.time)
    view: str | None = None
    """What the author had open in the transport when the message arrived, as the transport said it (a hint for the
    turn answering it, never an instruction)."""
    change: str | None = None
    """For ``edit``: what tells this edit from another edit of the same message (Slack's ``edited.ts``, a replayed
    entry's own id). A second edit is a change of its own; a retried event is not."""

    def dedup_keys(self) -> list[str]:
        """What makes a second copy of this item a duplicate: its event id (Slack retries events), and what it is
        about: a message by its id, an edit by the message and the edit, a deletion by the message (a message is
        deleted once). The one rule every transport and replay shares (``Inbox.append`` applies it)."""
        keys = [self.event_id] if self.event_id else []
        subject = self.message.id if self.message is not None else self.target_id
        if subject and self.kind == "message":
            keys.append(f"message:{subject}")
        elif subject and self.kind == "edit" and self.change:
            keys.append(f"edit:{subject}:{self.change}")
        elif subject and self.kind == "delete":
            keys.append(f"delete:{subject}")
        return keys


class LineageEntry(_Record):
    """One row of ``threadkeeper history``."""

    id: str
    kind: CheckpointKind
    status: CheckpointStatus
    parent: str | None
    forked_from: str | None
    message_count: int
    """Messages in the history at this checkpoint (what a turn from it would load)."""
    token_total: int
    """Tokens that history carries into the next request (runtime context left out, as ``context`` counts)."""
    created_at: float
    is_head: bool


class ConversationSummary(_Record):
    """One row of ``threadkeeper conversations``."""

    id: str
    last_activity: float
    """When the conversation's state last changed (a turn committed, a compaction, a message recorded)."""
    messages: int
    """Messages people and the bot wrote (the highest ``#N`` reference so far; 0 before the first turn)."""
    generation: int
    """Compactions on the head's lineage: 0 until the first one, then 1, 2, …"""
    head: str | None
    active: str | None
    """The running or paused turn, if any."""


MESSAGES = TypeAdapter(list[Message])


@dataclass(frozen=True)
class Lease:
    """A worker's hold on one conversation: a token with an expiry, renewable and releasable only by its holder."""

    conversation_id: str
    token: str
    expires_at: float
