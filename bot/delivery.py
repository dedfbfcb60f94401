"""What a turn shows in Slack and how its work is driven: status (reaction, status message, assistant status),
replies (streamed or posted, delivered exactly once), and the background worker that runs a conversation's
turns, resumes orphaned work and shuts down cleanly.

Exactly once, by construction: everything here runs inside the executor's turns, so only the holder of the
conversation's lease posts, updates or deletes a reply (the lease is renewed while it posts). Each part of a
reply carries a marker in its message metadata (the turn's checkpoint and the part's number). When Slack's
answer to a post is lost (the connection dropped, a server error, a timeout) the client does not send it again
(``conversations.make_client``): the thread is read back first, and the part is posted again only when Slack
does not show it; when the thread cannot be read, the reply stays owed and the next holder of the lease reads
back again. A worker that takes over a conversation delivers the reply its predecessor committed but never
confirmed the same way (``recover``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.bot.manifest import Surface
from threadkeeper.persistence import LeaseLostError
from threadkeeper.services import THINKING, Conversation, Pipeline, as_conversation
from threadkeeper.services.memory import Source, sources_line

from .conversations import DIRECT, REACTED, STATUS_MESSAGE, slack_error, thread_ts
from .format import split_reply
from .metrics import Metrics
from .readback import (
    CLOCK_SKEW_SECONDS,
    LOST,
    READ_LAG_SECONDS,
    bot_messages,
    is_reply,
    marked_part,
    reply_marker,
    until_read,
)
from .streaming import DRAFT, SlackDraft, delete_stranded, feedback_blocks
from .workspaces import Workspaces

log = logging.getLogger("threadkeeper.slack")

POST_ATTEMPTS = 3
"""Posts of one part whose answer was lost, each after reading back that Slack does not show it."""
PERMALINKS_KEPT = 4096
"""Permalinks of memory's sources a worker keeps (a message's permalink never changes)."""


class SlackEvents:
    """Status and replies for one conversation, posted in its thread with its workspace's client."""

    def __init__(self, workspaces: Workspaces, pipeline: Pipeline, trigger_ts: dict[str, str],
                 metrics: Metrics, *, surface: Surface = "agent") -> None:
        self.workspaces = workspaces
        self.surface = surface
        self.sessions_refused: set[str] = set()
        """Workspaces that refused agent sessions (an app not declared an agent, a missing scope): the reaction
        stands in there."""
        self.ending: dict[str, str] = {}
        """conversation → the session status its run ends in, when not ``active`` (``suspended``: a failure the
        person must act on)."""
        self.pipeline = pipeline
        """The application: the conversation's flags and the reply it owes."""
        self.trigger_ts = trigger_ts
        self.metrics = metrics
        self.askers: dict[str, tuple[str, str]] = {}
        """conversation → (team, user) of the person whose message the running turn answers."""
        self.drafts: dict[str, SlackDraft] = {}
        """conversation → the reply its running turn is writing."""
        self.permalinks: dict[tuple[str, str, str], str] = {}
        """(workspace, channel, message ts) → the message's permalink, as ``chat.getPermalink`` gave it."""

    async def _client(self, conversation: Conversation) -> AsyncWebClient | None:
        client = await self.workspaces.client(conversation.workspace)
        if client is None:
            log.warning("%s: the bot no longer serves this workspace; nothing posted", conversation)
        return client

    async def status(self, conversation: Conversation, text: str | None) -> None:
        """Show what the turn is doing: on the agent surface with the thread's agent session (``processing`` while
        it works, with Slack's stop button; ``active`` when done, ``suspended`` after a failure); in an assistant
        thread with the assistant status; elsewhere (or where Slack refuses sessions) with an :eyes: reaction on
        the message being answered. A short status message in the thread says what it does while it does
        something slower than thinking (compacting, searching). Which message carries the reaction and which is
        the status message are kept in Redis, so whichever worker ends the conversation's work next (after a
        restart too) removes them. ``None``: the work is over."""
        channel = conversation.channel
        try:
            if text is None and conversation.id in self.drafts:  # the turns ended without finishing it
                await self.drafts.pop(conversation.id).discard()
            client = await self._client(conversation)
            if client is None:
                return
            if await self.pipeline.flag(conversation, "assistant") == "1":
                await client.assistant_threads_setStatus(channel_id=channel, thread_ts=conversation.thread,
                                                         status=text or "")
                return
            if await self._session(client, conversation, text):
                await self._status_message(client, conversation, text)
                return
            reacted = await self.pipeline.flag(conversation, REACTED)
            if text and not reacted and conversation.id in self.trigger_ts:
                ts = self.trigger_ts[conversation.id]
                await self.pipeline.set_flag(conversation, REACTED, ts)
                await client.reactions_add(channel=channel, timestamp=ts, name="eyes")
            elif text is None and reacted:
                await self.pipeline.set_flag(conversation, REACTED, "")
                await client.reactions_remove(channel=channel, timestamp=reacted, name="eyes")
            await self._status_message(client, conversation, text)
        except SlackApiError as exc:  # status is best effort; a missing scope must not stop the turn
            log.info("status update in %s failed: %s", conversation, slack_error(exc))
        except LOST as exc:
            log.info("status update in %s got no answer: %s: %s", conversation, type(exc).__name__, exc)
        except LeaseLostError:  # its flags are refused: the worker holding the lease now shows the work
            log.info("status update in %s: another worker holds the conversation now", conversation)

    async def _session(self, client: AsyncWebClient, conversation: Conversation, text: str | None) -> bool:
        """On the agent surface, the thread's agent session says whether the bot works on it (Slack shows a stop
        button while it is ``processing``). False where Slack refuses sessions (then the reaction stands in)."""
        if self.surface != "agent" or conversation.workspace in self.sessions_refused or \
                conversation.thread == DIRECT:
            return False
        status = "processing" if text else self.ending.pop(conversation.id, "active")
        asker = self.askers.get(conversation.id)
        try:
            await client.agents_sessions_setStatus(channel_id=conversation.channel, thread_ts=conversation.thread,
                                                   status=status, initiator_user_id=asker[1] if asker else None)
        except SlackApiError as exc:
            self.sessions_refused.add(conversation.workspace)
            log.info("agent sessions unavailable in %s (%s): status shown with a reaction instead",
                     conversation.workspace, slack_error(exc))
            return False
        return True

    async def close(self, conversation: Conversation) -> None:
        """The conversation was forgotten: its agent session is closed (agent surface; best effort)."""
        client = await self._client(conversation)
        if client is None or self.surface != "agent" or conversation.thread == DIRECT:
            return
        try:
            await client.agents_sessions_setStatus(channel_id=conversation.channel, thread_ts=conversation.thread,
                                                   status="closed")
        except (SlackApiError, *LOST) as exc:
            log.info("closing the agent session of %s failed: %s", conversation, exc)

    async def _status_message(self, client: AsyncWebClient, conversation: Conversation, text: str | None) -> None:
        channel, thread = conversation.channel, thread_ts(conversation)
        shown = await self.pipeline.flag(conversation, STATUS_MESSAGE)
        if text is None:
            if shown:
                await self.pipeline.set_flag(conversation, STATUS_MESSAGE, "")
                await client.chat_delete(channel=channel, ts=shown)
        elif shown:
            await client.chat_update(channel=channel, ts=shown, text=f"_{text}_")
        elif text != THINKING:  # the reaction already says it is thinking
            posted = await client.chat_postMessage(channel=channel, text=f"_{text}_",
                                                   thread_ts=thread)
            await self.pipeline.set_flag(conversation, STATUS_MESSAGE, str(posted["ts"]))

    async def draft(self, conversation: Conversation) -> SlackDraft | None:
        """A draft for the reply the turn is about to write (shown only if the model streams)."""
        stale = self.drafts.pop(conversation.id, None)
        if stale is not None:  # an earlier attempt of this turn that ended without a reply
            await stale.discard()
        channel, thread = conversation.channel, thread_ts(conversation)
        client = await self._client(conversation)
        if client is None:
            return None
        draft = SlackDraft(client, self.pipeline, conversation.id, channel=channel,
                           thread_ts=thread,
                           recipient=self.askers.get(conversation.id),
                           me=await self.workspaces.identity(conversation.workspace))
        self.drafts[conversation.id] = draft
        return draft

    async def reply(self, conversation: Conversation, text: str, *, kind: str, trace_id: str | None,
                    checkpoint_id: str | None = None, notice: str | None = None,
                    sources: Sequence[Source] = ()) -> bool:
        """Post a turn's reply (finishing the draft it was written into, if any), each part at most once (see the
        module's description); once every part is in Slack, the turn is marked delivered (``posted``: its
        checkpoint). Returns False when a part could not be confirmed (the reply stays owed). A finished answer
        carries feedback buttons."""
        if kind == "failed":
            self.ending[conversation.id] = "suspended"  # the person has to ask again
        if checkpoint_id and await self.pipeline.was_delivered(conversation, checkpoint_id):
            return True
        client = await self._client(conversation)
        if client is None:
            return True  # the workspace is gone: nothing can ever be posted there
        parts = split_reply(text)
        feedback = await self._blocks(client, conversation, parts, checkpoint_id, notice, sources) \
            if kind == "completed" else None
        draft = self.drafts.pop(conversation.id, None)
        done = 0
        if draft is not None and parts and await draft.finish(
                parts[0], feedback if len(parts) == 1 else None,
                reply_marker(checkpoint_id, 0) if checkpoint_id else None):
            done = 1
            self.metrics.streamed.labels("stream" if draft.streaming else "update").inc()
        elif await self._stranded(client, conversation) is None:
            return False  # a half-written reply may be in the thread: it goes before this one is posted
        if not await self._deliver(client, conversation, parts, checkpoint_id, feedback, shown=set(range(done))):
            return False
        if not done:
            self.metrics.streamed.labels("post").inc()
        return True

    async def _blocks(self, client: AsyncWebClient, conversation: Conversation, parts: list[str],
                      checkpoint_id: str | None, notice: str | None, sources: Sequence[Source]) -> list[Any] | None:
        """What a finished answer's last part shows (:func:`feedback_blocks`: its text, the notice, where the
        memory it cited was said, the feedback buttons): the one rule for every delivery of a reply, whether the
        turn's worker posts it or the next holder of the lease does (from what the turn stored)."""
        if not parts:
            return None
        return feedback_blocks(parts[-1], checkpoint_id, notice, await self._sources(client, conversation, sources))

    async def _deliver(self, client: AsyncWebClient, conversation: Conversation, parts: list[str],
                       checkpoint_id: str | None, feedback: list[Any] | None, *, shown: set[int]) -> bool:
        """Post the parts of the reply not in ``shown`` (``feedback`` under the last), each at most once
        (:meth:`_post`), and mark the reply delivered. False when a part stays owed."""
        for n, part in enumerate(parts):
            if n in shown:
                continue
            outcome = await self._post(client, conversation, part, blocks=feedback if n == len(parts) - 1 else None,
                                       checkpoint_id=checkpoint_id, part=n, parts=parts)
            if outcome == "owed":
                return False
            if outcome == "refused":
                break  # Slack refused it for good (the channel is gone, the bot was removed): not retried
        if checkpoint_id:
            await self.pipeline.delivered(conversation, checkpoint_id)
        return True

    async def _sources(self, client: AsyncWebClient, conversation: Conversation, sources: Sequence[Source]) -> str:
        """Where the memory a reply cites was said, each day a link to the message (``chat.getPermalink``; a message
        Slack will not link to, say deleted since, is named without one)."""
        links: dict[Source, str] = {}
        for source in sources:
            key = (conversation.workspace, source.channel, source.message_id)
            if key not in self.permalinks:
                try:
                    answer = await client.chat_getPermalink(channel=source.channel, message_ts=source.message_id)
                except SlackApiError as exc:
                    log.info("%s: no link to memory's source %s: %s", conversation, key, exc.response.get("error"))
                    self.permalinks[key] = ""  # Slack will not link to it: named without a link from now on
                    continue
                except LOST as exc:  # a link is not worth holding the reply for: named without one this time
                    log.info("%s: no answer for memory's source %s: %s", conversation, key, type(exc).__name__)
                    continue
                if len(self.permalinks) >= PERMALINKS_KEPT:
                    self.permalinks.clear()
                self.permalinks[key] = str(answer.get("permalink") or "")
            if self.permalinks[key]:
                links[source] = self.permalinks[key]
        return sources_line(sources, channel=lambda c: f"<#{c}>",
                            link=lambda s, label: f"<{links[s]}|{label}>" if s in links else label)

    async def _post(self, client: AsyncWebClient, conversation: Conversation, text: str, *, blocks: list[Any] | None,
                    checkpoint_id: str | None, part: int, parts: list[str]) -> str:
        """Post one part: ``posted`` (Slack confirmed it, or shows it), ``refused`` (an error that posting again
        cannot fix) or ``owed`` (not confirmed, and not shown or the thread could not be read)."""
        channel, thread = conversation.channel, thread_ts(conversation)
        lost = False
        for attempt in range(POST_ATTEMPTS):
            if attempt:
                shown = await (self._settled(client, conversation, checkpoint_id, parts, part) if lost else
                               self._shown(client, conversation, checkpoint_id, parts))
                if shown is None:
                    return "owed"  # the thread cannot be read: whoever holds the lease next reads it again
                if part in shown:
                    return "posted"
                await asyncio.sleep(0.5 * attempt)
            try:  # a direct message conversation is answered in the conversation itself, not in a thread
                await client.chat_postMessage(channel=channel, thread_ts=thread,
                                              text=text, unfurl_links=False, blocks=blocks,
                                              metadata=reply_marker(checkpoint_id, part) if checkpoint_id else None)
                return "posted"
            except SlackApiError as exc:
                self.metrics.errors.labels("post").inc()
                if exc.response.status_code == 429:
                    log.warning("posting a reply in %s: still rate limited after the client's retries; it stays "
                                "owed", conversation)
                    return "owed"  # refused by the rate limit: nothing was posted
                if exc.response.status_code < 500:
                    log.error("posting a reply in %s failed: %s", conversation, slack_error(exc))
                    return "refused"
                log.warning("posting a reply in %s: Slack answered %s; reading the thread back before any retry",
                            conversation, slack_error(exc))
            except LOST as exc:
                self.metrics.errors.labels("post").inc()
                lost = True  # Slack may have posted it, and may not show it yet
                log.warning("posting a reply in %s: the answer was lost (%s: %s); reading the thread back before "
                            "any retry", conversation, type(exc).__name__, exc)
            if checkpoint_id is None:
                return "owed"  # nothing to recognize it by: never posted twice on a guess
        shown = await (self._settled(client, conversation, checkpoint_id, parts, part) if lost else
                       self._shown(client, conversation, checkpoint_id, parts))
        return "posted" if shown is not None and part in shown else "owed"

    async def _settled(self, client: AsyncWebClient, conversation: Conversation, checkpoint_id: str | None,
                       parts: list[str], part: int, *, since: float | None = None) -> set[int] | None:
        """The thread read back (:meth:`_shown`) until it shows ``part`` or Slack's reads had
        ``READ_LAG_SECONDS`` to catch up with a post that may have been made: never posted again sooner."""
        return await until_read(lambda: self._shown(client, conversation, checkpoint_id, parts, since=since),
                                lambda shown: part in shown, deadline=time.time() + READ_LAG_SECONDS)

    async def _shown(self, client: AsyncWebClient, conversation: Conversation, checkpoint_id: str | None,
                     parts: list[str], *, since: float | None = None) -> set[int] | None:
        """Which parts of the reply of ``checkpoint_id`` the thread shows: by their metadata marker, and with
        ``since`` (a turn's start: only what was posted after it) also a bot message without a marker (a
        streamed part finished before replies carried one) by its exact text. None when the thread could not be
        read."""
        me = await self.workspaces.identity(conversation.workspace)
        messages = await bot_messages(client, conversation, me, since=since)
        if messages is None:
            return None
        found: set[int] = set()
        for m in messages:
            part = marked_part(m, checkpoint_id)
            if part is not None:
                found.add(part)
            elif since and not is_reply(m) and m.get("text") in parts:
                found.add(parts.index(m["text"]))
        return found

    async def _stranded(self, client: AsyncWebClient, conversation: Conversation) -> bool | None:
        """Delete the reply a stopped worker left half-written, if any (:func:`delete_stranded`)."""
        return await delete_stranded(client, self.pipeline, conversation.id,
                                     await self.workspaces.identity(conversation.workspace))

    async def recover(self, conversation: Conversation) -> bool:
        """Run by the new holder of the lease before its turns: delete a reply a stopped worker left half-written,
        and deliver the reply of the conversation's last turn if it committed but was never confirmed, posting
        only the parts Slack does not show (by their markers). Returns False when that reply is still owed."""
        if await self.pipeline.flag(conversation, DRAFT):
            client = await self._client(conversation)
            if client is not None and await self._stranded(client, conversation) is None:
                return False  # Slack could not be read: nothing is posted while a half-written reply may show
        owed = await self.pipeline.reply_owed(conversation)
        if owed is None:
            return True
        client = await self._client(conversation)
        if client is None:
            return True
        parts = split_reply(owed.text)
        since = owed.committed_at - CLOCK_SKEW_SECONDS
        shown = await self._shown(client, conversation, owed.checkpoint_id, parts, since=since)
        if shown is not None and len(shown) < len(parts) and time.time() - owed.committed_at < 2 * READ_LAG_SECONDS:
            # posted moments ago, perhaps: what Slack does not show yet is looked for until its reads catch up
            shown = await self._settled(client, conversation, owed.checkpoint_id, parts,
                                        min(set(range(len(parts))) - shown), since=since)
        if shown is None:
            return False
        if len(shown) >= len(parts):
            await self.pipeline.delivered(conversation, owed.checkpoint_id)
            return True
        log.warning("delivering the reply of %s that an earlier worker committed but never confirmed "
                    "(%d of %d parts shown)", owed.checkpoint_id, len(shown), len(parts))
        self.metrics.recovered.inc()
        feedback = await self._blocks(client, conversation, parts, owed.checkpoint_id, owed.notice, owed.sources)
        return await self._deliver(client, conversation, parts, owed.checkpoint_id, feedback, shown=shown)


