"""What a turn takes in: its items settled (authors named, routing decided), its runtime context with the
recalled messages, messages made and counted once, people's messages prepared as a turn takes them
(counted, noted, marked, numbered, bounded), edits and deletions as notices, and how many queued items one
turn takes. Part of :class:`services.executor.ReplyExecutor`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from threadkeeper.persistence import History, InboxItem, Message, MessageFlags, Role, TextPart, new_id

from ..context import calibration, next_ref, refs, visible
from ..memory import Memory
from ..models import ContextBudget, Tokenizer, bound_text
from ..recall import Recall, change_notice_id
from ..text import make_note
from .types import Intake, RuntimeContext, TurnState

log = logging.getLogger("threadkeeper.executor")

ROUTING_CONCURRENCY = 8
"""Router calls one worker runs at once (over all its conversations)."""
ROUTING_POLL_SECONDS = 0.1
"""How often a turn waiting on its router calls looks for a message that asks the bot directly."""

MentionWaiting = Callable[[], Awaitable[bool]]
"""Whether a message that asks the bot directly (a mention, a DM) waits behind the items being routed."""

FOCUS_NOTE = ("(The handoff's notes are left out of this turn: the messages recalled above are what the new message "
              "is about.)")


class Incoming:
    """The executor's message making (a mixin: it uses the executor's tokenizer, budget, clock, intake, recall
    and runtime context)."""

    tokenizer: Tokenizer
    budget: ContextBudget
    clock: Callable[[], float] = time.time
    intake: Intake | None
    recall: Recall | None
    routing: asyncio.Semaphore
    """Bounds the router calls this worker runs at once (``ROUTING_CONCURRENCY``)."""
    memory: Memory | None
    runtime_context: RuntimeContext
    tool_limit: Callable[[], int]

    async def settled(self, conversation_id: str, items: Sequence[InboxItem], history: History | None, *,
                      route: bool = True, mention_waiting: MentionWaiting | None = None) -> list[InboxItem]:
        """``items`` with their authors' names looked up and, with ``route``, whether to answer decided by the
        transport's :class:`Intake` (reading ``history``'s last lines); as they are without an intake.

        Routing never delays a message that asks the bot directly: a batch that holds one is answered as a
        whole (its reply sees every message of the batch) without asking the router; otherwise the router is
        asked about each message at once (at most ``ROUTING_CONCURRENCY`` calls per worker), and when
        ``mention_waiting`` says such a message arrived meanwhile, the calls are abandoned and the batch only
        recorded, so the next turn answers that message at once, with these messages in its history."""
        if self.intake is None or not any(i.author_id or i.route for i in items):
            return list(items)
        intake = self.intake
        ids = sorted({i.author_id for i in items if i.message is not None and i.author_id})
        names = dict(zip(ids, await asyncio.gather(*(intake.author(conversation_id, a) for a in ids))))
        recent = [f"{m.author or m.role}: {m.text}" for m in (history.messages if history else [])
                  if m.role in ("user", "assistant") and not m.flags.runtime and not m.flags.handoff][-6:]
        out: list[InboxItem] = []
        asks: dict[int, list[str]] = {}
        """position in ``out`` → the thread's last lines before that message (for the router)."""
        for item in items:
            message = item.message
            if message is not None and item.author_id:
                message = self.with_tokens(message.model_copy(update={"author": names[item.author_id]}))
                item = item.model_copy(update={"message": message})
            if item.route and route and message is not None:
                asks[len(out)] = recent
            if message is not None and item.kind == "message":
                recent = [*recent, f"{message.author or message.role}: {message.text}"][-6:]
            out.append(item)
        if not asks or any(i.kind == "message" and i.reply_expected and not i.route for i in out):
            return out  # nothing to route, or the batch is answered anyway
        decided = await self._routed(conversation_id, {n: (out[n].message, lines) for n, lines in asks.items()},
                                     mention_waiting)
        return [i.model_copy(update={"reply_expected": True}) if decided.get(n) else i for n, i in enumerate(out)]

    async def _routed(self, conversation_id: str, asks: dict[int, tuple[Any, list[str]]],
                      mention_waiting: MentionWaiting | None) -> dict[int, bool]:
        assert self.intake is not None
        intake = self.intake

        async def ask(message: Any, lines: list[str]) -> bool:
            async with self.routing:
                return await intake.route(conversation_id, message.text, lines)

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

    async def runtime_message(self, conversation_id: str, history: History | None, context: Sequence[Message],
                              incoming: Sequence[Message], *, asker: str | None = None) -> Message:
        """The turn's runtime context: who and when, the memory from other conversations found for ``incoming``
        (visible to this conversation and to ``asker``, a Slack user id), and the earlier messages recalled for it.

        ``history`` is the head the turn starts from; ``context`` every message the request carries besides
        this one (history and incoming). Recall and memory each take at most their budget share (memory also the
        recall share when there is nothing to recall, as in a new thread), together never more than the request
        has room for beside a tool result. ``Pipeline.context`` shows exactly this message.
        """
        header = self.runtime_context(conversation_id, context, incoming, self.clock())
        runtime = self.make_message(header, role="system", flags=MessageFlags(runtime=True))
        if self.recall is None and self.memory is None:
            return runtime
        shown = visible(context)
        sent = sum(m.tokens for m in shown) + runtime.tokens
        budget = self.budget.in_estimates(calibration(history, fixed_prompt_tokens=self.budget.fixed_prompt_tokens))
        # within the window as the provider counts it, and never past the request guard, which counts estimates
        room = min(budget.request_limit_tokens - budget.fixed_prompt_tokens,
                   self.budget.request_limit_tokens - self.budget.fixed_prompt_tokens) - sent - self.tool_limit()
        parts, ids, recall_left = [header], [], 0
        if self.recall is not None:
            cap = min(budget.recall_tokens, room) - 2  # the line break that joins the block to the header
            handoff = next((m for m in shown if m.flags.handoff and len(m.parts) > 1 and m.note_tokens), None)
            # the notes' room, less the line that says they are left out
            focus = max(0, handoff.note_tokens[0] - self.tokenizer.count(FOCUS_NOTE) - 2) if handoff else 0
            recalled = await self.recall.recall(conversation_id, history, shown, incoming, cap, focus_tokens=focus)
            if recalled.ids:
                parts.append(recalled.text)
                ids += recalled.ids
                room -= recalled.tokens + 2
                if recalled.focused and handoff is not None:  # see services.context.visible
                    parts.append(FOCUS_NOTE)
                    ids = [*ids, handoff.id]
            else:
                recall_left = max(0, cap)  # a thread with nothing to recall (a new one): memory may use the room
        if self.memory is not None:
            query = "\n".join(m.text for m in incoming if m.role == "user")
            block = await self.memory.block(conversation_id, query, asker=asker,
                                            cap_tokens=min(budget.memory_tokens + recall_left, room) - 2)
            if block.records:  # after the header, before the recalled messages (the thread's own come last)
                parts.insert(1, block.text)
                ids = [*block.ids, *ids]
        text = "\n".join(parts)
        if not ids:
            return runtime
        return self.with_tokens(runtime.model_copy(update={"parts": [TextPart(text=text)], "source_ids": ids}))

    @staticmethod
    def runtime_reference(runtime: Message) -> Message:
        """The runtime context as a turn stores it: by reference (the recalled ids, what it cost), not as a copy
        of its text. A history holds what was said; the recalled messages are in it already."""
        return runtime.model_copy(update={"parts": []})

    @staticmethod
    def paused_runtime(turn: TurnState) -> dict[str, Any]:
        """What a paused turn's resume record keeps of its runtime context: the text it sent, so that the resumed
        request is exactly the one it would have sent (its clock, participants and recall as they were)."""
        runtime = next((m for m in reversed(turn.messages) if m.id == turn.runtime_id), None)
        return {"runtime": {"id": runtime.id, "text": runtime.text}} if runtime is not None and runtime.parts else {}

    @staticmethod
    def resumed_runtime(messages: list[Message], resume: dict[str, Any]) -> list[Message]:
        """``messages`` (a paused turn's stored history) with its runtime context's text back from ``resume``."""
        saved = resume.get("runtime")
        if not isinstance(saved, dict) or not isinstance(saved.get("text"), str):
            return messages  # stored whole, as earlier versions did
        return [m.model_copy(update={"parts": [TextPart(text=saved["text"])]}) if m.id == saved.get("id") else m
                for m in messages]


    def make_message(self, text: str, *, role: Role = "user", author: str | None = None, id: str | None = None,
                     flags: MessageFlags | None = None, created_at: float | None = None,
                     source_ids: Sequence[str] = ()) -> Message:
        """A message with its token count computed now, once."""
        base = Message(id=id or new_id("m"), role=role, parts=[TextPart(text=text)], author=author,
                       flags=flags or MessageFlags(), tokens=0, created_at=created_at or self.clock(),
                       source_ids=list(source_ids))
        return base.model_copy(update={"tokens": self.tokenizer.count_message(base)})

    def with_tokens(self, message: Message) -> Message:
        return message.model_copy(update={"tokens": self.tokenizer.count_message(message)})

    def _prepared(self, message: Message, *, addressed: bool) -> Message:
        """A person's message as the turn stores it: counted, its note computed, marked if it asked the bot."""
        update: dict[str, Any] = {}
        if message.tokens == 0:
            update["tokens"] = self.tokenizer.count_message(message)
        if message.note is None:
            update |= self.noted(message.text, message.created_at)
        if addressed and not message.flags.addressed:
            update["flags"] = message.flags.model_copy(update={"addressed": True})
        return message.model_copy(update=update) if update else message

    def numbered(self, history: Sequence[Message], incoming: Sequence[Message]) -> list[Message]:
        """``incoming`` with references (:mod:`services.refs`) following on from ``history``'s, counted in
        the tokens of the messages that show theirs."""
        ref = next_ref(history)
        out = []
        for m in incoming:
            if m.ref is None and refs.numbered(m):
                m = m.model_copy(update={"ref": ref})
                ref += 1
                if refs.shown(m):
                    m = m.model_copy(update={"tokens": m.tokens + self.tokenizer.count(refs.prefix(m))})
            out.append(m)
        return out

    def prepare_incoming(self, message: Message, *, addressed: bool) -> Message:
        """A person's message as a turn takes it from the inbox (counted, noted, marked, bounded)."""
        return self._bound_input(self._prepared(message, addressed=addressed))

    def _change_notice(self, item: InboxItem) -> Message | None:
        """An edit or deletion becomes a note in the history, so the model never relies on stale text.

        (The earlier message itself is immutable; compaction applies the change to what it keeps.)
        """
        if item.kind == "edit" and item.message is not None:
            text = f"(edited message {item.message.id}; it now reads:) {item.message.text}"
            target, author = item.message.id, item.message.author
        elif item.kind == "delete" and item.target_id:
            text = f"(message {item.target_id} was deleted; disregard what it said)"
            target, author = item.target_id, None
        else:
            return None
        notice = self.make_message(text, author=author, id=change_notice_id(target, item.kind,
                                                                            item.event_id or new_id("ev")),
                                   created_at=item.received_at)
        return notice.model_copy(update={"note": ""})  # the change reaches the handoff through the edit notes

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

    def _bound_input(self, message: Message) -> Message:
        """A single input larger than the usable window is cut in the middle with a marker."""
        limit = max(256, self.budget.usable_tokens // 2)
        if message.tokens <= limit:
            return message
        text, _ = bound_text(message.text, self.tokenizer, limit)
        return self.with_tokens(message.model_copy(update={"parts": [TextPart(text=text)]}))

    def noted(self, text: str, created_at: float) -> dict[str, Any]:
        """A message's note and its token count, computed once when its turn commits, so a compaction only
        selects and renders."""
        note = make_note(text, created_at) or ""
        return {"note": note, "note_tokens": [self.tokenizer.count(" " + note)] if note else []}
