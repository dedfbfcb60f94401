"""The Slack app's manifest, written once: what the bot asks for (scopes), what it listens to (events) and how Slack
reaches it. ``manifest.json`` (Socket Mode) and ``deploy/manifest.http.json`` (the HTTP events endpoint) are this
module's output (``threadkeeper manifest``; a test holds the files to it), and the scopes a workspace grants are
checked against it at start.

Two surfaces: the agent messaging experience (``agent_view``: the only one new Slack apps may use since July 2026;
conversations live in the Messages tab, each thread its own) and, for apps created before it, the assistant
experience (``assistant_view``)."""

from __future__ import annotations

from typing import Any, Literal

Surface = Literal["agent", "assistant"]
Mode = Literal["socket", "http"]

SCHEMA = "https://raw.githubusercontent.com/slackapi/manifest-schema/main/manifest.schema.json"
BOT_SCOPES = ("app_mentions:read", "assistant:write", "channels:history", "groups:history", "im:history",
              "mpim:history", "chat:write", "reactions:write", "pins:read", "users:read", "channels:read",
              "groups:read", "mpim:read", "im:read")
"""What the bot uses: mentions and messages of the channels, private channels, DMs and group DMs it is in (and who
wrote them, and what kind of channel each is: memory decides who may see what from that), posting, status, pins."""
COMMON_EVENTS = ("app_mention", "message.channels", "message.groups", "message.im", "message.mpim", "pin_added",
                 "pin_removed", "app_uninstalled", "tokens_revoked", "app_home_opened")
SURFACE_EVENTS: dict[Surface, tuple[str, ...]] = {
    "agent": ("app_context_changed", "agent_session_stopped"),
    "assistant": ("assistant_thread_started", "assistant_thread_context_changed"),
}
DESCRIPTION = "Catch up on long threads, track open asks and decisions, and remember what your team told it."
SUGGESTED_PROMPTS = [
    {"title": "Catch me up", "message": "Summarize this thread: open asks, decisions and next steps."},
    {"title": "What is still open?", "message": "Which asks in this thread are still open, and who asked?"},
    {"title": "Draft a status update", "message": "Draft a short status update from this thread."},
    {"title": "What do you remember?", "message": "What do you remember about this channel?"},
]


def manifest(mode: Mode = "socket", surface: Surface = "agent",
             base_url: str = "https://threadkeeper.example.com") -> dict[str, Any]:
    """The app manifest for ``mode`` (Socket Mode, or Slack posting to ``base_url``) and ``surface``."""
    features: dict[str, Any] = {
        "app_home": {"home_tab_enabled": True, "messages_tab_enabled": True,
                     "messages_tab_read_only_enabled": False},
        "bot_user": {"display_name": "threadkeeper", "always_online": True},
        "shortcuts": [{"name": "Forget this thread", "type": "message", "callback_id": "forget_thread",
                       "description": "Delete everything Threadkeeper keeps about this thread"}],
    }
    if surface == "agent":
        features["agent_view"] = {"agent_description": DESCRIPTION, "suggested_prompts": SUGGESTED_PROMPTS}
    else:
        features["assistant_view"] = {"assistant_description": DESCRIPTION, "suggested_prompts": []}
    events: dict[str, Any] = {"bot_events": [*COMMON_EVENTS, *SURFACE_EVENTS[surface]]}
    interactivity: dict[str, Any] = {"is_enabled": True}
    oauth: dict[str, Any] = {"scopes": {"bot": list(BOT_SCOPES)}}
    if mode == "http":
        base = base_url.rstrip("/")
        events["request_url"] = interactivity["request_url"] = f"{base}/slack/events"
        oauth["redirect_urls"] = [f"{base}/slack/oauth_redirect"]
    return {
        "$schema": SCHEMA,
        "display_information": {"name": "Threadkeeper", "description": "Answers in long threads without losing the "
                                "thread.", "background_color": "#2c2d30"},
        "features": features,
        "oauth_config": oauth,
        "settings": {"event_subscriptions": events, "interactivity": interactivity, "org_deploy_enabled": False,
                     "socket_mode_enabled": mode == "socket", "token_rotation_enabled": False},
    }