class TurnWorker:
    """Runs turns in the background: one task per conversation, re-run while work is pending."""

    def __init__(self, pipeline: Pipeline, events: SlackEvents, metrics: Metrics) -> None:
        self.pipeline = pipeline
        self.events = events
        self.metrics = metrics
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.again: set[str] = set()
        self.waiting: dict[str, asyncio.TimerHandle] = {}
        """Conversations to run again at a set time (``later``)."""
        self.closing = False

    def kick(self, conversation: Conversation | str) -> None:
        """Run the conversation's turns in the background (again, when they are running: they look once more)."""
        if self.closing:
            return  # shutting down: the work stays in the inbox for another worker's sweep
        conversation = as_conversation(conversation)
        cid = conversation.id
        task = self.tasks.get(cid)
        if task is not None and not task.done():
            self.again.add(cid)
            return
        self.tasks[cid] = asyncio.create_task(self._drive(conversation), name=f"turns:{cid}")

    def later(self, conversation: Conversation, seconds: float) -> None:
        """Run the conversation's turns again in ``seconds`` (once, however often asked meanwhile); a worker that
        stops first leaves it to the sweep (the conversation stays on the registry of owed work)."""
        cid = conversation.id
        if self.closing or cid in self.waiting:
            return
        loop = asyncio.get_running_loop()

        def due() -> None:
            self.waiting.pop(cid, None)
            self.kick(conversation)

        self.waiting[cid] = loop.call_later(max(0.0, seconds), due)

    def background(self, work: Any) -> None:
        """Run ``work`` (a coroutine) beside the turns; shutdown and ``idle`` wait for it like a turn."""
        self.tasks[f"background:{id(work)}"] = asyncio.create_task(work, name="background")

    async def _drive(self, conversation: Conversation) -> None:
        cid = conversation.id
        try:
            while True:
                self.again.discard(cid)
                started = time.perf_counter()
                results = await self.pipeline.run(conversation, self.events)
                self.metrics.observe(results, time.perf_counter() - started)
                if cid not in self.again:
                    break  # drained (the executor looked again before releasing), owed, or another worker's
        except Exception:  # noqa: BLE001 - a background task must log, never vanish silently
            self.metrics.errors.labels("worker").inc()
            log.exception("turns for %s stopped", cid)

    async def idle(self) -> None:
        """Wait until no turn is running, nor what turns left running in the background (tests, shutdown)."""
        while True:
            running = [t for t in self.tasks.values() if not t.done()]
            if not running:
                await self.pipeline.settle()
                return
            await asyncio.gather(*running, return_exceptions=True)

    async def shutdown(self, deadline_seconds: float) -> int:
        """Stop taking turns, let running ones finish for up to ``deadline_seconds``, then stop the rest:
        a stopped turn is set aside (superseded) and its lease released, so another worker takes the
        conversation over at once from its inbox; the compactions planned ahead finish within the same deadline or
        are cancelled. Returns how many turns were stopped."""
        self.closing = True
        for handle in self.waiting.values():
            handle.cancel()
        self.waiting.clear()
        ends = time.monotonic() + max(0.0, deadline_seconds)
        running = [t for t in self.tasks.values() if not t.done()]
        pending: set[asyncio.Task[None]] = set()
        if running:
            _, pending = await asyncio.wait(running, timeout=max(0.0, deadline_seconds))
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            log.warning("shutdown: %d turns stopped at the deadline; other workers resume them", len(pending))
        # The compactions planned ahead get what is left of the deadline; those still planning are cancelled, so none
        # writes once the worker has stopped (the turn that reaches the trigger compacts as before).
        await self.pipeline.settle(max(0.0, ends - time.monotonic()))
        return len(pending)

    async def sweep(self) -> int:
        """Resume every conversation that owes work and is not running here (a stopped worker's threads, a reply
        Slack did not confirm, dead letters queued again): one read of the registry of owed work, then a turn
        attempt for each, which does nothing while another worker holds the lease. An idle fleet costs one
        command per sweep, however many conversations it stores."""
        kicked = 0
        for cid in await self.pipeline.owing():
            if cid in self.tasks and not self.tasks[cid].done():
                continue
            self.kick(cid)
            kicked += 1
        return kicked
