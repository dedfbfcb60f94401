"""Slack conversations in Threadkeeper's terms: conversation ids, the flags kept per conversation, message text,
and the Web API client with Slack's retries."""

from __future__ import annotations

import re
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.services import Conversation, Privacy


def message_text(message: dict[str, Any]) -> str:
    """What a Slack message says: its text, plus the names, titles and snippets of the files it shares."""
    parts = [message.get("text") or ""]
    for f in message.get("files") or []:
        label = " ".join(p for p in (f.get("title") or f.get("name") or "file", f.get("filetype") or "") if p)
        snippet = (f.get("preview") or f.get("plain_text") or "").strip()
        parts.append(f"[file: {label}]" + (f"\n{snippet[:2000]}" if snippet else ""))
    return "\n".join(p for p in parts if p).strip()


def bot_name(message: dict[str, Any]) -> str:
    profile = message.get("bot_profile") or {}
    return str(profile.get("name") or message.get("username") or message.get("bot_id") or "a bot")


def slack_error(exc: SlackApiError) -> str:
    """The Slack error code, or the HTTP status when the body was not Slack's JSON."""
    data = exc.response.data if isinstance(exc.response.data, dict) else {}
    return str(data.get("error") or f"HTTP {exc.response.status_code}")


REACTED = "reacted"
"""Conversation flag: the message carrying the bot's :eyes: while it works ("" when none)."""
STATUS_MESSAGE = "status_ts"
"""Conversation flag: ts of the status message shown while a turn compacts or searches; deleted at its end."""
BACKFILL = "backfill"
"""Conversation flag: ``<channel> <thread ts> <mention ts>`` of a thread whose earlier messages are still to be
read (the bot was mentioned mid-way); cleared once they are queued."""
DIRECT = "dm"
"""The thread part of a direct message conversation's id: its top-level messages are one conversation."""


CHANNEL_TYPES: dict[str, Privacy] = {"channel": "public", "group": "private", "mpim": "private", "im": "dm"}
"""What Slack's ``channel_type`` of a message event says about the channel's privacy."""


def privacy_of(event: dict[str, Any]) -> Privacy:
    """What Slack said about the channel of ``event``: its ``channel_type``; a direct message's channel (Slack's
    ids for them start with ``D``) when the event does not say (``app_mention`` events do not); else unknown, and
    asked of Slack later, by the worker (``conversations.info``), never guessed."""
    kind = event.get("channel_type")
    if isinstance(kind, str) and kind in CHANNEL_TYPES:
        return CHANNEL_TYPES[kind]
    channel = event.get("channel")
    return "dm" if isinstance(channel, str) and channel.startswith("D") else "unknown"


def conversation_of(team: str, channel: str, ts: str, thread_ts: str | None, privacy: Privacy = "unknown", *,
                    threads_in_dm: bool = True) -> Conversation:
    """The conversation a message belongs to: its thread. In a direct message, with ``threads_in_dm`` (the agent
    surface) a top-level message starts a thread of its own, answered in it; without (the assistant surface and
    older apps) every top-level message continues one conversation, and a thread in it starts its own."""
    direct = privacy == "dm" or channel.startswith("D")
    if thread_ts is None and direct and not threads_in_dm:
        return Conversation.slack(team, channel, DIRECT, "dm")
    return Conversation.slack(team, channel, thread_ts or ts, "dm" if direct else privacy)


def viewing(entities: Any) -> str:
    """What ``app_context_changed`` says a person has open, in a few words ("" when it says nothing usable): a
    channel, a message in a channel, a canvas or a list."""
    def slack_id(value: object) -> str | None:
        return value if isinstance(value, str) and _SLACK_ID.fullmatch(value) else None

    parts = []
    for entity in entities if isinstance(entities, list) else []:
        kind, value = (entity.get("type"), entity.get("value")) if isinstance(entity, dict) else (None, None)
        if kind == "slack#/types/channel_id" and (channel := slack_id(value)):
            parts.append(f"channel <#{channel}>")
        elif kind == "slack#/types/message_context" and isinstance(value, dict) and \
                (channel := slack_id(value.get("channel_id"))) and _TS.fullmatch(str(value.get("message_ts"))):
            parts.append(f"a message ({value['message_ts']}) in <#{channel}>")
        elif kind in ("slack#/types/canvas_id", "slack#/types/list_id") and (item := slack_id(value)):
            parts.append(f"{kind.rsplit('/', 1)[-1].removesuffix('_id')} {item}")
    return "; ".join(parts[:3])  # ids only: nothing a person typed reaches the turn this way


