"""What a turn shows in Slack and how its work is driven: status (reaction, status message, assistant status),
replies (streamed or posted, delivered at least once and posted once), and the background worker that runs a
conversation's turns, resumes orphaned work and shuts down cleanly."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.persistence import CheckpointKind, CheckpointStatus, NotesStore
from threadkeeper.services import THINKING, Pipeline

from .conversations import DIRECT, POSTED, REACTED, STATUS_MESSAGE, parse_conversation, slack_error
from .format import split_reply
from .metrics import Metrics
from .streaming import DRAFT, SlackDraft, delete_stranded, feedback_blocks
from .workspaces import Workspaces

log = logging.getLogger("threadkeeper.slack")


class SlackEvents:
    """Status and replies for one conversation, posted in its thread with its workspace's client."""

    def __init__(self, workspaces: Workspaces, notes: NotesStore, trigger_ts: dict[str, str],
                 metrics: Metrics) -> None:
        self.workspaces = workspaces
        self.notes = notes
        self.trigger_ts = trigger_ts
        self.metrics = metrics
        self.askers: dict[str, tuple[str, str]] = {}
        """conversation → (team, user) of the person whose message the running turn answers."""
        self.drafts: dict[str, SlackDraft] = {}
        """conversation → the reply its running turn is writing."""

    async def _client(self, conversation_id: str) -> AsyncWebClient | None:
        client = await self.workspaces.client(parse_conversation(conversation_id)[0])
        if client is None:
            log.warning("%s: the bot no longer serves this workspace; nothing posted", conversation_id)
        return client

    async def status(self, conversation_id: str, text: str | None) -> None:
        """Show what the turn is doing: in an assistant thread with the assistant status; elsewhere with an
        :eyes: reaction on the message being answered, plus a short status message in the thread while it
        does something slower than thinking (compacting, searching). Which message carries the reaction and
        which is the status message are kept in Redis, so whichever worker ends the conversation's work next
        (after a restart too) removes them. ``None``: the work is over."""
        if text is None and conversation_id in self.drafts:  # the turns ended without finishing it
            await self.drafts.pop(conversation_id).discard()
        _, channel, thread_ts = parse_conversation(conversation_id)
        client = await self._client(conversation_id)
        if client is None:
            return
        try:
            if await self.notes.flag(conversation_id, "assistant") == "1":
                await client.assistant_threads_setStatus(channel_id=channel, thread_ts=thread_ts,
                                                         status=text or "")
                return
            reacted = await self.notes.flag(conversation_id, REACTED)
            if text and not reacted and conversation_id in self.trigger_ts:
                ts = self.trigger_ts[conversation_id]
                await self.notes.set_flag(conversation_id, REACTED, ts)
                await client.reactions_add(channel=channel, timestamp=ts, name="eyes")
            elif text is None and reacted:
                await self.notes.set_flag(conversation_id, REACTED, "")
                await client.reactions_remove(channel=channel, timestamp=reacted, name="eyes")
            await self._status_message(client, conversation_id, channel, thread_ts, text)
        except SlackApiError as exc:  # status is best effort; a missing scope must not stop the turn
            log.info("status update in %s failed: %s", conversation_id, slack_error(exc))

    async def _status_message(self, client: AsyncWebClient, conversation_id: str, channel: str, thread_ts: str,
                              text: str | None) -> None:
        shown = await self.notes.flag(conversation_id, STATUS_MESSAGE)
        if text is None:
            if shown:
                await self.notes.set_flag(conversation_id, STATUS_MESSAGE, "")
                await client.chat_delete(channel=channel, ts=shown)
        elif shown:
            await client.chat_update(channel=channel, ts=shown, text=f"_{text}_")
        elif text != THINKING:  # the reaction already says it is thinking
            posted = await client.chat_postMessage(channel=channel, text=f"_{text}_",
                                                   thread_ts=None if thread_ts == DIRECT else thread_ts)
            await self.notes.set_flag(conversation_id, STATUS_MESSAGE, str(posted["ts"]))

    async def draft(self, conversation_id: str) -> SlackDraft | None:
        """A draft for the reply the turn is about to write (shown only if the model streams)."""
        stale = self.drafts.pop(conversation_id, None)
        if stale is not None:  # an earlier attempt of this turn that ended without a reply
            await stale.discard()
        _, channel, thread_ts = parse_conversation(conversation_id)
        client = await self._client(conversation_id)
        if client is None:
            return None
        draft = SlackDraft(client, self.notes, conversation_id, channel=channel,
                           thread_ts=None if thread_ts == DIRECT else thread_ts,
                           recipient=self.askers.get(conversation_id))
        self.drafts[conversation_id] = draft
        return draft

    async def reply(self, conversation_id: str, text: str, *, kind: str, trace_id: str | None,
                    checkpoint_id: str | None = None) -> None:
        """Post a turn's reply (finishing the draft it was written into, if any); once it is posted, the turn
        is marked delivered (``posted``: its checkpoint), so a reply is posted again only when the process
        died before that mark (see ``deliver_pending``). A finished answer carries feedback buttons."""
        if checkpoint_id and await self.notes.flag(conversation_id, POSTED) == checkpoint_id:
            return
        _, channel, thread_ts = parse_conversation(conversation_id)
        client = await self._client(conversation_id)
        if client is None:
            return
        parts = split_reply(text)
        feedback = feedback_blocks(parts[-1], checkpoint_id) if kind == "completed" and parts else None
        draft = self.drafts.pop(conversation_id, None)
        done = 0
        if draft is not None and parts and await draft.finish(parts[0], feedback if len(parts) == 1 else None):
            done = 1
            self.metrics.streamed.labels("stream" if draft.streaming else "update").inc()
        elif draft is None:
            await delete_stranded(client, self.notes, conversation_id)  # left by a worker that stopped mid-reply
        for n, part in enumerate(parts[done:], start=done):
            try:  # a direct message conversation is answered in the conversation itself, not in a thread
                await client.chat_postMessage(channel=channel, thread_ts=None if thread_ts == DIRECT else thread_ts,
                                              text=part, unfurl_links=False,
                                              blocks=feedback if n == len(parts) - 1 else None)
            except SlackApiError as exc:
                self.metrics.errors.labels("post").inc()
                log.error("posting a reply in %s failed: %s", conversation_id, slack_error(exc))
                return
        if not done:
            self.metrics.streamed.labels("post").inc()
        if checkpoint_id:
            await self.notes.set_flag(conversation_id, POSTED, checkpoint_id)

    async def in_slack(self, conversation_id: str, text: str, *, since: float) -> bool:
        """Whether the bot's post of ``text`` is already in the conversation (posted, then the process died
        before marking it delivered). A failed lookup answers no: a reply is better twice than never."""
        team, channel, thread_ts = parse_conversation(conversation_id)
        first = split_reply(text)[0]
        client, me = await self.workspaces.client(team), await self.workspaces.identity(team)
        if client is None or me is None:
            return False
        bot = me.user_id
        try:
            if thread_ts == DIRECT:
                page = await client.conversations_history(channel=channel, oldest=f"{since:.6f}", limit=200)
            else:
                page = await client.conversations_replies(channel=channel, ts=thread_ts, oldest=f"{since:.6f}",
                                                          limit=200)
        except SlackApiError as exc:
            log.info("checking for an earlier post in %s failed: %s", conversation_id, slack_error(exc))
            return False
        return any(m.get("text") == first and (m.get("user") == bot or m.get("bot_id"))
                   for m in page.get("messages") or [])


