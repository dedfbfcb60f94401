"""Replies shown while the model writes them, and the feedback buttons under a finished reply.

In a thread, a reply is streamed with slack-sdk's ``chat_stream`` (``chat.startStream`` / ``appendStream`` /
``stopStream``). Where Slack cannot stream (the top level of a direct message, where a stream has no thread
to answer in, or a workspace that refuses the methods), the reply is posted once and then updated as it
grows, at most once a second. Which message is being written is kept in Redis (the ``draft`` flag), so a
worker that dies mid-reply leaves nothing half-written behind: whichever worker next works on the
conversation deletes it.

The flag is written before the message is asked for (``chat.startStream`` or ``chat.postMessage``), with the
moment it was asked for, and again with the message's ts once Slack answers. A worker that dies between the two
(or a first call whose answer was lost) leaves a message nobody knows the ts of: the next one to work on the
conversation finds it in the thread (the bot's own message posted since that moment that is neither a finished
reply, which carries its marker, nor the status message), looking until Slack's reads had time to show it, and
deletes it before the reply is posted. Slack's ``chat.startStream`` takes no metadata (``chat.stopStream`` and
``chat.update`` do: a finished reply carries its marker), and what a stranded stream shows cannot be known
exactly (Slack escapes its text), so it is replaced, never finished. A worker whose lease was lost while Slack made the
message (its flag write refused) deletes that message itself: nobody else knows its ts.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

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

from threadkeeper.persistence import LeaseLostError
from threadkeeper.services import Conversation, as_conversation

from .conversations import STATUS_MESSAGE
from .format import TEXT_LIMIT
from .readback import CLOCK_SKEW_SECONDS, LOST, READ_LAG_SECONDS, bot_messages, is_own, is_reply, until_read
from .workspaces import Identity

log = logging.getLogger("threadkeeper.slack")

class Flags(Protocol):
    """A conversation's flags, where a draft's message is kept (the application's)."""

    async def flag(self, conversation: Conversation | str, name: str) -> str | None: ...

    async def set_flag(self, conversation: Conversation | str, name: str, value: str) -> None: ...


DRAFT = "draft"
"""Conversation flag: the reply being written (a :class:`DraftMark`), until it is finished or deleted."""
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


@dataclass(frozen=True)
class DraftMark:
    """What the ``draft`` flag says: the message a reply is being written into, or is about to be."""

    channel: str
    ts: str | None
    """None: asked for and not confirmed yet (Slack may have made it)."""
    since: float
    """When the message was asked for (the worker's clock); 0 in a flag written before this was recorded."""
    stream: bool
    """Started with ``chat.startStream`` (it is stopped before it is deleted)."""

    def value(self) -> str:
        return f"{self.channel} {self.ts or '-'} {self.since:.3f} {'stream' if self.stream else 'post'}"

    @classmethod
    def parse(cls, value: str | None) -> DraftMark | None:
        fields = (value or "").split()
        if len(fields) == 2:  # ``<channel> <ts>``, as flags were written before the moment was recorded
            return cls(fields[0], fields[1], 0.0, True)
        if len(fields) != 4:
            return None
        channel, ts, since, kind = fields
        try:
            return cls(channel, None if ts == "-" else ts, float(since), kind == "stream")
        except ValueError:
            return None


async def delete_stranded(client: AsyncWebClient, notes: Flags, conversation_id: str, me: Identity | None) -> \
        bool | None:
    """Delete a reply left half-written by a worker that stopped mid-reply (or whose first call's answer was lost):
    stopped if it streams, then deleted. Returns whether there was one; None when there may be one that Slack
    could not be read for, or whose deletion's answer was lost (the flag stays, the reply is not posted, and
    whoever works on the conversation next looks again)."""
    mark = DraftMark.parse(await notes.flag(conversation_id, DRAFT))
    if mark is None:
        return False
    ts = mark.ts
    if ts is None:
        found = await _started(client, notes, conversation_id, mark, me)
        if found is None:
            return None
        ts = found or None
    if ts is not None and not await _take_back(client, conversation_id, mark.channel, ts, stream=mark.stream):
        return None  # it may still show: the flag stays, and whoever works on it next deletes it again
    await notes.set_flag(conversation_id, DRAFT, "")
    return True


async def _take_back(client: AsyncWebClient, conversation_id: str, channel: str, ts: str, *, stream: bool) -> bool:
    """Stop (if it streams) and delete a half-written reply; False when the deletion's answer was lost (it may
    still show)."""
    if stream:
        try:  # never left streaming, whatever the deletion does
            await client.chat_stopStream(channel=channel, ts=ts)
        except (SlackApiError, *LOST):
            pass  # not streaming (any more), or no answer: deleted below either way
    try:
        await client.chat_delete(channel=channel, ts=ts)
    except SlackApiError as exc:
        if exc.response.get("error") != "message_not_found":
            log.info("%s: deleting a half-written reply failed: %s", conversation_id, exc.response.get("error"))
    except LOST as exc:
        log.info("%s: deleting a half-written reply got no answer (%s)", conversation_id, type(exc).__name__)
        return False
    return True


async def _started(client: AsyncWebClient, notes: Flags, conversation_id: str, mark: DraftMark,
                   me: Identity | None) -> str | None:
    """The ts of the message a draft asked for without hearing Slack's answer: the bot's own message posted since
    then that is neither a finished reply nor the status message, looked for until Slack's reads had
    ``READ_LAG_SECONDS`` after the moment it was asked for. "" when Slack shows none by then (it was never made);
    None when Slack could not be read."""
    conversation = as_conversation(conversation_id)
    status = await notes.flag(conversation_id, STATUS_MESSAGE)

    def stranded(messages: list[dict[str, Any]]) -> str:
        found = [str(m["ts"]) for m in messages if m.get("ts") and is_own(m, me) and not is_reply(m) and
                 m["ts"] != status and float(m["ts"]) >= mark.since - CLOCK_SKEW_SECONDS]
        return found[0] if found else ""

    messages = await until_read(lambda: bot_messages(client, conversation, me, since=mark.since - CLOCK_SKEW_SECONDS),
                                lambda shown: bool(stranded(shown)), deadline=mark.since + READ_LAG_SECONDS)
    return None if messages is None else stranded(messages)


class SlackDraft:
    """One reply being written into one Slack message (see the module's description)."""

    def __init__(self, client: AsyncWebClient, notes: Flags, conversation_id: str, *, channel: str,
                 thread_ts: str | None, recipient: tuple[str, str] | None, me: Identity | None) -> None:
        self.client = client
        self.notes = notes
        self.conversation_id = conversation_id
        self.me = me
        """The bot in this workspace: a message asked for whose answer was lost is found among its own."""
        self.channel = channel
        self.thread_ts = thread_ts
        """None: the top level of a direct message, where a stream has no message to answer."""
        self.recipient = recipient
        """(team, user) the stream is shown to; Slack asks for both when streaming in a channel."""
        self.shown = ""
        self.stream: AsyncChatStream | None = None
        self.ts: str | None = None
        self.asked: DraftMark | None = None
        """The message asked of Slack for this draft (recorded in the ``draft`` flag before it was asked for)."""
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
        except LOST as exc:  # never sent twice (NOT_REPEATABLE)
            log.info("%s: showing the reply as it is written stopped: no answer (%s)", self.conversation_id,
                     type(exc).__name__)
            self.stopped = self.unsure = True  # a first call's message, if Slack made it, is found when discarded
        except LeaseLostError:  # the draft flag was refused: another worker holds the conversation now
            log.info("%s: showing the reply as it is written stopped: another worker holds the conversation now",
                     self.conversation_id)
            self.stopped = True  # nothing is asked of Slack without the flag saying so
            await self._abandon()

    async def _abandon(self) -> None:
        """The lease was lost while this draft's message was being made: Slack made it, but its ts never reached the
        flag, so only this worker knows it (the new holder looked for it, if it did, before it existed). It is taken
        back here (never finished: a new holder never finishes another worker's draft, so deleting it twice is
        harmless)."""
        ts = self.stream.ts if self.stream is not None else self.ts
        if ts is None or self.asked is None:
            return
        await _take_back(self.client, self.conversation_id, self.channel, ts, stream=self.asked.stream)
        self.shown, self.stream, self.ts, self.asked = "", None, None, None

    async def _start(self) -> None:
        if await delete_stranded(self.client, self.notes, self.conversation_id, self.me) is None:
            self.stopped = True  # an earlier message may still show: nothing new is begun before it is found
            return
        # In a channel Slack streams to one recipient (the person asking); in a direct message it needs none.
        if self.thread_ts is not None and (self.recipient is not None or self.channel.startswith("D")):
            team, user = self.recipient or (None, None)
            self.stream = await self.client.chat_stream(
                channel=self.channel, thread_ts=self.thread_ts, recipient_team_id=team, recipient_user_id=user,
                buffer_size=STREAM_BUFFER)
            try:
                await self._ask(stream=True)
                await self.stream.append(markdown_text=self.shown)  # chat.startStream
                await self._mark(self.stream.ts)
                return
            except SlackApiError as exc:  # the workspace does not stream: post, then update
                if exc.response.status_code >= 500:
                    raise  # Slack may have begun it: it is looked for when the draft is discarded
                log.info("%s: Slack refused to stream (%s); posting and updating instead", self.conversation_id,
                         exc.response.get("error"))
                self.stream = None
        await self._ask(stream=False)
        try:
            response = await self.client.chat_postMessage(channel=self.channel, thread_ts=self.thread_ts,
                                                          text=self.shown, unfurl_links=False)
        except SlackApiError as exc:
            if exc.response.status_code < 500:  # refused: nothing was made, nothing to look for
                self.asked = None
                await self.notes.set_flag(self.conversation_id, DRAFT, "")
            raise
        self.updated_at = time.monotonic()
        await self._mark(str(response["ts"]))

    async def _ask(self, *, stream: bool) -> None:
        """Record that a message is about to be asked of Slack, before it is: a worker that dies before Slack's
        answer is recorded leaves this behind, and the next one finds the message and deletes it."""
        self.asked = DraftMark(self.channel, None, time.time(), stream)
        await self.notes.set_flag(self.conversation_id, DRAFT, self.asked.value())

    async def _mark(self, ts: str | None) -> None:
        if ts and ts != self.ts and self.asked is not None:
            self.ts = ts
            await self.notes.set_flag(self.conversation_id, DRAFT,
                                      DraftMark(self.channel, ts, self.asked.since, self.asked.stream).value())

    async def discard(self) -> None:
        """Take back what was shown: the message (one Slack made without its answer arriving too) is deleted and
        the next write starts a new one. When Slack cannot be read for a message whose answer was lost, the flag
        stays, and the reply is not posted until it can be (``SlackEvents.reply``)."""
        if self.asked is not None:
            await delete_stranded(self.client, self.notes, self.conversation_id, self.me)
        self.shown, self.stream, self.ts, self.asked, self.stopped, self.unsure = "", None, None, None, False, False

    async def finish(self, first_part: str, blocks: list[Any] | None, metadata: dict[str, Any] | None = None) -> bool:
        """End the draft as the reply's first part (``blocks``: the feedback buttons, when it is the only
        part; ``metadata``: the part's marker). Returns False when nothing was shown or the reply is not what was
        shown (the draft is then deleted and the reply posted whole)."""
        shown = self.shown.rstrip()  # the reply is trimmed when it is done; whitespace shown at its end is not text
        if self.ts is None or self.unsure or not first_part.startswith(shown):
            await self.discard()
            return False
        try:
            if self.stream is not None:
                # what follows what was shown (its trailing whitespace, when the reply dropped it, stays shown)
                rest = first_part[len(self.shown if first_part.startswith(self.shown) else shown):]
                rest = rest if rest.strip() else ""
                await self.stream.stop(markdown_text=rest or None, blocks=blocks, metadata=metadata)
            else:
                await self.client.chat_update(channel=self.channel, ts=self.ts, text=first_part, blocks=blocks,
                                              metadata=metadata)
        except SlackApiError as exc:
            log.info("%s: finishing the reply in place failed (%s); posting it whole", self.conversation_id,
                     exc.response.get("error"))
            await self.discard()
            return False
        await self.notes.set_flag(self.conversation_id, DRAFT, "")
        return True
