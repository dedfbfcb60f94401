"""Replies shown while the model writes them, and the feedback buttons under a finished reply.

In a thread, a reply is streamed with slack-sdk's ``chat_stream`` (``chat.startStream`` / ``appendStream`` /
``stopStream``). Where Slack cannot stream (the top level of a direct message, where a stream has no thread
to answer in, or a workspace that refuses the methods), the reply is posted once and then updated as it
grows, at most once a second. Which message is being written is kept in Redis (the ``draft`` flag), so a
worker that dies mid-reply leaves nothing half-written behind: whichever worker next works on the
conversation deletes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import (
    ContextActionsBlock,
    ContextBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
    MarkdownBlock,
    MarkdownTextObject,
)
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.services import Conversation

from .format import TEXT_LIMIT

log = logging.getLogger("threadkeeper.slack")

class Flags(Protocol):
    """A conversation's flags, where a draft's message is kept (the application's)."""

    async def flag(self, conversation: Conversation | str, name: str) -> str | None: ...

    async def set_flag(self, conversation: Conversation | str, name: str, value: str) -> None: ...


DRAFT = "draft"
"""Conversation flag: ``<channel> <ts>`` of the reply being written, until it is finished or deleted."""
FEEDBACK_ACTION = "reply_feedback"
SHOWN_LIMIT = TEXT_LIMIT // 2
"""The most of a reply shown while it is written: a longer reply is split into several messages at the
end, and its first part is never cut before this point."""
UPDATE_SECONDS = 1.0
"""How often a posted-then-updated draft is updated (chat.update is rate limited per message)."""
STREAM_BUFFER = 128
"""Characters gathered before the reply is first shown, and before each ``chat.appendStream`` after."""


def feedback_blocks(text: str, checkpoint_id: str | None, notice: str | None = None,
                    sources: str | None = None) -> list[Any]:
    """The reply as a markdown block, the notice (when the turn compacted the thread) in a context line under it,
    where the memory it cites was said (links to the messages) in another, and the feedback buttons."""
    value = checkpoint_id or "-"
    buttons = FeedbackButtonsElement(
        action_id=FEEDBACK_ACTION,
        positive_button=FeedbackButtonObject(text="Good reply", value=f"good {value}"),
        negative_button=FeedbackButtonObject(text="Bad reply", value=f"bad {value}"))
    noted: list[Any] = [ContextBlock(elements=[MarkdownTextObject(text=f"_{notice}_")])] if notice else []
    if sources:
        noted.append(ContextBlock(elements=[MarkdownTextObject(text=sources)]))
    return [MarkdownBlock(text=text), *noted, ContextActionsBlock(elements=[buttons])]


async def delete_stranded(client: AsyncWebClient, notes: Flags, conversation_id: str) -> bool:
    """Delete a reply left half-written by a worker that stopped mid-reply. Returns whether there was one."""
    flag = await notes.flag(conversation_id, DRAFT)
    if not flag:
        return False
    channel, _, ts = flag.partition(" ")
    try:
        await client.chat_delete(channel=channel, ts=ts)
    except SlackApiError as exc:
        if exc.response.get("error") != "message_not_found":
            log.info("%s: deleting a half-written reply failed: %s", conversation_id, exc.response.get("error"))
    await notes.set_flag(conversation_id, DRAFT, "")
    return True


class SlackDraft:
    """One reply being written into one Slack message (see the module's description)."""

    def __init__(self, client: AsyncWebClient, notes: Flags, conversation_id: str, *, channel: str,
                 thread_ts: str | None, recipient: tuple[str, str] | None) -> None:
        self.client = client
        self.notes = notes
        self.conversation_id = conversation_id
        self.channel = channel
        self.thread_ts = thread_ts
        """None: the top level of a direct message, where a stream has no message to answer."""
        self.recipient = recipient
        """(team, user) the stream is shown to; Slack asks for both when streaming in a channel."""
        self.shown = ""
        self.stream: AsyncChatStream | None = None
        self.ts: str | None = None
        self.updated_at = 0.0
        self.stopped = False
        """Nothing more is shown: Slack refused the draft, or it reached ``SHOWN_LIMIT`` (what it shows is
        then finished as the reply's first part, and the rest posted after it)."""
        self.unsure = False
        """Slack's answer to a call that showed text was lost: what the draft shows is unknown, so it is deleted
        and the reply posted whole."""

    @property
    def streaming(self) -> bool:
        return self.stream is not None

    async def write(self, text: str) -> None:
        if self.stopped:
            return
        if not self.shown:
            text = text.lstrip()
        if not text:
            return
        if len(self.shown) + len(text) > SHOWN_LIMIT:  # the rest is posted whole at the end
            self.stopped = True
            return
        self.shown += text
        try:
            if self.stream is not None:
                await self.stream.append(markdown_text=text)
                await self._mark(self.stream.ts)
            elif self.ts is None:
                if len(self.shown) >= STREAM_BUFFER:  # a short reply is simply posted when it is done
                    await self._start()
            elif time.monotonic() - self.updated_at >= UPDATE_SECONDS:
                await self.client.chat_update(channel=self.channel, ts=self.ts, text=self.shown)
                self.updated_at = time.monotonic()
        except SlackApiError as exc:
            log.info("%s: showing the reply as it is written stopped: %s", self.conversation_id,
                     exc.response.get("error"))
            self.stopped = True
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:  # never sent twice (NOT_REPEATABLE)
            log.info("%s: showing the reply as it is written stopped: no answer (%s)", self.conversation_id,
                     type(exc).__name__)
            self.stopped = self.unsure = True
            if self.ts is None:  # the draft's first post: Slack may have made it, so it is found and taken back
                await self._adopt(self.shown)

    async def _start(self) -> None:
        await delete_stranded(self.client, self.notes, self.conversation_id)
        # In a channel Slack streams to one recipient (the person asking); in a direct message it needs none.
        if self.thread_ts is not None and (self.recipient is not None or self.channel.startswith("D")):
            team, user = self.recipient or (None, None)
            self.stream = await self.client.chat_stream(
                channel=self.channel, thread_ts=self.thread_ts, recipient_team_id=team, recipient_user_id=user,
                buffer_size=STREAM_BUFFER)
            try:
                await self.stream.append(markdown_text=self.shown)
                await self._mark(self.stream.ts)
                return
            except SlackApiError as exc:  # the workspace does not stream: post, then update
                log.info("%s: Slack refused to stream (%s); posting and updating instead", self.conversation_id,
                         exc.response.get("error"))
                self.stream = None
        response = await self.client.chat_postMessage(channel=self.channel, thread_ts=self.thread_ts,
                                                      text=self.shown, unfurl_links=False)
        self.ts = str(response["ts"])
        self.updated_at = time.monotonic()
        await self._mark(self.ts)

    async def _adopt(self, sent: str) -> None:
        """After the first post of the draft lost its answer: find the bot's message showing ``sent`` in the
        thread and record it as the draft, so that finishing the reply deletes it (the reply is then posted
        whole). Nothing found, or the thread unreadable: nothing to take back that can be known."""
        try:
            if self.thread_ts is None:
                page = await self.client.conversations_history(channel=self.channel, limit=20)
            else:
                page = await self.client.conversations_replies(channel=self.channel, ts=self.thread_ts, limit=200)
        except (SlackApiError, aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            log.warning("%s: a draft whose post got no answer could not be looked for: %s", self.conversation_id,
                        type(exc).__name__)
            return
        for m in reversed(page.get("messages") or []):
            if m.get("bot_id") and m.get("ts") and str(m.get("text") or "").startswith(sent[:STREAM_BUFFER]):
                await self._mark(str(m["ts"]))
                return

    async def _mark(self, ts: str | None) -> None:
        if ts and ts != self.ts:
            self.ts = ts
            await self.notes.set_flag(self.conversation_id, DRAFT, f"{self.channel} {ts}")

    async def discard(self) -> None:
        """Take back what was shown: the message is deleted and the next write starts a new one."""
        if self.stream is not None and self.stream.ts is not None:
            try:
                await self.stream.stop()
            except SlackApiError:
                pass  # deleted below either way
        if self.ts is not None:
            await delete_stranded(self.client, self.notes, self.conversation_id)
        self.shown, self.stream, self.ts, self.stopped, self.unsure = "", None, None, False, False

    async def finish(self, first_part: str, blocks: list[Any] | None) -> bool:
        """End the draft as the reply's first part (``blocks``: the feedback buttons, when it is the only
        part). Returns False when nothing was shown or the reply is not what was shown (the draft is then
        deleted and the reply posted whole)."""
        shown = self.shown.rstrip()  # the reply is trimmed when it is done; whitespace shown at its end is not text
        if self.ts is None or self.unsure or not first_part.startswith(shown):
            await self.discard()
            return False
        try:
            if self.stream is not None:
                # what follows what was shown (its trailing whitespace, when the reply dropped it, stays shown)
                rest = first_part[len(self.shown if first_part.startswith(self.shown) else shown):]
                rest = rest if rest.strip() else ""
                await self.stream.stop(markdown_text=rest or None, blocks=blocks)
            else:
                await self.client.chat_update(channel=self.channel, ts=self.ts, text=first_part, blocks=blocks)
        except SlackApiError as exc:
            log.info("%s: finishing the reply in place failed (%s); posting it whole", self.conversation_id,
                     exc.response.get("error"))
            await self.discard()
            return False
        await self.notes.set_flag(self.conversation_id, DRAFT, "")
        return True
