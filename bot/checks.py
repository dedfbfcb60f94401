"""What an operator learns at start, in one line, before the bot takes any event: whether Slack accepts its tokens,
whether the bot token has every scope the manifest asks for, and which workspace and bot user it serves. While it
runs, whether Slack still accepts the token (``/healthz`` reports it).

A permanent refusal (an invalid or revoked token, a missing scope) stops the bot with one line naming the setting
and where in the app's settings to fix it; a Slack that cannot be reached now is not permanent (the bot starts,
and ``/healthz`` says it is not ready until Slack answers)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.persistence import ThreadkeeperError

from .conversations import slack_error
from .manifest import BOT_SCOPES

log = logging.getLogger("threadkeeper.slack")

PERMANENT = frozenset({"invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive",
                       "no_permission", "missing_scope", "not_allowed_token_type", "invalid_token",
                       "team_access_not_granted", "ekm_access_denied"})
"""What Slack answers for a token it will never accept as it is."""
UNREACHABLE = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class SlackSetupError(ThreadkeeperError):
    """Slack refuses the bot's configuration for good; the message names the setting and where to fix it."""


@dataclass
class Served:
    """Who the bot is in the workspace its token belongs to (one-token mode)."""

    team: str
    team_name: str
    user: str
    user_name: str

    def line(self) -> str:
        return f"serving workspace {self.team_name} ({self.team}) as @{self.user_name} ({self.user})"


def refused_for_good(exc: SlackApiError) -> bool:
    """Whether Slack refused a token in a way that asking again cannot change (invalid, revoked, a missing scope)."""
    return slack_error(exc) in PERMANENT or exc.response.status_code == 401


async def check_bot_token(client: AsyncWebClient) -> Served:
    """``auth.test`` with the bot token, and its scopes against the manifest's: :class:`SlackSetupError` when Slack
    refuses the token or a scope is missing; a Slack that cannot be reached is raised as it is (not permanent)."""
    try:
        auth = await client.auth_test()
    except SlackApiError as exc:
        if refused_for_good(exc):
            raise SlackSetupError(
                f"SLACK_BOT_TOKEN is refused by Slack ({slack_error(exc)}): copy the Bot User OAuth Token (xoxb-…) from your "
                "app's settings at api.slack.com/apps → OAuth & Permissions, and reinstall the app if it was "
                "revoked") from None
        raise
    granted = {s.strip() for s in (auth.headers.get("x-oauth-scopes") or auth.headers.get("X-OAuth-Scopes") or
                                    "").split(",") if s.strip()}
    missing = [s for s in BOT_SCOPES if granted and s not in granted]
    if missing:
        raise SlackSetupError(
            f"SLACK_BOT_TOKEN lacks the scopes {', '.join(missing)} that the manifest asks for: add them at "
            "api.slack.com/apps → OAuth & Permissions → Scopes (or update the app from `threadkeeper manifest`) "
            "and reinstall the app")
    return Served(str(auth.get("team_id") or ""), str(auth.get("team") or auth.get("team_id") or ""),
                  str(auth.get("user_id") or ""), str(auth.get("user") or auth.get("user_id") or ""))


async def check_app_token(client: AsyncWebClient, app_token: str) -> None:
    """``apps.connections.open`` with the app-level token (Socket Mode): :class:`SlackSetupError` when Slack refuses
    it for good."""
    try:
        await client.apps_connections_open(app_token=app_token)
    except SlackApiError as exc:
        if refused_for_good(exc):
            raise SlackSetupError(
                f"SLACK_APP_TOKEN is refused by Slack ({slack_error(exc)}): make an app-level token (xapp-…) with the "
                "connections:write scope at api.slack.com/apps → Basic Information → App-Level Tokens, and turn "
                "Socket Mode on") from None
        raise


class SlackHealth:
    """Whether Slack accepts the bot token now, asked at most every ``seconds`` (``/healthz``): ``ok``, ``refused``
    (the token is invalid or revoked) or ``unreachable``."""

    def __init__(self, client: AsyncWebClient | None, seconds: float = 60.0) -> None:
        self.client = client
        self.seconds = seconds
        self.state = "ok" if client is None else "unknown"
        self.checked = 0.0

    async def __call__(self) -> str:
        if self.client is None or time.monotonic() - self.checked < self.seconds and self.state != "unknown":
            return self.state
        self.checked = time.monotonic()
        try:
            await self.client.auth_test()
            self.state = "ok"
        except SlackApiError as exc:
            self.state = "refused" if refused_for_good(exc) else "unreachable"
        except UNREACHABLE:
            self.state = "unreachable"
        if self.state != "ok":
            log.warning("Slack %s the bot token: /healthz answers not ready", self.state)
        return self.state
