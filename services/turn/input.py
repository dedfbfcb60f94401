"""What a turn takes in: inbox items become a prepared turn.

The items one turn takes are bounded (half the usable window); their authors are named and, for messages not
addressed to the bot, whether to answer is decided by the transport's :class:`Intake` (after the event was
acknowledged, never before); people's messages are counted, noted, marked and bounded; edits and deletions become
change notices in the history; and the conversation's notes are computed as the turn's edits, deletions and pins
leave them. The executor and the preview of the next turn (``context``) both call :meth:`TurnInput.prepare`, so
what the preview shows is what the turn takes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from threadkeeper.persistence import History, InboxItem, Message, MessageFlags, Notes, Role, TextPart, new_id

from ..context import refs
from ..conversation import Conversation
from ..models import ContextBudget, Tokenizer, bound_text
from ..recall import change_notice_id, line_counted
from ..safety import redact_after, tail
from ..text import make_note
from .types import Intake

log = logging.getLogger("threadkeeper.executor")

ROUTING_CONCURRENCY = 8
"""Router calls one worker runs at once (over all its conversations)."""
ROUTING_POLL_SECONDS = 0.1
"""How often a turn waiting on its router calls looks for a message that asks the bot directly."""

MentionWaiting = Callable[[], Awaitable[bool]]
"""Whether a message that asks the bot directly (a mention, a DM) waits behind the items being routed."""


@dataclass(frozen=True)
class PreparedTurn:
    """A turn's inbox items, ready for its history."""

    items: list[InboxItem]
    """Every item the turn takes, settled (authors named, routing decided): they leave the inbox when it commits."""
    incoming: list[Message]
    """People's messages and change notices, prepared, in the order they were sent (not yet numbered)."""
    effects: list[InboxItem]
    """The edits, deletions and pins among the items."""
    notes: Notes
    """The conversation's notes as the turn's effects leave them (compaction and recall read these)."""
    hint: str | None = None
    """What the person asking had open in the transport when they asked, as the transport said it with their message
    (a hint, not an instruction)."""
    zone: str | None = None
    """The time zone (an IANA name) of the person asking, as the transport knows it: the days a question names
    ("yesterday", "last week") are theirs. None: unknown (UTC)."""

    @property
    def wants_reply(self) -> bool:
        return any(i.reply_expected for i in self.items if i.kind == "message")

    @property
    def asker(self) -> str | None:
        """The transport's id of the person whose message the turn answers (the last one that asks)."""
        return next((i.author_id for i in reversed(self.items) if i.reply_expected and i.author_id), None)


REMEMBERED = 4096
"""Conversations whose authors' last message ends a process keeps for redacting the next one as it arrives."""
REMEMBERED_AUTHORS = 64
"""Authors of one conversation it keeps them for (the most recent)."""


def _author(item: InboxItem) -> str:
    """Who sent an arriving message, as the transport named them (its id; names are settled later)."""
    return item.author_id or (item.message.author if item.message is not None else None) or ""