_SLACK_ID = re.compile(r"[A-Z0-9]{2,32}")
_TS = re.compile(r"\d{1,12}\.\d{1,9}")


def thread_ts(conversation: Conversation) -> str | None:
    """Where a reply in ``conversation`` goes: its thread, or nothing (a direct message's top level)."""
    return None if conversation.thread == DIRECT else conversation.thread


NOT_REPEATABLE = ("chat.postMessage", "chat.startStream", "chat.appendStream", "chat.postEphemeral")
"""Methods that create a message: when their answer is lost (a dropped connection, a server error), Slack may
have created it, so the client never sends them again on its own; the reply's delivery reads back what Slack
shows first (``bot.delivery``). A rate-limited call (429) was refused, and is retried like any other."""


def _creates_a_message(request: HttpRequest) -> bool:
    return request.url.rstrip("/").rsplit("/", 1)[-1] in NOT_REPEATABLE


class _ConnectionErrorRetries(AsyncConnectionErrorRetryHandler):
    async def _can_retry_async(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                               error: Exception | None = None) -> bool:
        return not _creates_a_message(request) and await super()._can_retry_async(
            state=state, request=request, response=response, error=error)


class _ServerErrorRetries(AsyncServerErrorRetryHandler):
    async def _can_retry_async(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                               error: Exception | None = None) -> bool:
        return not _creates_a_message(request) and await super()._can_retry_async(
            state=state, request=request, response=response, error=error)


class _ShortRateLimitRetries(AsyncRateLimitErrorRetryHandler):
    """Waits out a rate limit only when Slack asks for at most ``seconds``; a longer ``Retry-After`` is the
    caller's to handle (it raises, with the header in the error's response)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(max_retry_count=3)
        self.seconds = seconds

    async def _can_retry_async(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                               error: Exception | None = None) -> bool:
        return retry_after(response.headers if response is not None else {}) <= self.seconds and \
            await super()._can_retry_async(state=state, request=request, response=response, error=error)


def retry_after(headers: Any) -> float:
    """Seconds of a response's ``Retry-After`` header (slack-sdk gives header values as lists), 0 without one."""
    for name, value in dict(headers or {}).items():
        if str(name).lower() == "retry-after":
            raw = value[0] if isinstance(value, (list, tuple)) and value else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                return 1.0
    return 0.0


def make_client(token: str | None, base_url: str | None, *, wait_at_most: float | None = None) -> AsyncWebClient:
    """A Web API client with Slack's rate-limit, server-error and connection retries, except that a call that
    creates a message is never sent twice by the client (see ``NOT_REPEATABLE``). ``token`` None: for the
    OAuth flow's code exchange, which authenticates with the app's client id and secret. ``wait_at_most``:
    a rate limit asking for a longer wait is raised at once instead of waited out."""
    kwargs: dict[str, Any] = {"token": token}
    if base_url:
        kwargs["base_url"] = base_url.rstrip("/") + "/"
    client = AsyncWebClient(**kwargs)
    handlers: list[AsyncRetryHandler] = [h for h in client.retry_handlers
                                         if not isinstance(h, (AsyncConnectionErrorRetryHandler,
                                                               AsyncServerErrorRetryHandler))]
    limits = AsyncRateLimitErrorRetryHandler(max_retry_count=3) if wait_at_most is None else \
        _ShortRateLimitRetries(wait_at_most)
    handlers += [_ConnectionErrorRetries(), limits, _ServerErrorRetries(max_retry_count=2)]
    client.retry_handlers = handlers
    return client
