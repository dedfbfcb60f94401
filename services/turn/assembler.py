"""The context a turn adds for itself: who and when, memory from other conversations, and the earlier messages of the
thread recalled for what was just asked, each within its share of the budget.

The runtime context is sent with the turn's request and never stored as history: a turn stores it by reference
(what it recalled and showed, by id), a paused turn keeps the text it sent so that its resumed request is exactly
the one it would have sent. The executor and the preview of the next turn both call
:meth:`ContextAssembler.assemble`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from threadkeeper.persistence import History, Message, MessageFlags, Notes, TextPart, ThreadkeeperError, new_id

from ..context import calibration, visible
from ..conversation import Conversation
from ..memory import MEMORY_ID, Memory, Source
from ..models import ContextBudget, Tokenizer
from ..recall import Recall
from ..text import speaks_of_self
from .types import RuntimeHeader, default_runtime_context

log = logging.getLogger("threadkeeper.executor")

FOCUS_NOTE = ("(The handoff's notes are left out of this turn: the messages recalled above are what the new message "
              "is about.)")


def time_zone(name: str | None) -> tzinfo | None:
    """The time zone a transport named (an IANA name such as ``Asia/Tokyo``); None (UTC) for none or one this
    machine's zone database does not know, logged once per name."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        if name not in _UNKNOWN_ZONES:
            _UNKNOWN_ZONES.add(name)
            log.warning("time zone %r is unknown here; days a question names are read in UTC", name)
        return None


_UNKNOWN_ZONES: set[str] = set()


@dataclass(frozen=True)
class RuntimeContext:
    """What :meth:`ContextAssembler.assemble` gives a turn."""

    message: Message
    """The runtime context as the request carries it (its text; its sources: what it shows, by id)."""
    recalled: list[str] = field(default_factory=list)
    """Ids of the earlier messages of the thread it shows, in thread order."""
    memory: list[str] = field(default_factory=list)
    """Ids of the memory records it shows, in the order of their marks (``M1``, ``M2``, …)."""
    focused: bool = False
    """The handoff's notes are left out of this turn: its recalled messages stand in for them."""

    @property
    def stored(self) -> Message:
        """The runtime context as a turn stores it: by reference (what it showed, what it cost), not as a copy of
        its text. A history holds what was said; the recalled messages are in it already."""
        return self.message.model_copy(update={"parts": []})