class TurnInput:
    """Turns inbox items into a :class:`PreparedTurn`, and makes the messages a turn writes (counted once)."""

    def __init__(self, *, tokenizer: Tokenizer, budget: ContextBudget, intake: Intake | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.tokenizer = tokenizer
        self.budget = budget
        self.intake = intake
        """Authors' names and routing settled as a turn takes its messages (None: messages arrive settled)."""
        self.clock = clock
        """When the turn's own messages (replies, notices) are written; a replay sets the thread's clock."""
        self.routing = asyncio.Semaphore(ROUTING_CONCURRENCY)
        self._ends: OrderedDict[str, dict[str, str]] = OrderedDict()
        """Conversation id → author → the end of the last message of theirs this process stored
        (:func:`safety.tail`), for the most recent :data:`REMEMBERED` conversations."""

    # -- the items one turn takes --------------------------------------------------------------

    def bounded(self, items: list[InboxItem]) -> list[InboxItem]:
        """The items one turn takes: the oldest ones whose messages fit half the usable window (at least one).

        A backlog (a thread read when the bot joins it, a burst while a turn ran) is then recorded over
        several turns, each compacting as it needs to, instead of one request over the window."""
        limit, used = self.budget.usable_tokens // 2, 0
        for n, item in enumerate(items):
            tokens = item.message.tokens if item.message is not None else 0
            if n and used + tokens > limit:
                return items[:n]
            used += tokens
        return items

    async def prepare(self, conversation: Conversation, items: Sequence[InboxItem], history: History | None,
                      notes: Notes, *, route: bool = True,
                      mention_waiting: MentionWaiting | None = None) -> PreparedTurn:
        """``items`` settled and prepared for a turn that starts from ``history`` with ``notes`` stored.

        ``route``: ask the transport whether to answer messages not addressed to the bot (a paused turn, which
        already decided to answer, and a preview, which asks no model, do not)."""
        settled = await self.settled(conversation, items, history, route=route, mention_waiting=mention_waiting)
        effects = [i for i in settled if i.kind != "message"]
        incoming = [self.prepare_incoming(i.message, addressed=i.reply_expected)
                    for i in settled if i.kind == "message" and i.message is not None]
        incoming += [notice for i in effects if (notice := self.change_notice(i)) is not None]
        # Concurrent deliveries can reach the inbox out of order; a turn takes its batch in send order.
        incoming.sort(key=lambda m: m.created_at)
        prepared = PreparedTurn(settled, incoming, effects, notes.after(effects) if effects else notes)
        asking = next((i for i in reversed(settled) if i.reply_expected and i.author_id), None)
        if asking is not None and asking.view:
            prepared = replace(prepared, hint=asking.view)
        if asking is not None and asking.author_id and self.intake is not None:
            prepared = replace(prepared, zone=await self.intake.zone(conversation, asking.author_id))
        return prepared

    async def settled(self, conversation: Conversation, items: Sequence[InboxItem], history: History | None, *,
                      route: bool = True, mention_waiting: MentionWaiting | None = None) -> list[InboxItem]:
        """``items`` with their authors' names looked up and, with ``route``, whether to answer decided by the
        transport's :class:`Intake` (reading ``history``'s last lines); as they are without an intake.

        Routing never delays a message that asks the bot directly: a batch that holds one is answered as a
        whole (its reply sees every message of the batch) without asking the router; otherwise the router is
        asked about each message at once (at most ``ROUTING_CONCURRENCY`` calls per worker), and when
        ``mention_waiting`` says such a message arrived meanwhile, the calls are abandoned and the batch only
        recorded, so the next turn answers that message at once, with these messages in its history."""
        if self.intake is None or not any(i.author_id or i.route for i in items):
            return self.redacted(items, history)
        intake = self.intake
        ids = sorted({i.author_id for i in items if i.message is not None and i.author_id})
        names = dict(zip(ids, await asyncio.gather(*(intake.author(conversation, a) for a in ids)), strict=True))
        recent = [f"{m.author or m.role}: {m.text}" for m in (history.messages if history else [])
                  if m.role in ("user", "assistant") and not m.flags.runtime and not m.flags.handoff][-6:]
        out: list[InboxItem] = []
        asks: dict[int, tuple[Message, list[str]]] = {}
        """position in ``out`` → the message and the thread's last lines before it (for the router)."""
        named = [i.model_copy(update={"message": self.tokenizer.counted(i.message.model_copy(
                     update={"author": names[i.author_id]}))}) if i.message is not None and i.author_id else i
                 for i in items]
        for item in self.redacted(named, history):
            message = item.message
            if item.route and route and message is not None:
                asks[len(out)] = (message, recent)
            if message is not None and item.kind == "message":
                recent = [*recent, f"{message.author or message.role}: {message.text}"][-6:]
            out.append(item)
        if not asks or any(i.kind == "message" and i.reply_expected and not i.route for i in out):
            return out  # nothing to route, or the batch is answered anyway
        decided = await self._routed(conversation, intake, asks, mention_waiting)
        return [i.model_copy(update={"reply_expected": True}) if decided.get(n) else i for n, i in enumerate(out)]

    async def _routed(self, conversation: Conversation, intake: Intake, asks: dict[int, tuple[Message, list[str]]],
                      mention_waiting: MentionWaiting | None) -> dict[int, bool]:
        conversation_id = conversation.id

        async def ask(message: Message, lines: list[str]) -> bool:
            async with self.routing:
                return await intake.route(conversation, message.text, lines)

        tasks = {asyncio.create_task(ask(m, lines), name=f"route:{conversation_id}"): n
                 for n, (m, lines) in asks.items()}
        waiting: set[asyncio.Task[bool]] = set(tasks)
        try:
            while waiting:
                _, waiting = await asyncio.wait(waiting, timeout=ROUTING_POLL_SECONDS if mention_waiting else None)
                if waiting and mention_waiting is not None and await mention_waiting():
                    log.info("%s: a message for the bot arrived while %d messages were routed; they are recorded "
                             "and it is answered first", conversation_id, len(tasks))
                    return {}
            return {n: t.result() for t, n in tasks.items()}
        finally:
            for t in waiting:
                t.cancel()

    def arriving(self, item: InboxItem, conversation_id: str | None = None) -> InboxItem:
        """``item`` as the inbox keeps it: a person's message redacted, after the end of the last message its author
        sent this process in the conversation when it has one in memory (:meth:`stored`: no round trip before the
        event is acknowledged), else alone; :meth:`redacted` reads it with its author's previous message again when
        a turn takes it, wherever that message arrived. A token split between the two is left for that read, which
        removes both halves (the stored first half cannot be rewritten here, and is found only with the second)."""
        message = item.message
        if message is None or message.role != "user":
            return item
        ends = self._ends.get(conversation_id or "") if item.kind == "message" else None
        _, text = redact_after(ends.get(_author(item)) if ends else None, message.text, halves=False)
        clean = self._with_text(message, text)
        return item if clean is message else item.model_copy(update={"message": clean})

    def stored(self, conversation_id: str, item: InboxItem) -> None:
        """Remember the end of a person's message the inbox stored (as :meth:`arriving` left it): the next message
        of its author in the conversation that reaches this process is redacted after it."""
        message = item.message
        if message is None or message.role != "user" or item.kind != "message":
            return
        ends = self._ends.setdefault(conversation_id, {})
        self._ends.move_to_end(conversation_id)
        ends[_author(item)] = tail(message.text)
        if len(ends) > REMEMBERED_AUTHORS:
            del ends[next(iter(ends))]
        if len(self._ends) > REMEMBERED:
            self._ends.popitem(last=False)

    def redacted(self, items: Sequence[InboxItem], history: History | None) -> list[InboxItem]:
        """``items`` with each person's message redacted (:func:`safety.redact_after`) in the context of the same
        author's previous message in the conversation (in ``history`` or earlier in the batch, by the time it was
        sent): a value after a name their previous message ended with, a token split between the two. The one place
        a message is redacted before the router reads it, the turn stores it, its note is made, a handoff folds it or
        a model is sent it; a previous message of the batch loses its half of a split token too (it is not
        in the history yet). An edit is read with the message its author wrote before the one it edits. Authors must
        be named already (history names them)."""
        earlier: dict[str, tuple[int | None, str]] = {}
        """author → the position in ``out`` of their last message (None: in the history) and its text."""
        preceding: dict[str, str] = {}
        """a message's id in the history → its author's message before it (what an edit of it is read with)."""
        asking = {i.message.author or "" for i in items if i.kind == "message" and i.message is not None}
        edited = {i.message.id for i in items if i.kind != "message" and i.message is not None}
        after: dict[str, str] = {}
        """(read from the newest back) author → the id of their message after the one read now"""
        for m in reversed(history.messages) if history else []:
            if m.role == "user" and m.author and not m.flags.runtime and not m.flags.handoff:
                if m.author in asking and m.author not in earlier:
                    earlier[m.author] = (None, m.text)
                if after.get(m.author) in edited:
                    preceding[after[m.author]] = m.text
                after[m.author] = m.id
                if len(earlier) == len(asking) and len(preceding) == len(edited):
                    break  # (what the batch needs is found: the rest of the history is not read)
        out = list(items)
        order = sorted((i.kind != "message", i.message.created_at, n) for n, i in enumerate(out)
                       if i.message is not None and i.message.role == "user")
        for *_, n in order:
            message = out[n].message
            assert message is not None
            if out[n].kind != "message":
                _, text = redact_after(preceding.get(message.id), message.text)
                out[n] = out[n].model_copy(update={"message": self._with_text(message, text)})
                continue
            author = message.author or ""
            at, before = earlier.get(author, (None, None))
            before_now, text = redact_after(before, message.text)
            out[n] = out[n].model_copy(update={"message": self._with_text(message, text)})
            if at is not None and before_now != before:
                previous = out[at].message
                assert previous is not None
                out[at] = out[at].model_copy(update={"message": self._with_text(previous, before_now)})
            earlier[author] = (n, text)
        return out

    def _with_text(self, message: Message, text: str) -> Message:
        """``message`` reading ``text`` (its text parts become one), counted again; itself when it reads so."""
        if text == message.text:
            return message
        parts = [TextPart(text=text), *(p for p in message.parts if not isinstance(p, TextPart))]
        return self.tokenizer.counted(message.model_copy(update={"parts": parts, "note": None, "note_tokens": []}))

    # -- messages ------------------------------------------------------------------------------

    def message(self, text: str, *, role: Role = "user", author: str | None = None, id: str | None = None,
                flags: MessageFlags | None = None, created_at: float | None = None,
                source_ids: Sequence[str] = ()) -> Message:
        """A message with its token count computed now, once."""
        return self.tokenizer.counted(Message(
            id=id or new_id("m"), role=role, parts=[TextPart(text=text)], author=author,
            flags=flags or MessageFlags(), tokens=0, created_at=created_at or self.clock(),
            source_ids=list(source_ids)))

    def prepare_incoming(self, message: Message, *, addressed: bool) -> Message:
        """A person's message as a turn takes it from the inbox: counted, its note computed, marked if it asked
        the bot, and a single input larger than half the usable window cut in the middle with a marker."""
        if message.tokens == 0:
            message = self.tokenizer.counted(message)
        update: dict[str, Any] = {}
        if message.note is None:
            update |= self.noted(message.text, message.created_at)
        if addressed and not message.flags.addressed:
            update["flags"] = message.flags.model_copy(update={"addressed": True})
        message = message.model_copy(update=update) if update else message
        limit = max(256, self.budget.usable_tokens // 2)
        if message.tokens <= limit:
            return message
        text, _ = bound_text(message.text, self.tokenizer, limit)
        return self.tokenizer.counted(message.model_copy(update={"parts": [TextPart(text=text)]}))

    def noted(self, text: str, created_at: float) -> dict[str, Any]:
        """A message's note and its token count, computed once when its turn commits, so a compaction only
        selects and renders."""
        note = make_note(text, created_at) or ""
        return {"note": note, "note_tokens": [self.tokenizer.count(" " + note)] if note else []}

    def numbered(self, history: Sequence[Message], incoming: Sequence[Message]) -> list[Message]:
        """``incoming`` with references (``#N``) following on from ``history``'s, counted in the tokens of the
        messages that show theirs, and the lines recall shows them as counted (see :func:`line_counted`)."""
        ref = refs.next_ref(history)
        out = []
        for m in incoming:
            if m.ref is None and refs.numbered(m):
                m = m.model_copy(update={"ref": ref})
                ref += 1
                if refs.shown(m):
                    m = m.model_copy(update={"tokens": m.tokens + self.tokenizer.count(refs.prefix(m))})
                m = line_counted(m, self.tokenizer)
            out.append(m)
        return out

    def change_notice(self, item: InboxItem) -> Message | None:
        """An edit or deletion becomes a notice in the history, so the model never relies on stale text.

        (The earlier message itself is immutable; compaction applies the change to what it keeps.)"""
        if item.kind == "edit" and item.message is not None:
            text = f"(edited message {item.message.id}; it now reads:) {item.message.text}"
            target, author = item.message.id, item.message.author
        elif item.kind == "delete" and item.target_id:
            text = f"(message {item.target_id} was deleted; disregard what it said)"
            target, author = item.target_id, None
        else:
            return None
        event = item.event_id or item.change or f"{item.received_at:.6f}"
        notice = self.message(text, author=author, id=change_notice_id(target, item.kind, event),
                              created_at=item.received_at)
        return notice.model_copy(update={"note": ""})  # the change reaches the handoff through the edit notes
