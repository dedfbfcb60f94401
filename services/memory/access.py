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

import time
from collections.abc import Callable
from typing import Protocol

from threadkeeper.persistence import ThreadkeeperError
from threadkeeper.persistence.memory import Visibility


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
