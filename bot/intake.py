"""What the Slack bot settles when a turn takes a message rather than before acknowledging its event
(:class:`services.turns.Intake`): the thread's earlier messages when the bot was brought into it mid-way,
authors' display names, and whether to answer a message not addressed to the bot. Part of
:class:`bot.slack.SlackBot`."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from slack_sdk.errors import SlackApiError

from threadkeeper.services import Conversation, ModelClient, Pipeline, Preparation

from .backfill import Backfill, HistoryPace, Progress, catching_up
from .conversations import BACKFILL, slack_error
from .delivery import TurnWorker
from .metrics import Metrics
from .routing import should_reply
from .workspaces import Identity, Workspaces

log = logging.getLogger("threadkeeper.slack")

class SlackIntake:
    """The bot's :class:`services.turn.Intake` (a mixin: it uses the bot's workspaces, pipeline, metrics, fast
    model and name cache)."""

    workspaces: Workspaces
    pipeline: Pipeline
    metrics: Metrics
    fast_model: ModelClient | None
    history_pace: HistoryPace
    worker: TurnWorker
    _names: dict[tuple[str, str], tuple[str, str | None]]

    async def _me(self, team: str) -> Identity | None:
        return await self.workspaces.identity(team)

    async def prepare(self, conversation: Conversation) -> Preparation:
        """Before the turns of a thread the bot was brought into mid-way (the ``backfill`` flag, set when the
        mention was recorded), read the thread's earlier messages as fast as Slack allows (:mod:`bot.backfill`);
        run under the lease. While some are still to be read, the conversation stays owed (a worker comes back
        when the pace allows) and each reply tells the person."""
        flag = await self.pipeline.flag(conversation, BACKFILL)
        if not flag:
            return Preparation()
        try:
            progress = Progress.parse(flag)
        except ValueError as exc:
            log.error("%s: %s; its earlier messages are not read", conversation, exc)
            await self.pipeline.set_flag(conversation, BACKFILL, "")
            return Preparation()
        team = conversation.workspace
        client, me = await self.workspaces.client(team), await self._me(team)
        if client is None or me is None:
            return Preparation()
        started = time.perf_counter()
        reading = await Backfill(self.pipeline, self.history_pace).read(conversation, client, me.user_id, progress,
                                                                        BACKFILL)
        self.metrics.backfill.observe(time.perf_counter() - started)
        now = reading.progress or progress
        log.info("%s: read %d earlier messages (%d so far, %d new)%s", conversation, now.read - progress.read,
                 now.read, reading.queued, "" if reading.done else f"; more in {reading.wait:.0f} s")
        if reading.done:
            await self.pipeline.set_flag(conversation, BACKFILL, "")
            return Preparation(queued=reading.queued > 0)
        self.come_back(conversation, reading.wait)
        return Preparation(queued=reading.queued > 0, more=True, notice=catching_up(now, self.history_pace))

    def come_back(self, conversation: Conversation, seconds: float) -> None:
        """Visit the conversation again in ``seconds`` (the sweep does if this worker stops first)."""
        self.worker.later(conversation, seconds)

    # -- settled when a turn takes the message (services.turns.Intake) ---------------------------

    async def author(self, conversation: Conversation, author_id: str) -> str:
        """A person's display name in the conversation's workspace (cached), so the model and the ledger read
        names, not ids; the id when the lookup fails."""
        return (await self._person(conversation.workspace, author_id))[0]

    async def zone(self, conversation: Conversation, author_id: str) -> str | None:
        """The time zone Slack's profile gives the person (``users.info``'s ``tz``, an IANA name; cached with the
        name, one lookup for both); None when Slack gives none or the lookup fails."""
        return (await self._person(conversation.workspace, author_id))[1]

    async def _person(self, team: str, author_id: str) -> tuple[str, str | None]:
        known = self._names.get((team, author_id))
        if known is not None:
            return known
        name, zone = author_id, None
        client = await self.workspaces.client(team)
        try:
            if client is not None:
                profile = (await client.users_info(user=author_id)).get("user") or {}
                details = profile.get("profile") or {}
                name = details.get("display_name") or details.get("real_name") or profile.get("name") or author_id
                zone = profile.get("tz") if isinstance(profile.get("tz"), str) else None
        except SlackApiError as exc:  # users:read missing or the user is gone: keep the id
            log.info("users.info for %s failed: %s", author_id, slack_error(exc))
        if len(self._names) >= 50_000:
            self._names.clear()
        self._names[(team, author_id)] = (name, zone)
        return name, zone

    async def route(self, conversation: Conversation, text: str, recent: Sequence[str]) -> bool:
        me = await self._me(conversation.workspace)
        return await should_reply(text, me.user_id if me else None, self.fast_model, list(recent))
