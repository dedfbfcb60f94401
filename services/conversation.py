"""A conversation as a typed value: its transport, workspace, channel and thread, and what the transport said about
the channel's privacy. It is built once, where a message arrives (the Slack bot from Slack's event, the console, a
replay, a command's argument); its string id is only the key it is stored under, parsed by :meth:`Conversation.of`
alone, where only a key is at hand (the sweep's registry, a command line)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from threadkeeper.persistence import ThreadkeeperError

Privacy = Literal["public", "private", "dm", "unknown"]
"""Who may see what is said in the channel: everyone in the workspace (``public``), its members (``private``, a
group DM too), the people of a direct message (``dm``); ``unknown`` until the transport has said."""
PRIVACIES: tuple[Privacy, ...] = ("public", "private", "dm", "unknown")
PRIVACY = "privacy"
"""The conversation flag that keeps what the transport said about the channel's privacy when its messages arrived
(stored with them, so the worker that takes the turn, and memory's extraction later, know it)."""
LOCAL = "local"
"""The workspace of conversations that no Slack workspace holds (the console, replays, evals)."""
_SLACK_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A Slack team, channel or thread identifier (ids such as ``T0123ABC``, timestamps such as ``1700000000.000100``,
and ``dm``, the top level of a direct message)."""


class ConversationIdError(ThreadkeeperError):
    """A conversation id or one of its parts is not one a transport could have made."""


def slack_id(kind: str, value: object) -> str:
    """``value`` if it can be a Slack ``kind`` id (a team, channel or thread: letters, digits, '.', '-', '_', up to
    64), else :class:`ConversationIdError` saying so: the one rule for ids a command or an event names."""
    if not isinstance(value, str) or not _SLACK_PART.fullmatch(value):
        shown = value[:80] if isinstance(value, str) else value
        raise ConversationIdError(f"invalid Slack {kind} id {shown!r} (letters, digits, '.', '-', '_')")
    return value


@dataclass(frozen=True)
class Conversation:
    id: str
    """The key the conversation is stored under (``slack:<team>:<channel>:<thread>``, ``console:local``, …)."""
    transport: str
    workspace: str
    channel: str
    thread: str
    privacy: Privacy = "unknown"

    def __post_init__(self) -> None:
        if not self.id or len(self.id) > 512 or any(c in self.id for c in "{}\n\r\x00") or not self.id.isprintable():
            raise ConversationIdError(f"invalid conversation id {self.id!r}: it must be 1 to 512 printable "
                                      "characters without braces")
        if self.privacy not in PRIVACIES:
            raise ConversationIdError(f"invalid privacy {self.privacy!r} for {self.id}: one of {', '.join(PRIVACIES)}")

    @classmethod
    def slack(cls, team: str, channel: str, thread: str, privacy: Privacy = "unknown") -> Conversation:
        """A Slack thread (``thread``: the thread's ts, or ``dm`` for a direct message's top level)."""
        for name, part in (("team", team), ("channel", channel), ("thread", thread)):
            slack_id(name, part)
        return cls(f"slack:{team}:{channel}:{thread}", "slack", team, channel, thread, privacy)

    @staticmethod
    def beginning(team: str, channel: str | None = None) -> str:
        """How the ids of a Slack workspace's conversations (of one of its channels) begin."""
        return Conversation.slack(team, channel or "x", "x").id[:-1 if channel else -3]

    @classmethod
    def local(cls, id: str, privacy: Privacy = "public") -> Conversation:
        """A conversation no Slack workspace holds (the console, a replay, an eval): its own channel of the local
        workspace, public within it (nobody else is in it)."""
        transport = id.split(":", 1)[0] if ":" in id else LOCAL
        return cls(id, transport, LOCAL, id.replace(":", "_"), "", privacy)

    @classmethod
    def of(cls, id: str, privacy: Privacy = "unknown") -> Conversation:
        """The conversation stored under ``id`` (the one parser of a stored id); ``privacy`` as far as known."""
        if not isinstance(id, str):
            raise ConversationIdError(f"invalid conversation id {id!r}: not a string")
        parts = id.split(":")
        if parts[0] == "slack":
            if len(parts) != 4:
                raise ConversationIdError(f"invalid Slack conversation id {id!r}: expected "
                                          "slack:<team>:<channel>:<thread ts>")
            return cls.slack(parts[1], parts[2], parts[3], privacy)
        return cls.local(id, privacy if privacy != "unknown" else "public")

    def said(self, privacy: str | None) -> Conversation:
        """This conversation with the privacy a transport recorded for it (when this value does not know it)."""
        for known in PRIVACIES[:-1]:
            if self.privacy == "unknown" and privacy == known:
                return replace(self, privacy=known)
        return self

    def __str__(self) -> str:
        return self.id
