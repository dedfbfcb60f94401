"""Forgetting: delete every key of a conversation, or of every conversation of a Slack workspace.

The one operation that removes history. It exists for people and workspaces that ask for their data to
go (an operator's ``threadkeeper forget``, a workspace uninstalling the app); nothing else deletes.
"""

from __future__ import annotations

from .base import RedisStore
from .base import glob_escape as _glob_escape
from .errors import InvalidTransitionError
from .keys import ConversationKeys, activity_key, dead_registry_key, directory_key, pending_key


class Forgetter(RedisStore):
    async def keys_of(self, conversation_id: str) -> list[str]:
        """Every key the conversation has (its dedup markers included)."""
        base = ConversationKeys(self.prefix, conversation_id).base
        found = [k.decode() if isinstance(k, bytes) else k
                 async for k in self.client.scan_iter(match=f"{_glob_escape(base)}:*", count=1000)]
        return sorted(found)

    async def conversation(self, conversation_id: str) -> int:
        """Delete the conversation's keys and its entries in the registries (owed work, dead letters); returns how many keys went.
        Refused while a turn holds the conversation's lease (its commit would write part of it back)."""
        keys = ConversationKeys(self.prefix, conversation_id)
        if await self._call(self.client.exists(keys.lease)):
            raise InvalidTransitionError(f"a turn of {conversation_id} is running (its lease is held); "
                                         "forget it once the turn has finished")
        found = await self.keys_of(conversation_id)
        for start in range(0, len(found), 500):
            await self._call(self.client.delete(*found[start:start + 500]))
        for registry in (pending_key(self.prefix), dead_registry_key(self.prefix), activity_key(self.prefix),
                         directory_key(self.prefix)):
            await self._call(self.client.zrem(registry, conversation_id))
        return len(found)

    async def conversations_of_team(self, team_id: str) -> list[str]:
        """The Slack conversations of workspace ``team_id`` that have keys here."""
        pattern = f"{_glob_escape(self.prefix)}:{{slack:{_glob_escape(team_id)}:*"
        found: set[str] = set()
        async for key in self.client.scan_iter(match=pattern, count=1000):
            text = key.decode() if isinstance(key, bytes) else key
            found.add(text[len(self.prefix) + 2:text.index("}:", len(self.prefix) + 2)])
        return sorted(found)

    async def team(self, team_id: str) -> tuple[int, list[str]]:
        """Delete every conversation of workspace ``team_id`` (and what its people had open, kept as hints): how many
        keys went, and the conversations left because a turn held them (forget those again once it has finished)."""
        deleted, busy = 0, []
        views = [k async for k in self.client.scan_iter(
            match=f"{_glob_escape(self.prefix)}:{{view:{_glob_escape(team_id)}:*", count=1000)]
        if views:
            deleted += int(await self._call(self.client.delete(*views)))
        for cid in await self.conversations_of_team(team_id):
            try:
                deleted += await self.conversation(cid)
            except InvalidTransitionError:
                busy.append(cid)
        return deleted, busy
