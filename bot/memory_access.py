"""Who may see a channel's memory, asked of Slack: the channel's kind (``conversations.info``) and whether a person
is a member of it now (``conversations.members``). Any error counts as private and not a member: memory is never
shown on a guess."""

from __future__ import annotations

import logging
from typing import Literal

from slack_sdk.errors import SlackApiError

from .workspaces import Workspaces

log = logging.getLogger("threadkeeper.slack")


class SlackAccess:
    def __init__(self, workspaces: Workspaces) -> None:
        self.workspaces = workspaces

    async def visibility(self, workspace: str, channel: str) -> Literal["public", "private", "dm"]:
        if channel.startswith("D"):
            return "dm"
        client = await self.workspaces.client(workspace)
        if client is None:
            return "private"
        try:
            info = (await client.conversations_info(channel=channel)).get("channel") or {}
        except SlackApiError as exc:
            log.warning("memory: conversations.info of %s failed (%s); treated as private", channel, exc)
            return "private"
        if info.get("is_im"):
            return "dm"
        return "private" if info.get("is_private") or info.get("is_mpim") or info.get("is_group") else "public"

    async def is_member(self, workspace: str, channel: str, user: str) -> bool:
        client = await self.workspaces.client(workspace)
        if client is None:
            return False
        cursor = None
        try:
            while True:
                page = await client.conversations_members(channel=channel, cursor=cursor, limit=1000)
                if user in (page.get("members") or []):
                    return True
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    return False
        except SlackApiError as exc:
            log.warning("memory: conversations.members of %s failed (%s); not shown", channel, exc)
            return False
