"""The bot's Home tab: what memory keeps that the person looking may see, by channel, each record with a Forget
button, and for a workspace's admins and owners each channel's memory switch.

Who may see which record is memory's own rule (asked through the application, :meth:`Pipeline.memory_seen_by`);
a press is checked again when it arrives (a person forgets only what they may see now, an admin switch needs an admin
now), so a forged or stale press changes nothing. After a press the Home view is published again."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import (
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.persistence import MemoryRecord
from threadkeeper.services import Pipeline

from .conversations import slack_error
from .workspaces import Workspaces

log = logging.getLogger("threadkeeper.slack")

FORGET_ACTION = "memory_forget"
"""A record's Forget button (its value: the record's id)."""
SWITCH_ACTION = "memory_switch"
"""A channel's memory switch, shown to admins and owners (its value: ``<channel> on`` or ``<channel> off``)."""
MAX_BLOCKS = 100
"""Slack's limit for a Home view."""


def escaped(text: str) -> str:
    """Text shown as written: Slack's control characters escaped (no mention or link is made of it)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def home_view(seen: dict[str, list[MemoryRecord]], switches: dict[str, bool] | None) -> View:
    """The Home view for ``seen`` (a person's records by channel); ``switches`` (each channel's memory on or off)
    only for an admin, who gets a switch per channel."""
    blocks: list[Block] = [HeaderBlock(text="What I remember"),
                           ContextBlock(elements=[MarkdownTextObject(
                               text="What people told me in the channels and messages you can see, kept to help in "
                                    "later conversations there. Forget removes it for everyone.")])]
    if not seen:
        blocks.append(SectionBlock(text="I keep nothing from the channels and messages you can see."))
    left = sum(len(records) for records in seen.values())
    for channel, records in seen.items():
        if len(blocks) + 4 > MAX_BLOCKS:
            break
        where = "Our direct messages" if channel.startswith("D") else f"<#{channel}>"
        accessory = None
        if switches is not None and channel in switches:
            on = switches[channel]
            accessory = ButtonElement(text="Turn memory off" if on else "Turn memory on", action_id=SWITCH_ACTION,
                                      value=f"{channel} {'off' if on else 'on'}")
            where += " · memory is " + ("on" if on else "off")
        blocks += [DividerBlock(), SectionBlock(text=MarkdownTextObject(text=f"*{where}*"), accessory=accessory)]
        for record in records:
            if len(blocks) + 2 > MAX_BLOCKS:
                break
            day = f"<!date^{int(record.said_at)}^{{date_short}}|{record.said_at:.0f}>"
            blocks.append(SectionBlock(
                text=MarkdownTextObject(text=f"{escaped(record.text)}\n_said {day}_"),
                accessory=ButtonElement(text="Forget", action_id=FORGET_ACTION, value=record.id, style="danger",
                                        confirm=ConfirmObject(title="Forget this?", text="I will not use it again, "
                                                              "for anyone.", confirm="Forget", deny="Keep"))))
            left -= 1
    if left > 0:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(
            text=f"{left} more not shown here; forget some to see the rest.")]))
    return View(type="home", blocks=blocks)


class Home:
    """Publishes a person's Home view and applies its buttons, through the application's memory administration."""

    def __init__(self, pipeline: Pipeline, workspaces: Workspaces) -> None:
        self.pipeline, self.workspaces = pipeline, workspaces

    async def publish(self, team: str, user: str) -> None:
        client = await self.workspaces.client(team)
        if client is None:
            return
        seen = await self.pipeline.memory_seen_by(team, user)
        switches = None
        if await is_admin(client, user):
            switches = {channel: await self.pipeline.memory_switched_on(team, channel) for channel in seen}
        try:
            await client.views_publish(user_id=user, view=home_view(seen, switches))
        except SlackApiError as exc:
            log.info("the Home view of %s was not published: %s", user, slack_error(exc))

    async def forget(self, team: str, user: str, record_id: str) -> None:
        """Forget a record the person may see now; a press on any other changes nothing."""
        forgotten = await self.pipeline.forget_seen_memory(team, user, record_id)
        if forgotten is None:
            log.warning("memory: %s pressed Forget on %s, which they may not see; nothing changed", user, record_id)
        else:
            log.warning("memory: %s forgot %s (from channel %s)", user, record_id, forgotten.channel)
        await self.publish(team, user)

    async def switch(self, team: str, user: str, value: str) -> None:
        """Switch a channel's memory on or off, for an admin or owner of the workspace now; anyone else's press
        changes nothing."""
        channel, _, state = value.partition(" ")
        client = await self.workspaces.client(team)
        if not channel or state not in ("on", "off") or client is None:
            return
        if not await is_admin(client, user):
            log.warning("memory: %s, not an admin, pressed the switch of %s; nothing changed", user, channel)
        else:
            await self.pipeline.switch_memory(team, channel, state == "on")
            log.warning("memory: %s switched memory %s in %s", user, state, channel)
        await self.publish(team, user)


async def is_admin(client: AsyncWebClient, user: str) -> bool:
    """Whether a person is an admin or owner of the workspace now (``users.info``); any error answers no."""
    try:
        info: dict[str, Any] = (await client.users_info(user=user)).get("user") or {}
    except SlackApiError as exc:
        log.info("users.info of %s failed (%s); not an admin", user, slack_error(exc))
        return False
    return bool(info.get("is_admin") or info.get("is_owner") or info.get("is_primary_owner"))