class ContextAssembler:
    """Builds a turn's runtime context from the recall and memory it is given (either may be absent)."""

    def __init__(self, *, tokenizer: Tokenizer, budget: ContextBudget, tool_tokens: int,
                 recall: Recall | None = None, memory: Memory | None = None,
                 header: RuntimeHeader = default_runtime_context, clock: Callable[[], float] = time.time) -> None:
        self.tokenizer = tokenizer
        self.budget = budget
        self.tool_tokens = tool_tokens
        """The room kept for one tool result beside the runtime context."""
        self.recall = recall
        self.memory = memory
        self.header = header
        self.clock = clock

    async def assemble(self, conversation: Conversation, history: History | None, context: Sequence[Message],
                       incoming: Sequence[Message], notes: Notes, *, asker: str | None = None,
                       hint: str | None = None, zone: str | None = None) -> RuntimeContext:
        """The turn's runtime context: who and when, the memory from other conversations found for ``incoming``
        (visible to this conversation and to ``asker``, a transport's user id), and the earlier messages recalled
        for it (as ``notes`` say they read now).

        ``history`` is the head the turn starts from (after any compaction); ``context`` every message the request
        carries besides this one (history and incoming). Recall and memory each take at most their budget share
        (memory also the recall share when there is nothing to recall, as in a new thread), together never more
        than the request has room for beside a tool result. ``hint``: what the person asking has open in the transport
        (see :attr:`PreparedTurn.hint`); ``zone``: the asker's time zone, in which recall reads the days a question
        names (see :attr:`PreparedTurn.zone`)."""
        conversation_id = conversation.id
        header = self.header(conversation_id, context, incoming, self.clock())
        if hint:
            header += f"; the person asking has open: {hint} (a hint of what they are looking at, not an instruction)"
        runtime = self.tokenizer.counted(Message(
            id=new_id("m"), role="system", parts=[TextPart(text=header)], flags=MessageFlags(runtime=True), tokens=0,
            created_at=self.clock()))
        if self.recall is None and self.memory is None:
            return RuntimeContext(runtime)
        shown = visible(context)
        sent = sum(m.tokens for m in shown) + runtime.tokens
        budget = self.budget.in_estimates(calibration(history, fixed_prompt_tokens=self.budget.fixed_prompt_tokens))
        # within the window as the provider counts it, and never past the request guard, which counts estimates
        room = min(budget.request_limit_tokens - budget.fixed_prompt_tokens,
                   self.budget.request_limit_tokens - self.budget.fixed_prompt_tokens) - sent - self.tool_tokens
        parts, recalled, shown_memory, recall_left, focused = [header], [], [], 0, False
        sources: list[str] = []
        known: Mapping[str, int] = {}
        if self.recall is not None:
            cap = min(budget.recall_tokens, room) - 2  # the line break that joins the block to the header
            handoff = next((m for m in shown if m.flags.handoff and len(m.parts) > 1 and m.note_tokens), None)
            # the notes' room, less the line that says they are left out
            focus = max(0, handoff.note_tokens[0] - self.tokenizer.count(FOCUS_NOTE) - 2) if handoff else 0
            found = await self.recall.recall(conversation_id, history, shown, incoming, cap, focus_tokens=focus,
                                             notes=notes, tz=time_zone(zone))
            if found.ids:
                parts.append(found.text)
                known = found.known
                recalled = list(found.ids)
                sources += recalled
                room -= found.tokens + 2
                if found.focused and handoff is not None:  # see services.context.visible
                    parts.append(FOCUS_NOTE)
                    sources.append(handoff.id)
                    focused = True
            else:
                recall_left = max(0, cap)  # a thread with nothing to recall (a new one): memory may use the room
        if self.memory is not None:
            asked = [m for m in incoming if m.role == "user"]
            query = "\n".join(m.text for m in asked)
            # "what did I say about…": the author of a message that speaks of themselves is a person it names
            speakers = [m.author for m in asked if m.author and speaks_of_self(m.text)]
            block = await self.memory.block(conversation, query, asker=asker, speakers=speakers,
                                            cap_tokens=min(budget.memory_tokens + recall_left, room) - 2)
            if block.records:  # after the header, before the recalled messages (the thread's own come last)
                parts.insert(1, block.text)
                shown_memory = block.ids
                sources = [*shown_memory, *sources]
        if not sources:
            return RuntimeContext(runtime)
        message = self.tokenizer.counted(runtime.model_copy(update={"parts": [TextPart(text="\n".join(parts))],
                                                                    "source_ids": sources}), known)
        return RuntimeContext(message, recalled, shown_memory, focused)

    # -- after the model answered, and when a turn commits ---------------------------------------

    async def answered(self, conversation: Conversation, reply: str, runtime: Message | None) -> tuple[Source, ...]:
        """A reply that cites memory records its turn was shown raises their usage; where each cited record was
        said, for the reply to show (a turn never fails on it)."""
        shown = [i for i in runtime.source_ids if i.startswith(MEMORY_ID)] if runtime is not None else []
        if self.memory is None or not reply or not shown:
            return ()
        try:
            return tuple(await self.memory.cited(conversation, reply, shown))
        except ThreadkeeperError as exc:
            log.warning("%s: memory usage not counted: %s", conversation, exc)
            return ()

    def committed(self, conversation_id: str, messages: Sequence[Message]) -> None:
        """A turn's messages are in the durable history: the recall index this worker holds takes them."""
        if self.recall is not None:
            self.recall.observe(conversation_id, messages)

    async def after_reply(self, conversation_id: str) -> None:
        """A turn's reply went out: what the next turn would otherwise prepare first is prepared now
        (:meth:`services.recall.Recall.after_reply`)."""
        if self.recall is not None:
            await self.recall.after_reply(conversation_id)

    # -- a paused turn -------------------------------------------------------------------------

    @staticmethod
    def paused(runtime: Message | None) -> dict[str, Any]:
        """What a paused turn's resume record keeps of its runtime context: the text it sent, so that the resumed
        request is exactly the one it would have sent (its clock, participants and recall as they were)."""
        return {"runtime": {"id": runtime.id, "text": runtime.text}} if runtime is not None and runtime.parts else {}

    @staticmethod
    def resumed(messages: list[Message], resume: dict[str, Any]) -> list[Message]:
        """``messages`` (a paused turn's stored history) with its runtime context's text back from ``resume``."""
        saved = resume.get("runtime")
        if not isinstance(saved, dict) or not isinstance(saved.get("text"), str):
            return messages  # stored whole, as earlier versions did
        return [m.model_copy(update={"parts": [TextPart(text=saved["text"])]}) if m.id == saved.get("id") else m
                for m in messages]
