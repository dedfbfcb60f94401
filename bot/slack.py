"""The Slack bot on slack-bolt (async): listeners validate, record, acknowledge and hand off to the turn
worker (``delivery``).

Every event is appended durably to its conversation's inbox (deduplicated by ``event_id`` and message
``ts``) before Bolt acknowledges it (``process_before_response``), and nothing slower happens before the
acknowledgement: authors' names and whether to answer a message not addressed to the bot are settled when
the turn takes the message (:class:`services.turn.Intake`). The turn then runs in the background under
the conversation's lease. A conversation is built once, from the event, as a typed value (its workspace, channel,
thread and what Slack said about the channel's privacy); a request from a workspace the bot does not serve is
turned away by one middleware in front of every listener.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from threadkeeper.bot.manifest import SUGGESTED_PROMPTS, Surface
from threadkeeper.persistence import InboxItem, InvalidTransitionError
from threadkeeper.services import Conversation, ConversationIdError, ModelClient, Pipeline, Privacy

from .backfill import HistoryPace
from .checks import SlackHealth, check_app_token, check_bot_token
from .conversations import BACKFILL, bot_name, conversation_of, message_text, privacy_of, slack_error, viewing
from .delivery import SlackEvents, TurnWorker
from .home import FORGET_ACTION, SWITCH_ACTION, Home
from .intake import SlackIntake
from .metrics import Metrics
from .streaming import FEEDBACK_ACTION
from .workspaces import Workspaces

Listener = Callable[[dict[str, Any], dict[str, Any]], Awaitable[None]]
log = logging.getLogger("threadkeeper.slack")

_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")


class SlackBot(SlackIntake):
    def __init__(self, *, pipeline: Pipeline, workspaces: Workspaces, client: AsyncWebClient,
                 signing_secret: str | None, fast_model: ModelClient | None, metrics: Metrics | None = None,
                 oauth: AsyncOAuthSettings | None = None, surface: Surface = "agent",
                 history: HistoryPace | None = None) -> None:
        """``client`` is Bolt's: the one-token client, or in installs mode (``oauth``) a client without a token
        that the OAuth flow uses to exchange codes; replies use ``workspaces``' client of their team. ``surface``:
        the agent messaging experience (each thread of the DM its own conversation, agent sessions with a stop
        button) or the assistant experience an older app was made with. ``history``: how fast a thread's earlier
        messages may be read (default: as Slack allows an app of this kind, see :class:`bot.backfill.HistoryPace`)."""
        self.pipeline = pipeline
        self.history_pace = history or HistoryPace.of("auto", installs=oauth is not None)
        self.surface = surface
        self.workspaces = workspaces
        self.fast_model = fast_model
        self.metrics = metrics or Metrics()
        self.trigger_ts: dict[str, str] = {}
        self.events = SlackEvents(workspaces, pipeline, self.trigger_ts, self.metrics, surface=surface)
        self.worker = TurnWorker(pipeline, self.events, self.metrics)
        self.home = Home(pipeline, workspaces)
        self._names: dict[tuple[str, str], tuple[str, str | None]] = {}
        pipeline.use_intake(self)
        self.signing_secret = signing_secret
        """Checked by the events endpoint before it reads a request (:class:`bot.signature.SignatureGate`), so Bolt's
        own check is off; Socket Mode needs none."""
        self.app = AsyncApp(client=client, signing_secret=signing_secret or "unused-in-socket-mode",
                            request_verification_enabled=False, process_before_response=True, oauth_settings=oauth)
        self.listening: asyncio.Task[None] | None = None
        self.app.use(self._ours)
        self.slack_health = SlackHealth(workspaces.make_client(workspaces.token) if workspaces.token else None)
        """Whether Slack accepts the bot token now (``/healthz``)."""
        self._register()

    def listen(self) -> None:
        """Start hearing stop requests (Slack's stop button pressed while another worker, or this one, runs the
        turn); idempotent. The web app starts it with itself, Socket Mode with its sweep."""
        if self.listening is None or self.listening.done():
            self.listening = asyncio.create_task(self.pipeline.honour_stops(), name="stops")

    async def close(self) -> None:
        if self.listening is not None:
            self.listening.cancel()
            await asyncio.gather(self.listening, return_exceptions=True)
            self.listening = None

    async def preflight(self, app_token: str | None = None) -> list[str]:
        """Before the bot takes events: Slack accepts its tokens (the bot token with every scope the manifest asks
        for; the app-level token for Socket Mode), and stored installations open with the encryption key. Raises
        :class:`bot.checks.SlackSetupError` (one line naming the setting) on a permanent refusal; returns what to
        tell the operator (which workspace and bot user are served)."""
        lines: list[str] = []
        if self.workspaces.token is not None:
            client = self.workspaces.make_client(self.workspaces.token)
            served = await check_bot_token(client)
            lines.append(served.line())
        else:
            lines.append(f"serving every workspace that installs the app ({await self.workspaces.installed()} "
                         "installed now)")
        if app_token:
            await check_app_token(self.workspaces.make_client(app_token), app_token)
        return lines

    def _conversation(self, team: str, channel: str, ts: str, thread_ts: str | None,
                      privacy: Privacy = "unknown") -> Conversation:
        """The conversation a message belongs to, as this bot's surface threads direct messages."""
        return conversation_of(team, channel, ts, thread_ts, privacy, threads_in_dm=self.surface == "agent")

    async def measure(self) -> None:
        """Bring the metrics read from Redis up to date (``/metrics`` calls it before rendering)."""
        counts = await self.pipeline.dead_letter_counts()
        self.metrics.dead_letters.set(sum(counts.values()))
        self.metrics.dead_letter_conversations.set(len(counts))

    async def _ours(self, body: dict[str, Any], next: Callable[[], Awaitable[None]]) -> BoltResponse | None:
        """Middleware in front of every listener: a request from a workspace the bot does not serve (not its
        token's, or not installed) is acknowledged and ignored, and counted."""
        team = _team_of(body)
        if team and await self.workspaces.identity(team) is None:
            event = str((body.get("event") or {}).get("type") or "")
            kind = "message" if event in ("message", "app_mention") else event or str(body.get("type") or "request")
            self.metrics.events.labels(kind, "foreign").inc()
            log.info("ignored a %s from team %s, which this bot does not serve", kind, team)
            return BoltResponse(status=200, body="")
        await next()
        return None

    def _register(self) -> None:
        app = self.app

        def guarded(kind: str) -> Callable[[Listener], Listener]:
            """A listener that acknowledges a malformed event (a missing field, a value of the wrong type) and
            logs it, instead of failing the request: Slack would only send the same event again. Store
            errors still fail it, so Slack retries what could not be recorded."""
            def wrap(listener: Listener) -> Listener:
                @functools.wraps(listener)
                async def run(body: dict[str, Any], event: dict[str, Any]) -> None:
                    try:
                        await listener(body, event)
                    except (KeyError, TypeError, ValueError, AttributeError, ConversationIdError) as exc:
                        self.metrics.events.labels(kind, "malformed").inc()
                        log.warning("ignored a malformed %s event (%s: %s)", kind, type(exc).__name__, exc)
                return run
            return wrap

        @app.event("agent_session_stopped")
        @guarded("agent_session_stopped")
        async def on_session_stopped(body: dict[str, Any], event: dict[str, Any]) -> None:
            """A person pressed the stop button of a thread's agent session: whichever worker runs its turn stops
            it (the session leaves ``processing`` when that turn ends)."""
            thread = event.get("thread_ts")
            if isinstance(event.get("channel"), str) and isinstance(thread, str):
                conversation = Conversation.slack(str(body.get("team_id") or ""), event["channel"], thread)
                await self.pipeline.stop(conversation)
                self.metrics.events.labels("agent_session_stopped", "recorded").inc()

        @app.event("app_mention")
        @guarded("app_mention")
        async def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
            started = time.perf_counter()
            await self.record_message(body, event, mention=True)
            self.metrics.ack.labels("mention").observe(time.perf_counter() - started)

        @app.event("message")
        @guarded("message")
        async def on_message(body: dict[str, Any], event: dict[str, Any]) -> None:
            started = time.perf_counter()
            subtype = event.get("subtype")
            if subtype == "message_changed":
                await self.record_edit(body, event)
            elif subtype == "message_deleted":
                await self.record_delete(body, event)
            elif subtype in (None, "file_share", "thread_broadcast", "bot_message"):
                await self.record_message(body, event, mention=False)
            self.metrics.ack.labels("message").observe(time.perf_counter() - started)

        @app.event("pin_added")
        @guarded("pin_added")
        async def on_pin(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self.record_pin(body, event, pinned=True)

        @app.event("pin_removed")
        @guarded("pin_removed")
        async def on_unpin(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self.record_pin(body, event, pinned=False)

        @app.event("app_uninstalled")
        @guarded("app_uninstalled")
        async def on_uninstalled(body: dict[str, Any], event: dict[str, Any]) -> None:
            await self.forget_workspace(body, "app_uninstalled")

        @app.event("tokens_revoked")
        @guarded("tokens_revoked")
        async def on_tokens_revoked(body: dict[str, Any], event: dict[str, Any]) -> None:
            if (event.get("tokens") or {}).get("bot"):  # the bot's token: nothing of this workspace is served
                await self.forget_workspace(body, "tokens_revoked")

        @app.shortcut("forget_thread")
        async def on_forget_thread(ack: Any, body: dict[str, Any]) -> None:
            await ack()
            await guarded("forget_thread")(lambda body, _: self.forget_thread(body))(body, {})

        @app.action(FEEDBACK_ACTION)
        async def on_feedback(ack: Any, body: dict[str, Any]) -> None:
            await ack()
            actions = body.get("actions") if isinstance(body.get("actions"), list) else []
            value = str((actions[0] if actions and isinstance(actions[0], dict) else {}).get("value") or "")
            verdict, _, checkpoint = value.partition(" ")
            if verdict not in ("good", "bad"):
                self.metrics.events.labels("feedback", "malformed").inc()
                return
            self.metrics.feedback.labels(verdict).inc()
            log.info("feedback %s on the reply of %s from %s", verdict, checkpoint,
                     (body.get("user") or {}).get("id"))

        @app.event("app_home_opened")
        @guarded("app_home_opened")
        async def on_home_opened(body: dict[str, Any], event: dict[str, Any]) -> None:
            """A person opened the bot's Home tab: what memory keeps that they may see is published there (after the
            acknowledgement). The Messages tab of the agent surface (its DM): the suggested prompts are set there,
            for the whole DM (with a thread they would not show)."""
            team, user = str(body.get("team_id") or ""), event.get("user")
            if event.get("tab") == "home" and isinstance(user, str) and user:
                self.worker.background(self._logged("home", self.home.publish(team, user)))
                return
            if self.surface != "agent" or event.get("tab") != "messages" or not isinstance(event.get("channel"), str):
                return
            client = await self.workspaces.client(team)
            try:
                if client is not None:
                    await client.assistant_threads_setSuggestedPrompts(channel_id=event["channel"],
                                                                       prompts=SUGGESTED_PROMPTS)
            except SlackApiError as exc:
                log.info("suggested prompts unavailable: %s", slack_error(exc))

        @app.action(FORGET_ACTION)
        async def on_forget_memory(ack: Any, body: dict[str, Any]) -> None:
            await ack()
            await guarded("memory_forget")(self._pressed(self.home.forget))(body, {})

        @app.action(SWITCH_ACTION)
        async def on_switch_memory(ack: Any, body: dict[str, Any]) -> None:
            await ack()
            await guarded("memory_switch")(self._pressed(self.home.switch))(body, {})

        if self.surface == "agent":
            @app.event("app_context_changed")
            @guarded("app_context_changed")
            async def on_app_context(body: dict[str, Any], event: dict[str, Any]) -> None:
                """What the person has open changed: kept as a hint for the turns that answer them."""
                user = event.get("user") or ((body.get("authorizations") or [{}])[0] or {}).get("user_id")
                if isinstance(user, str) and user:
                    await self.pipeline.remember_view(str(body.get("team_id") or ""), user,
                                                      viewing((event.get("context") or {}).get("entities")))
        else:
            @app.event("assistant_thread_started")
            @guarded("assistant_thread_started")
            async def on_assistant_started(body: dict[str, Any], event: dict[str, Any]) -> None:
                thread = event.get("assistant_thread", {})
                conversation = _assistant_thread(body, thread)
                await self.pipeline.set_flag(conversation, "assistant", "1")
                await self.pipeline.set_flag(conversation, "subscribed", "1")
                client = await self.workspaces.client(conversation.workspace)
                try:
                    if client is not None:
                        await client.assistant_threads_setSuggestedPrompts(
                            channel_id=thread["channel_id"], thread_ts=thread["thread_ts"], prompts=SUGGESTED_PROMPTS)
                except SlackApiError as exc:
                    log.info("suggested prompts unavailable: %s", slack_error(exc))

            @app.event("assistant_thread_context_changed")
            @guarded("assistant_thread_context_changed")
            async def on_context_changed(body: dict[str, Any], event: dict[str, Any]) -> None:
                thread = event.get("assistant_thread", {})
                conversation = _assistant_thread(body, thread)
                context = thread.get("context") or {}
                await self.pipeline.set_flag(conversation, "assistant_context", str(context.get("channel_id") or ""))

    def _pressed(self, apply: Callable[[str, str, str], Awaitable[None]]) -> Listener:
        """A Home button's press: who pressed it, in which workspace, with which value, handed to ``apply`` after
        the acknowledgement (``apply`` checks again that the person may do it)."""
        async def run(body: dict[str, Any], _: dict[str, Any]) -> None:
            team, user = str(body["team"]["id"]), str(body["user"]["id"])
            value = str(body["actions"][0]["value"])
            self.metrics.events.labels(str(body["actions"][0]["action_id"]), "recorded").inc()
            self.worker.background(self._logged("home", apply(team, user, value)))
        return run

    @staticmethod
    async def _logged(what: str, work: Awaitable[None]) -> None:
        try:
            await work
        except Exception:  # noqa: BLE001 - a background task must log, never vanish silently
            log.exception("%s failed", what)

    async def forget_workspace(self, body: dict[str, Any], why: str) -> None:
        """The workspace removed the app (or revoked its token): every conversation of that team is deleted, and
        its memory. Conversations whose turn is running are deleted once it has finished (retried in the
        background)."""
        team = body.get("team_id")
        if not team:
            return
        deleted, busy = await self.pipeline.forget_workspace(team)
        await self.workspaces.remove(team)
        self.metrics.events.labels(why, "forgotten").inc()
        log.warning("%s: deleted %d keys of team %s (%d conversations busy, retried)", why, deleted, team, len(busy))
        if busy:
            self.worker.background(self._forget_later(team, busy))

    async def forget_thread(self, body: dict[str, Any]) -> None:
        """The "Forget this thread" message shortcut: the thread's conversation is deleted (once its running
        turn, if any, has finished), and the person who asked is told so privately."""
        team = (body.get("team") or {}).get("id") or "T"
        channel = (body.get("channel") or {}).get("id")
        message = body.get("message") or {}
        user = (body.get("user") or {}).get("id")
        if not channel or "ts" not in message:
            return
        conversation = self._conversation(team, channel, message["ts"], message.get("thread_ts"))
        try:
            forgotten = await self.pipeline.forget(conversation)
            await self.events.close(conversation)
            text = (f"Forgotten: {forgotten.keys} stored records of this thread were deleted. I will not follow it "
                    "until someone mentions me in it again." if forgotten.keys else "I keep nothing about this thread.")
        except InvalidTransitionError:
            self.worker.background(self._forget_later(team, [conversation.id]))
            text = "I am answering in this thread right now; I will forget it as soon as that answer is done."
        self.metrics.events.labels("forget_thread", "forgotten").inc()
        log.warning("forget_thread: %s asked to forget %s", user, conversation)
        client = await self.workspaces.client(team)
        if client is not None and user:
            try:
                await client.chat_postEphemeral(channel=channel, user=user, text=text,
                                                thread_ts=message.get("thread_ts") or message["ts"])
            except SlackApiError as exc:
                log.info("telling %s that %s was forgotten failed: %s", user, conversation, slack_error(exc))

    async def _forget_later(self, team: str, busy: list[str]) -> None:
        for _ in range(120):
            await asyncio.sleep(5)
            left = []
            for cid in busy:
                try:
                    await self.pipeline.forget(cid)
                except InvalidTransitionError:
                    left.append(cid)
            if not left:
                return
            busy = left
        log.error("could not forget %d conversations of team %s: their turns never finished", len(busy), team)

    # -- recording -----------------------------------------------------------------------------

    async def record_message(self, body: dict[str, Any], event: dict[str, Any], *, mention: bool) -> None:
        if "ts" not in event or not (event.get("user") or event.get("bot_id")):
            return
        team = body.get("team_id") or event.get("team") or "T"
        me = await self._me(team)
        if me is None:
            return
        bot = me.user_id
        from_bot = bool(event.get("bot_id")) or event.get("subtype") == "bot_message"
        if event.get("user") == bot or (from_bot and event.get("bot_id") == me.bot_id):
            return  # the bot's own posts
        channel, ts = event["channel"], event["ts"]
        thread_ts = event.get("thread_ts") or ts
        conversation = self._conversation(team, channel, ts, event.get("thread_ts"), privacy_of(event))
        text = message_text(event)
        is_dm = event.get("channel_type") == "im"
        # Other bots' posts (alerts, CI, deploys) are part of the thread, but never make the bot answer.
        addressed = not from_bot and (mention or is_dm or bool(bot and f"<@{bot}" in text))
        person = event.get("user") if not from_bot else None
        stored, view = await self.pipeline.arriving(conversation, "subscribed", person)
        subscribed = stored == "1"
        if not (addressed or subscribed):
            self.metrics.events.labels("message", "ignored").inc()
            return
        flags: dict[str, str] = {"subscribed": "1"} if addressed else {}
        if addressed and not subscribed and thread_ts != ts and not await self.pipeline.exists(conversation):
            # Read after the acknowledgement, by the worker that takes the conversation (``prepare``).
            flags[BACKFILL] = f"{channel} {thread_ts} {ts}"
        clean = _MENTION.sub(lambda m: "" if m.group(1) == bot else m.group(0), text).strip() or text
        message = self.pipeline.message(clean, author=person or bot_name(event), id=ts, created_at=float(ts))
        # Other bots never make it answer; a person's message not addressed to it is routed by the turn.
        route = not addressed and not from_bot
        # a reply: a deletion may name only its ts
        reply = Conversation.slack(team, channel, ts) if thread_ts != ts and isinstance(thread_ts, str) else None
        appended = await self.pipeline.submit_item(conversation, InboxItem(
            event_id=body.get("event_id"), message=message, reply_expected=addressed, route=route, author_id=person,
            view=view), flags=flags, reply=reply)
        self.metrics.events.labels("message", "recorded" if appended else "duplicate").inc()
        if appended:
            if addressed or route:
                self.trigger_ts[conversation.id] = ts
                if person:
                    self.events.askers[conversation.id] = (team, person)
            self.worker.kick(conversation)

    async def record_edit(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        new = event.get("message") or {}
        if "ts" not in new:
            return
        team = body.get("team_id") or "T"
        conversation = self._conversation(team, event["channel"], new["ts"], new.get("thread_ts"), privacy_of(event))
        edited = self.pipeline.message(new.get("text") or "", author=new.get("user"), id=new["ts"])
        # What tells this edit from another edit of the message: when Slack says it was edited.
        change = str((new.get("edited") or {}).get("ts") or event.get("event_ts") or "") or None
        item = InboxItem(kind="edit", event_id=body.get("event_id"), message=edited, reply_expected=False,
                         author_id=new.get("user"), change=change)
        await self._effect(conversation, item)

    async def record_delete(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        previous = event.get("previous_message") or {}
        deleted = event.get("deleted_ts") or previous.get("ts")
        if not deleted:
            return
        team = body.get("team_id") or "T"
        thread_ts = previous.get("thread_ts")
        if not previous:  # Slack left out the deleted message: the thread it was a reply in, if it was one
            thread_ts = await self.pipeline.thread_of(Conversation.slack(team, event["channel"], deleted))
        conversation = self._conversation(team, event["channel"], deleted, thread_ts, privacy_of(event))
        await self._effect(conversation, InboxItem(kind="delete", event_id=body.get("event_id"), target_id=deleted,
                                                   reply_expected=False))

    async def record_pin(self, body: dict[str, Any], event: dict[str, Any], *, pinned: bool) -> None:
        item = event.get("item") or {}
        message = item.get("message") or {}
        channel = event.get("channel_id") or item.get("channel")
        if "ts" not in message or not isinstance(channel, str):
            return  # a pin of something else than a message, or an event without its channel
        team = body.get("team_id") or "T"
        conversation = self._conversation(team, channel, message["ts"], message.get("thread_ts"))
        await self._effect(conversation, InboxItem(kind="pin" if pinned else "unpin", event_id=body.get("event_id"),
                                                   target_id=message["ts"], reply_expected=False))

    async def _effect(self, conversation: Conversation, item: InboxItem) -> None:
        if not await self.pipeline.exists(conversation):
            self.metrics.events.labels(item.kind, "ignored").inc()
            return
        appended = await self.pipeline.submit_item(conversation, item)
        self.metrics.events.labels(item.kind, "recorded" if appended else "duplicate").inc()
        if appended:
            self.worker.kick(conversation)


def _assistant_thread(body: dict[str, Any], thread: dict[str, Any]) -> Conversation:
    """The conversation of an assistant thread an ``assistant_thread_*`` event names (always in the bot's DM)."""
    return Conversation.slack(body.get("team_id", "T"), thread["channel_id"], thread["thread_ts"], "dm")


def _team_of(body: dict[str, Any]) -> str | None:
    """The workspace a request comes from: an event's ``team_id``, an interaction's ``team.id``."""
    team = body.get("team_id") or (body.get("team") or {}).get("id") if isinstance(body, dict) else None
    return team if isinstance(team, str) and team else None
