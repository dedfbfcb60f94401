"""Reading the earlier messages of a thread the bot was brought into mid-way, as fast as Slack allows.

Slack limits ``conversations.replies`` for commercially distributed apps that are not on the Marketplace to one
request a minute and 15 messages a request (internal apps, and apps installed with one bot token, are exempt).
The thread is read oldest first, one page per request; when limited, one request per visit, the pace kept for the
whole fleet per workspace (:meth:`services.Pipeline.take_call`), and any ``Retry-After`` Slack answers respected
by every worker; where the
reading stopped (Slack's cursor, how many were read) is kept on the conversation after each page, so a restart or
another worker resumes from there. What was read before the thread's first turn is queued before the mention;
what is read after it joins the thread as it arrives, marked as said earlier (:attr:`persistence.MessageFlags.late`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.persistence import InboxItem
from threadkeeper.services import Conversation, Pipeline

from .conversations import bot_name, make_client, message_text, retry_after, slack_error

log = logging.getLogger("threadkeeper.slack")

HistoryLimits = Literal["auto", "limited", "exempt"]

BACKFILL_LIMIT = 2_000
"""The most earlier messages read when the bot is brought into a thread mid-way."""
LIMITED_PAGE = 15
"""Messages a request returns at most when the method is limited (Slack's posted limit)."""
EXEMPT_PAGE = 200
WAIT_IN_PLACE = 3.0
"""The longest ``Retry-After`` waited out within one visit; a longer one is left to a later visit."""
READ_SECONDS = 20.0
"""The longest one visit reads for (it holds the conversation's lease; the turn waits for it)."""


@dataclass(frozen=True)
class HistoryPace:
    """How fast a thread's history may be read: ``interval_seconds`` between requests of a workspace, ``page``
    messages each (limited); or as fast as Slack answers (exempt, ``interval_seconds`` 0)."""

    interval_seconds: float
    page: int

    @classmethod
    def of(cls, limits: HistoryLimits, *, installs: bool, interval_seconds: float = 60.0) -> HistoryPace:
        """``auto``: limited for an app installed through OAuth (distributed to other workspaces), exempt for one
        bot token (an internal app)."""
        limited = limits == "limited" or (limits == "auto" and installs)
        return cls(interval_seconds, LIMITED_PAGE) if limited else cls(0.0, EXEMPT_PAGE)

    @property
    def limited(self) -> bool:
        return self.interval_seconds > 0


@dataclass(frozen=True)
class Progress:
    """Where reading a thread stands, kept as the conversation's ``backfill`` flag:
    ``<channel> <thread ts> <mention ts> <cursor or -> <read>``."""

    channel: str
    thread_ts: str
    before: str
    cursor: str = ""
    read: int = 0

    @classmethod
    def parse(cls, value: str) -> Progress:
        parts = value.split(" ")
        if len(parts) not in (3, 5):
            raise ValueError(f"unreadable backfill flag {value!r}")
        if len(parts) == 3:
            return cls(parts[0], parts[1], parts[2])
        return cls(parts[0], parts[1], parts[2], "" if parts[3] == "-" else parts[3], int(parts[4]))

    def flag(self) -> str:
        return f"{self.channel} {self.thread_ts} {self.before} {self.cursor or '-'} {self.read}"


@dataclass
class Reading:
    """What one visit did."""

    queued: int = 0
    done: bool = False
    wait: float = 0.0
    """Seconds before the next page may be read (when not done)."""
    progress: Progress | None = None


class Backfill:
    def __init__(self, pipeline: Pipeline, pace: HistoryPace) -> None:
        self.pipeline = pipeline
        self.pace = pace

    async def read(self, conversation: Conversation, client: AsyncWebClient, bot_user: str | None,
                   progress: Progress, flag: str) -> Reading:
        """Read what the pace allows now, queue it, and keep the progress under ``flag`` after each page."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        reader = make_client(client.token, client.base_url, wait_at_most=WAIT_IN_PLACE)
        name = f"{conversation.workspace}:conversations.replies"
        first = not await self.pipeline.has_history(conversation)  # nothing answered yet: queue before the mention
        gathered: list[dict[str, Any]] = []
        reading = Reading(progress=progress)
        pages = 0
        while True:
            if not first and progress.read >= BACKFILL_LIMIT:
                reading.done = True
                break
            if self.pace.limited:  # one request per visit: the next one comes back when the pace allows
                wait = self.pace.interval_seconds if pages else \
                    await self.pipeline.take_call(name, self.pace.interval_seconds)
                if wait > 0:
                    reading.wait = wait
                    break
            pages += 1
            try:
                page = await reader.conversations_replies(channel=progress.channel, ts=progress.thread_ts,
                                                          limit=self.pace.page, cursor=progress.cursor or None)
            except SlackApiError as exc:
                if exc.response.status_code == 429:  # Slack's own word on the wait, for every worker
                    reading.wait = max(1.0, retry_after(exc.response.headers))
                    await self.pipeline.hold_calls(name, reading.wait)
                    break
                # no history scope, or the thread is gone: answer with what arrived
                log.warning("reading the earlier messages of %s failed: %s", conversation, slack_error(exc))
                reading.done = True
                break
            earlier = [m for m in page.get("messages") or [] if m.get("ts") and float(m["ts"]) < float(progress.before)]
            cursor = str((page.get("response_metadata") or {}).get("next_cursor") or "")
            progress = replace(progress, cursor=cursor, read=progress.read + len(earlier))
            if first:
                gathered.extend(earlier)  # queued together at the end, before the mention
            else:
                reading.queued += await self._queue(conversation, earlier, bot_user, front=False, late=True)
                await self.pipeline.set_flag(conversation, flag, progress.flag())
            reading.progress = progress
            reached = any(m.get("ts") and float(m["ts"]) >= float(progress.before) for m in page.get("messages") or [])
            if reached or not cursor or not page.get("has_more", bool(cursor)):
                reading.done = True
                break
            if loop.time() - started > READ_SECONDS:
                break
        if first and gathered:
            newest = sorted(gathered, key=lambda m: float(m["ts"]), reverse=True)[:BACKFILL_LIMIT]
            reading.queued += await self._queue(conversation, newest, bot_user, front=True, late=False)
        if not reading.done:
            await self.pipeline.set_flag(conversation, flag, progress.flag())
        return reading

    async def _queue(self, conversation: Conversation, messages: list[dict[str, Any]], bot_user: str | None, *,
                     front: bool, late: bool) -> int:
        """Queue people's messages without asking for replies (the bot's own posts come back as its replies).
        ``front``: newest first, each to the front of the inbox, so that they end up oldest first before what
        waits; else oldest first at the back."""
        recorded = 0
        ordered = sorted(messages, key=lambda m: float(m["ts"]), reverse=front)
        for m in ordered:
            if bot_user and m.get("user") == bot_user:
                continue
            text = message_text(m)
            if not text:
                continue
            message = self.pipeline.message(text, author=m.get("user") or bot_name(m), id=m["ts"],
                                            created_at=float(m["ts"]), late=late)
            recorded += await self.pipeline.submit_item(conversation, InboxItem(
                message=message, reply_expected=False, author_id=m.get("user")), front=front)
        return recorded


def catching_up(progress: Progress, pace: HistoryPace) -> str:
    """What a person is told with each reply while the thread's earlier messages are still being read."""
    rate = f"Slack lets this app read {pace.page} a minute" if pace.limited else "Slack asked me to slow down"
    return (f"I'm still catching up on this thread's earlier messages ({progress.read:,} read so far; {rate}); "
            "I take the rest into account as they arrive.")