class TurnWorker:
    """Runs turns in the background: one task per conversation, re-run while work is pending."""

    def __init__(self, pipeline: Pipeline, events: SlackEvents, metrics: Metrics) -> None:
        self.pipeline = pipeline
        self.events = events
        self.metrics = metrics
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.again: set[str] = set()
        self.closing = False

    def kick(self, cid: str) -> None:
        if self.closing:
            return  # shutting down: the work stays in the inbox for another worker's sweep
        task = self.tasks.get(cid)
        if task is not None and not task.done():
            self.again.add(cid)
            return
        self.tasks[cid] = asyncio.create_task(self._drive(cid), name=f"turns:{cid}")

    def background(self, work: Any) -> None:
        """Run ``work`` (a coroutine) beside the turns; shutdown and ``idle`` wait for it like a turn."""
        self.tasks[f"background:{id(work)}"] = asyncio.create_task(work, name="background")

    async def deliver_pending(self, cid: str, *, within_seconds: float = 3_600) -> bool:
        """Post the reply of the conversation's last turn if it committed but was never marked posted (the
        process died in between), unless Slack already shows it. Returns whether it was posted now."""
        checkpoints = self.pipeline.checkpoints
        state = await checkpoints.get_state(cid)
        if state is None or state.head_checkpoint_id is None:
            return False
        head = await checkpoints.get(cid, state.head_checkpoint_id)
        done_at = head.outcome.at if head.outcome else head.meta.created_at
        if head.kind is not CheckpointKind.TURN or head.status is not CheckpointStatus.COMPLETED or \
                time.time() - done_at > within_seconds or await self.events.notes.flag(cid, POSTED) == head.id:
            return False
        last = (await checkpoints.load_history(cid, head.id)).messages[-1]
        if last.role != "assistant" or not last.text.strip() or \
                any(p.type in ("tool_call", "tool_result") for p in last.parts):
            return False  # a turn that only recorded messages
        if await self.events.in_slack(cid, last.text, since=head.meta.created_at - 1):
            await self.events.notes.set_flag(cid, POSTED, head.id)
            return False
        log.warning("posting the reply of %s that a stopped worker committed but never posted", head.id)
        await self.events.reply(cid, last.text, kind="completed", trace_id=None, checkpoint_id=head.id)
        return True

    async def _drive(self, cid: str) -> None:
        try:
            await self.deliver_pending(cid)
            while True:
                self.again.discard(cid)
                started = time.perf_counter()
                results = await self.pipeline.run(cid, self.events)
                self.metrics.observe(results, time.perf_counter() - started)
                if not results:
                    break  # another worker holds the lease; it drains what is pending
                if cid not in self.again and await self.pipeline.pending(cid) == 0:
                    break
        except Exception:  # noqa: BLE001 - a background task must log, never vanish silently
            self.metrics.errors.labels("worker").inc()
            log.exception("turns for %s stopped", cid)

    async def idle(self) -> None:
        """Wait until no turn is running (tests, shutdown)."""
        while True:
            running = [t for t in self.tasks.values() if not t.done()]
            if not running:
                return
            await asyncio.gather(*running, return_exceptions=True)

    async def shutdown(self, deadline_seconds: float) -> int:
        """Stop taking turns, let running ones finish for up to ``deadline_seconds``, then stop the rest:
        a stopped turn is set aside (superseded) and its lease released, so another worker takes the
        conversation over at once from its inbox. Returns how many were stopped."""
        self.closing = True
        running = [t for t in self.tasks.values() if not t.done()]
        if not running:
            return 0
        _, pending = await asyncio.wait(running, timeout=max(0.0, deadline_seconds))
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            log.warning("shutdown: %d turns stopped at the deadline; other workers resume them", len(pending))
        return len(pending)

    async def sweep(self, *, window_seconds: float = 86_400) -> int:
        """Resume conversations with pending work and no lease holder (a crashed worker's threads)."""
        kicked = 0
        for cid in await self.pipeline.inbox.recently_active(window_seconds):
            if cid in self.tasks and not self.tasks[cid].done():
                continue
            if await self.pipeline.executor.leases.holder(cid) is not None:
                continue
            if await self.pipeline.pending(cid) > 0:
                self.kick(cid)  # its turn delivers a pending reply first
                kicked += 1
                continue
            if await self.deliver_pending(cid):
                kicked += 1
            if await self.events.notes.flag(cid, REACTED) or await self.events.notes.flag(cid, STATUS_MESSAGE):
                await self.events.status(cid, None)  # left by a worker that died mid-turn
            if await self.events.notes.flag(cid, DRAFT):  # a reply a worker died writing
                client = await self.events.workspaces.client(parse_conversation(cid)[0])
                if client is not None:
                    await delete_stranded(client, self.events.notes, cid)
        return kicked
