"""What the Slack bot settles when a turn takes a message rather than before acknowledging its event
(:class:`services.turns.Intake`): the thread's earlier messages when the bot was brought into it mid-way,
authors' display names, and whether to answer a message not addressed to the bot. Part of
:class:`bot.slack.SlackBot`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from slack_sdk.errors import SlackApiError

from threadkeeper.persistence import InboxItem
from threadkeeper.services import Conversation, ModelClient, Pipeline

from .conversations import BACKFILL, bot_name, message_text, slack_error
from .metrics import Metrics
from .routing import should_reply
from .workspaces import Identity, Workspaces

log = logging.getLogger("threadkeeper.slack")

BACKFILL_LIMIT = 2_000
"""The most earlier messages read when the bot is brought into a thread mid-way (the newest)."""


class SlackIntake:
    """The bot's :class:`services.turn.Intake` (a mixin: it uses the bot's workspaces, pipeline, metrics, fast
    model and name cache)."""

    workspaces: Workspaces
    pipeline: Pipeline
    metrics: Metrics
    fast_model: ModelClient | None
    _names: dict[tuple[str, str], str]

    async def _me(self, team: str) -> Identity | None:
        return await self.workspaces.identity(team)

    async def prepare(self, conversation: Conversation) -> bool:
        """Before the first turn of a thread the bot was brought into mid-way (the ``backfill`` flag, set
        when the mention was recorded), read the thread's earlier messages; run under the lease."""
        flag = await self.pipeline.flag(conversation, BACKFILL)
        if not flag:
            return False
        channel, thread_ts, before = flag.split(" ")
        queued = await self.backfill(conversation, channel, thread_ts, before=before)
        await self.pipeline.set_flag(conversation, BACKFILL, "")
        return queued > 0

    async def backfill(self, conversation: Conversation, channel: str, thread_ts: str, *, before: str) -> int:
        """Record the thread's earlier messages when the bot is brought into it mid-way, so its first answer
        knows what was said. They are read with ``conversations.replies`` (paged; rate limits are waited out
        by the client's retry handler), deduplicated by ``ts``, and queued before the mention without
        asking for replies; the executor takes them over as many turns as the window needs, so the oldest
        reach the handoff through compaction instead of being dropped. At most ``BACKFILL_LIMIT`` messages,
        the newest."""
        earlier: list[dict[str, Any]] = []
        started = time.perf_counter()
        team = conversation.workspace
        client, me = await self.workspaces.client(team), await self._me(team)
        if client is None or me is None:
            return 0
        try:
            # slack-sdk follows ``response_metadata.next_cursor`` from page to page.
            async for page in await client.conversations_replies(channel=channel, ts=thread_ts, limit=200):
                earlier.extend(m for m in page.get("messages") or [] if m.get("ts") and float(m["ts"]) < float(before))
        except SlackApiError as exc:  # no history scope, or the thread is gone: answer with what arrives
            log.warning("reading the earlier messages of %s failed: %s", conversation, slack_error(exc))
            self.metrics.errors.labels("backfill").inc()
        bot = me.user_id
        recorded = 0
        # Newest first, each to the front of the inbox: they end up oldest first, before the mention.
        for m in sorted(earlier, key=lambda m: float(m["ts"]), reverse=True)[:BACKFILL_LIMIT]:
            if bot and m.get("user") == bot:
                continue  # the bot's own posts come back as its replies, not as people's messages
            text = message_text(m)
            if not text:
                continue
            message = self.pipeline.message(text, author=m.get("user") or bot_name(m), id=m["ts"],
                                                          created_at=float(m["ts"]))
            recorded += await self.pipeline.submit_item(conversation, InboxItem(message=message, reply_expected=False,
                                                                       author_id=m.get("user")), front=True)
        self.metrics.backfill.observe(time.perf_counter() - started)
        log.info("read %d earlier messages of %s (%d new)", len(earlier), conversation, recorded)
        return recorded

    # -- settled when a turn takes the message (services.turns.Intake) ---------------------------

    async def author(self, conversation: Conversation, author_id: str) -> str:
        """A person's display name in the conversation's workspace (cached), so the model and the ledger read
        names, not ids; the id when the lookup fails."""
        team = conversation.workspace
        name = self._names.get((team, author_id))
        if name is None:
            name = author_id
            client = await self.workspaces.client(team)
            try:
                if client is not None:
                    profile = (await client.users_info(user=author_id)).get("user") or {}
                    details = profile.get("profile") or {}
                    name = details.get("display_name") or details.get("real_name") or profile.get("name") or author_id
            except SlackApiError as exc:  # users:read missing or the user is gone: keep the id
                log.info("users.info for %s failed: %s", author_id, slack_error(exc))
            self._names[(team, author_id)] = name
            if len(self._names) > 50_000:
                self._names.clear()
        return name

    async def hint(self, conversation: Conversation, asker: str) -> str | None:
        """What the person asking has open in Slack, as ``app_context_changed`` last said (agent surface)."""
        return await self.pipeline.view_of(conversation.workspace, asker)

    async def route(self, conversation: Conversation, text: str, recent: Sequence[str]) -> bool:
        me = await self._me(conversation.workspace)
        return await should_reply(text, me.user_id if me else None, self.fast_model, list(recent))
