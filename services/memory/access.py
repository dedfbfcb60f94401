"""Who may see what memory holds, and where memory works at all.

Scopes and visibility: a record belongs to its source channel. One from a DM or a private channel is shown only
in that DM or channel, and a private channel's only to a person who is a member of it now (asked of Slack,
cached briefly); one from a public channel is shown in that channel. A record reaches the whole workspace only
when its source message says so explicitly ("remember this for everyone") in a public channel. A record is never
shown in the conversation it came from (that conversation has its own context).

Memory is off unless the settings allow it in the workspace and it is on for the channel (settings, or
``threadkeeper memory enable``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from threadkeeper.persistence import ThreadkeeperError
from threadkeeper.persistence.memory import MemoryRecord, MemoryStore, Visibility

from ..conversation import Conversation
from .config import MemoryConfig

log = logging.getLogger("threadkeeper.memory")


def reaches_workspace(record: MemoryRecord) -> bool:
    """Whether a record is shown in every channel of its workspace: one of workspace scope from a public channel."""
    return record.scope == "workspace" and record.visibility == "public"


class ChannelAccess(Protocol):
    """Who may see a channel's memory, as the transport knows it (the Slack bot asks Slack): what kind of channel
    it is, and whether a person is a member now. Any doubt answers private and not a member."""

    async def visibility(self, workspace: str, channel: str) -> Visibility: ...

    async def is_member(self, workspace: str, channel: str, user: str) -> bool: ...


class PrivacyUnknownError(ThreadkeeperError):
    """Whether a channel is private cannot be told: no transport said so and none can be asked."""


class NoAccess:
    """Where no transport can be asked (a command run without Slack tokens): a channel's kind is unknown, and nobody
    is a member of a private channel."""

    async def visibility(self, workspace: str, channel: str) -> Visibility:
        raise PrivacyUnknownError(
            f"cannot tell whether channel {channel} of workspace {workspace} is private: the bot has not recorded "
            "what Slack said about it, and Slack cannot be asked here (set SLACK_BOT_TOKEN, or let the bot's own "
            "sweep extract it)")

    async def is_member(self, workspace: str, channel: str, user: str) -> bool:
        return False


class CachedAccess:
    """Another access's answers, kept ``seconds`` (membership changes reach memory within that time)."""

    def __init__(self, inner: ChannelAccess, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.inner, self.seconds, self.clock = inner, seconds, clock
        self._kinds: dict[tuple[str, str], tuple[float, Visibility]] = {}
        self._members: dict[tuple[str, str, str], tuple[float, bool]] = {}

    async def visibility(self, workspace: str, channel: str) -> Visibility:
        key, now = (workspace, channel), self.clock()
        hit = self._kinds.get(key)
        if hit is None or now - hit[0] > self.seconds:
            hit = self._kinds[key] = (now, await self.inner.visibility(workspace, channel))
        return hit[1]

    async def is_member(self, workspace: str, channel: str, user: str) -> bool:
        key, now = (workspace, channel, user), self.clock()
        hit = self._members.get(key)
        if hit is None or now - hit[0] > self.seconds:
            hit = self._members[key] = (now, await self.inner.is_member(workspace, channel, user))
        return hit[1]


class Access:
    """Memory's access rules over one :class:`MemoryStore`: the switches (is memory on here), a channel's
    visibility, and a person's membership of a private channel (``channels``: the transport's answers)."""

    def __init__(self, store: MemoryStore, config: MemoryConfig, channels: ChannelAccess) -> None:
        self.store, self.config, self.channels = store, config, channels

    async def visibility(self, conversation: Conversation) -> Visibility:
        """Who may see what a conversation's channel says: the one rule every path uses (extraction from the bot's
        sweep or the command line, the read path). What the transport said when the messages arrived, else what
        the transport answers now (Slack: ``conversations.info``, cached; an error answers private); where nobody
        can be asked, :class:`PrivacyUnknownError`. Never guessed from an id."""
        if conversation.privacy != "unknown":
            return conversation.privacy
        return await self.channels.visibility(conversation.workspace, conversation.channel)

    # -- switches ------------------------------------------------------------------------------

    async def enabled(self, where: Conversation) -> bool:
        """Memory works in a channel when the settings allow it in the workspace (no Redis read otherwise), the
        workspace is not switched off, and the channel is on (by the settings or a stored switch)."""
        return await self.channel_enabled(where.workspace, where.channel)

    async def channel_enabled(self, workspace: str, channel: str) -> bool:
        """:meth:`enabled` for a channel named by its id (a transport's memory switch shows it)."""
        if not self.allows(workspace):
            return False
        switches, _ = await self.store.state(workspace)
        return self.channel_on(channel, switches)

    def allowed(self, where: Conversation) -> bool:
        return self.allows(where.workspace)

    def allows(self, workspace: str) -> bool:
        return "*" in self.config.workspaces or workspace in self.config.workspaces

    def on(self, where: Conversation, switches: dict[str, bool]) -> bool:
        """Whether memory is on in ``where``'s channel, given the workspace's stored ``switches``."""
        return self.channel_on(where.channel, switches)

    def channel_on(self, channel: str, switches: dict[str, bool]) -> bool:
        cfg = self.config
        on = switches.get(f"channel:{channel}", "*" in cfg.channels or channel in cfg.channels)
        return switches.get("workspace", True) and on

    async def member(self, record: MemoryRecord, asker: str | None, members: dict[str, bool]) -> bool:
        """Who may see a record, past its scope (the reading index's ``seen_from``): a private channel's only a
        person who is a member of it now (``members``: the answers of this read, by person)."""
        if record.visibility != "private":
            return True
        if not asker:
            return False
        if asker not in members:
            members[asker] = await self.channels.is_member(record.workspace, record.channel, asker)
        return members[asker]

    async def seen_by(self, records: list[MemoryRecord], person: str) -> list[MemoryRecord]:
        """The records a person may see wherever they are (the transport's list of what memory keeps, where they
        can forget it): the read path's rule with the person in every conversation they can take part in. A record
        that reaches the whole workspace, anyone of it; any other is shown only in its channel, so only to a person
        who is a member of that channel now (a DM's to its person, a private channel's to its current members, as
        :meth:`member` decides). Any error answers not shown."""
        shown: list[MemoryRecord] = []
        members: dict[str, dict[str, bool]] = {}
        for record in records:
            if reaches_workspace(record):
                shown.append(record)
                continue
            asked = members.setdefault(record.channel, {})
            try:
                if record.visibility == "private":
                    seen = await self.member(record, person, asked)
                else:  # shown in its channel only: to whoever takes part in it
                    if person not in asked:
                        asked[person] = await self.channels.is_member(record.workspace, record.channel, person)
                    seen = asked[person]
                if seen:
                    shown.append(record)
            except Exception as exc:  # noqa: BLE001 - any doubt answers not a member
                log.warning("memory: whether %s may see channel %s is unknown (%s); not shown", person,
                            record.channel, exc)
                asked[person] = False
        return shown
