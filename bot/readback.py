"""What a conversation's place in Slack (its thread, or a direct message's top level) shows of the bot's own posts,
read back when Slack's answer to a post was lost or a worker stopped before it recorded what it had posted.

Slack's reads can lag its writes: a message Slack made a moment ago may not be listed yet. Whatever is looked for
is therefore looked for again, with backoff, until Slack's reads had ``READ_LAG_SECONDS`` to catch up, and only
then taken as not there."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.services import Conversation

from .conversations import slack_error, thread_ts
from .workspaces import Identity

log = logging.getLogger("threadkeeper.slack")

READ_LAG_SECONDS = 8.0
"""How long Slack's reads may lag its writes: a message that may have been made is looked for that long after it
was asked for before it counts as not made."""
CLOCK_SKEW_SECONDS = 1.0
"""How far a message's ts (Slack's clock) may be behind the worker's clock at the moment it asked for it."""
REPLY_EVENT = "threadkeeper_reply"
"""The metadata event type of every reply part: ``{"checkpoint": <turn>, "part": <n>}``."""
LOST = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
"""What a call raises when Slack's answer never arrived (it may have done what was asked)."""

T = TypeVar("T")


def reply_marker(checkpoint_id: str, part: int) -> dict[str, Any]:
    """The metadata that names a reply part: the turn's checkpoint and the part's number."""
    return {"event_type": REPLY_EVENT, "event_payload": {"checkpoint": checkpoint_id, "part": part}}


def marked_part(message: dict[str, Any], checkpoint_id: str | None) -> int | None:
    """The part of ``checkpoint_id``'s reply that ``message`` is, by its marker (None: not one of them)."""
    meta = message.get("metadata") or {}
    payload = meta.get("event_payload") or {}
    if meta.get("event_type") == REPLY_EVENT and payload.get("checkpoint") == checkpoint_id and \
            isinstance(payload.get("part"), int):
        return int(payload["part"])
    return None


def is_reply(message: dict[str, Any]) -> bool:
    """Whether ``message`` carries a reply part's marker (a finished reply, whichever turn's)."""
    return (message.get("metadata") or {}).get("event_type") == REPLY_EVENT


def is_own(message: dict[str, Any], me: Identity | None) -> bool:
    """Whether this bot posted ``message`` (not another app's bot): by its user or bot id."""
    return me is not None and ((me.user_id is not None and message.get("user") == me.user_id) or
                               (me.bot_id is not None and message.get("bot_id") == me.bot_id))


REPLY_SUBTYPES = (None, "bot_message")
"""The subtypes a reply's message may have: none (an app's post) or a bot's. Others are messages Slack made of an
event (``assistant_app_thread``: the message an assistant thread opens with; ``thread_broadcast``; a join)."""


def in_place(message: dict[str, Any], thread: str | None) -> bool:
    """Whether ``message`` is where a reply goes: in the thread ``thread`` (not the message it hangs from), or, with
    ``thread`` None, at a direct message's top level (not a reply in one of its threads shown there); and a plain
    message (:data:`REPLY_SUBTYPES`), not one Slack made of an event such as an assistant thread's opening
    message. Only such a message can be a reply's part or a half-written reply."""
    if message.get("subtype") not in REPLY_SUBTYPES:
        return False
    if thread is None:
        return message.get("thread_ts") in (None, message.get("ts"))
    return message.get("thread_ts") == thread and message.get("ts") != thread


async def bot_messages(client: AsyncWebClient, conversation: Conversation, me: Identity | None, *,
                       since: float | None = None) -> list[dict[str, Any]] | None:
    """The bots' messages where ``conversation``'s replies go (:func:`in_place`; this bot's by its user id, and any
    with a bot id), with their metadata; ``since``: only those posted after that moment. None when Slack could not be read; none
    at all when the thread is not there (yet)."""
    channel, thread = conversation.channel, thread_ts(conversation)
    oldest = f"{since:.6f}" if since else None  # None: not sent
    found: list[dict[str, Any]] = []
    try:
        if thread is None:
            pages = await client.conversations_history(channel=channel, limit=200, include_all_metadata=True,
                                                       oldest=oldest)
        else:
            pages = await client.conversations_replies(channel=channel, ts=thread, limit=200,
                                                       include_all_metadata=True, oldest=oldest)
        async for page in pages:
            found += [m for m in page.get("messages") or [] if in_place(m, thread) and
                      (m.get("bot_id") or (me is not None and m.get("user") == me.user_id))]
    except SlackApiError as exc:
        if slack_error(exc) == "thread_not_found":
            return []  # nothing in the thread yet (or the thread is gone)
        log.warning("reading back the replies in %s failed: %s", conversation, slack_error(exc))
        return None
    except LOST as exc:
        log.warning("reading back the replies in %s failed: %s: %s", conversation, type(exc).__name__, exc)
        return None
    return found


async def until_read(read: Callable[[], Awaitable[T | None]], seen: Callable[[T], bool], *,
                     deadline: float) -> T | None:
    """``read()`` again, with backoff, until ``seen`` says it shows what was looked for or Slack's reads had until
    ``deadline`` (the worker's clock) to catch up; the last read (None: Slack could not be read)."""
    delay = 0.5
    while True:
        result = await read()
        left = deadline - time.time()
        if result is None or seen(result) or left <= 0:
            return result
        await asyncio.sleep(min(delay, left))
        delay *= 2
