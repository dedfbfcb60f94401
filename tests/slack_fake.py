"""A loopback fake of the Slack Web API (and Socket Mode) that records every call."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

BOT_USER = "UBOT"


class FakeSlack:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.times: list[float] = []
        """monotonic time of each call, in the order of ``calls``."""
        self.rate_limit: dict[str, int] = {}
        """method → how many more calls answer 429 with Retry-After: 1."""
        self.rate_limit_calls: dict[str, set[int]] = {}
        """method → which of its calls (1 = the first) answer 429 with Retry-After: 1."""
        self.server: TestServer | None = None
        self.sockets: list[web.WebSocketResponse] = []
        self.acks: list[str] = []
        self.connected = asyncio.Event()
        self.workspaces: dict[str, dict[str, str]] = {}
        """bot token → {"team_id", "user_id", "bot_id"} for workspaces installed through OAuth (auth.test
        answers for the token it is called with; any other token is workspace T1's bot)."""
        self.codes: dict[str, str] = {}
        """OAuth code → the team whose install it completes (oauth.v2.access)."""
        self.tokens: list[tuple[str, str]] = []
        """(method, bot token) of every call."""
        self.people: dict[str, str] = {}
        """user id → display name answered by users.info (others: user_not_found)."""
        self.zones: dict[str, str] = {}
        """user id → the time zone users.info gives them (``tz``, an IANA name); none for others."""
        self.admins: set[str] = set()
        """user ids users.info calls admins of the workspace (``is_admin``); they are found even if not in
        ``people``."""
        self.homes: dict[str, dict[str, Any]] = {}
        """user id → the Home view last published for them (views.publish)."""
        self._ts = 1800000000.0
        self.channels: dict[str, list[dict[str, Any]]] = {}
        """channel → its top-level messages posted by the bot (conversations.history)."""
        self.threads: dict[tuple[str, str], list[dict[str, Any]]] = {}
        """(channel, thread ts) → its messages, answered by conversations.replies in pages."""
        self.delays: dict[str, float] = {}
        """method → seconds it takes to answer (a slow Slack)."""
        self.stalls: dict[str, asyncio.Event] = {}
        """method → an event its calls wait for; a call whose client is gone by then does nothing."""
        self.holds: dict[str, asyncio.Event] = {}
        """method → an event the answer to its calls waits for, after Slack did what was asked (a worker killed
        meanwhile never hears that it was done)."""
        self.answer_delays: dict[str, float] = {}
        """method (chat.postMessage, chat.startStream) → seconds its answer takes after Slack did what was asked (a
        worker killed meanwhile never hears the message's ts)."""
        self.refuse_streaming = False
        """chat.startStream answers an error, as in a workspace where streaming is not available."""
        self.deleted: list[str] = []
        """ts of every message deleted with chat.delete."""
        self.drop_posts = 0
        """How many of the next chat.postMessage calls are accepted (the message is posted) and then answered by
        dropping the connection, as when a network fails after Slack did the work."""
        self.drop_starts = 0
        """How many of the next chat.startStream calls are accepted (the stream begins) and then answered by dropping
        the connection."""
        self.read_lag = 0.0
        """Seconds a posted message takes to show in conversations.replies and conversations.history (Slack's
        reads can lag its writes)."""
        self.drops: dict[str, int] = {}
        """method (chat.appendStream, chat.stopStream, chat.update, chat.delete) → how many of its next calls are
        done (as far as they can be) and then answered by dropping the connection."""
        self.drop_every: int | None = None
        """Every n-th chat.postMessage call (1 = the first) is accepted and then its connection dropped."""
        self.failures: dict[str, int] = {}
        """method → how many of its next calls answer HTTP 500 without doing anything."""
        self.fail_every: int | None = None
        """Every n-th chat.postMessage call (1 = the first) is answered HTTP 500 without posting anything."""
        self.failed = 0
        """How many calls were answered HTTP 500 (``failures`` and ``fail_every``)."""
        self.dropped: list[str] = []
        """ts of every message whose post was accepted but never answered."""
        self.private: set[str] = set()
        """Channels conversations.info calls private."""
        self.members: dict[str, list[str]] = {}
        """channel → the user ids conversations.members answers."""
        self.refused: set[str] = set()
        """Tokens Slack refuses (``invalid_auth``), bot or app-level: a revoked or mistyped token."""
        self.scopes: list[str] | None = None
        """The scopes auth.test says the bot token has (its ``x-oauth-scopes`` header); None: every scope the
        manifest asks for."""
        self.tiers: dict[str, tuple[float, int]] = {}
        """method → (seconds, messages): one call per that many seconds, answered 429 with ``Retry-After`` (the
        seconds left, rounded up) inside them, and at most that many messages a call, as Slack limits
        ``conversations.replies`` for distributed apps not on the Marketplace (60 s, 15)."""
        self._tier_last: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        """method → the error every call of it answers (``{"ok": false, "error": …}``), as Slack refuses a method
        an app may not use."""

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/api/"))

    async def start(self) -> FakeSlack:
        app = web.Application()
        app.router.add_post("/api/{method}", self.api)
        app.router.add_get("/api/{method}", self.api)
        app.router.add_get("/socket", self.socket)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    async def close(self) -> None:
        for ws in self.sockets:
            await ws.close()
        if self.server is not None:
            await self.server.close()

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    def first_call_at(self, method: str) -> float | None:
        return next((t for (name, _), t in zip(self.calls, self.times) if name == method), None)

    async def api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.method == "GET":
            params = dict(request.query)
        elif request.content_type == "application/json":
            params = await request.json()
        else:
            params = {**dict(request.query), **dict(await request.post())}  # slack-sdk sends some in the query
        self.calls.append((method, params))
        self.times.append(time.monotonic())
        nth = len(self.calls_to(method))  # this call's number among the calls of its method, as they arrived
        if self.delays.get(method):
            await asyncio.sleep(self.delays[method])
        if method in self.stalls:
            await self.stalls[method].wait()
            if request.transport is None or request.transport.is_closing():
                return web.json_response({"ok": False, "error": "client_gone"})
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.tokens.append((method, token))
        if method in self.errors:
            return web.json_response({"ok": False, "error": self.errors[method]})
        failing = self.failures.get(method, 0) > 0
        if failing or (method == "chat.postMessage" and self.fail_every and nth % self.fail_every == 0):
            if failing:
                self.failures[method] -= 1
            self.failed += 1
            return web.json_response({"ok": False, "error": "fatal_error"}, status=500)
        if nth in self.rate_limit_calls.get(method, ()):
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"})
        if method in self.tiers:
            seconds, _ = self.tiers[method]
            now, last = time.monotonic(), self._tier_last.get(method)
            if last is not None and now - last < seconds:
                left = max(1, int(-(-(seconds - (now - last)) // 1)))
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                         headers={"Retry-After": str(left)})
            self._tier_last[method] = now
        if self.rate_limit.get(method, 0) > 0:
            self.rate_limit[method] -= 1
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"})
        app_token = str(params.get("app_token") or "")
        if token in self.refused or (method == "apps.connections.open" and (app_token or token) in self.refused):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if method == "auth.test":
            from threadkeeper.bot.manifest import BOT_SCOPES

            ws = self.workspaces.get(token, {"team_id": "T1", "user_id": BOT_USER, "bot_id": "BBOT"})
            scopes = ",".join(self.scopes if self.scopes is not None else BOT_SCOPES)
            return web.json_response({"ok": True, **ws, "user": "threadkeeper", "team": ws["team_id"]},
                                     headers={"x-oauth-scopes": scopes})
        if method == "oauth.v2.access":
            team = self.codes.pop(params.get("code", ""), None)
            if team is None:
                return web.json_response({"ok": False, "error": "invalid_code"})
            bot_token = f"xoxb-{team}"
            self.workspaces[bot_token] = {"team_id": team, "user_id": f"UBOT{team}", "bot_id": f"BBOT{team}"}
            return web.json_response({"ok": True, "access_token": bot_token, "token_type": "bot",
                                      "scope": "app_mentions:read,chat:write", "bot_user_id": f"UBOT{team}",
                                      "app_id": "A1", "team": {"id": team, "name": f"Team {team}"},
                                      "enterprise": None, "is_enterprise_install": False,
                                      "authed_user": {"id": "U1"}})
        if method in ("chat.postMessage", "chat.startStream"):
            if method == "chat.startStream" and self.refuse_streaming:
                return web.json_response({"ok": False, "error": "feature_not_enabled"})
            self._ts += 1
            ts = f"{self._ts:.6f}"
            text = params.get("text") if method == "chat.postMessage" else _streamed(params)
            posted = {"type": "message", "user": BOT_USER, "bot_id": "BBOT", "text": text, "ts": ts,
                      "blocks": params.get("blocks"), "streaming": method == "chat.startStream",
                      "_at": time.monotonic()}
            _set_metadata(posted, params)
            if params.get("thread_ts"):
                self.threads.setdefault((params.get("channel", ""), params["thread_ts"]), []).append(
                    dict(posted, thread_ts=params["thread_ts"]))
            else:
                self.channels.setdefault(params.get("channel", ""), []).append(posted)
            if method in self.holds:
                await self.holds[method].wait()
            if self.answer_delays.get(method):
                await asyncio.sleep(self.answer_delays[method])
            posting = method == "chat.postMessage"
            if (self.drop_posts > 0 or (self.drop_every and nth % self.drop_every == 0)) if posting else \
                    self.drop_starts > 0:
                if posting:
                    self.drop_posts = max(0, self.drop_posts - 1)
                else:
                    self.drop_starts -= 1
                self.dropped.append(ts)
                assert request.transport is not None
                request.transport.abort()  # posted, but the answer never reaches the caller
                return web.Response(status=204)
            return web.json_response({"ok": True, "channel": params.get("channel"), "ts": ts,
                                      "message": {"text": text}})
        if method in ("chat.appendStream", "chat.stopStream", "chat.update", "chat.delete"):
            answer = self._edit(method, params)
            if self.drops.get(method, 0) > 0:
                self.drops[method] -= 1
                assert request.transport is not None
                request.transport.abort()  # done, but the answer never reaches the caller
                return web.Response(status=204)
            return web.json_response(answer)
        if method == "conversations.history":
            shown = [_as_listed(m, params) for m in reversed(self.channels.get(params.get("channel", ""), []))
                     if self._readable(m)]
            return web.json_response({"ok": True, "messages": shown, "has_more": False})
        if method == "users.info":
            user = params.get("user", "")
            if user in self.people or user in self.admins:
                return web.json_response({"ok": True, "user": {
                    "id": user, "name": user.lower(), "is_admin": user in self.admins, "is_owner": False,
                    "profile": {"display_name": self.people.get(user, user.lower())},
                    **({"tz": self.zones[user]} if user in self.zones else {})}})
            return web.json_response({"ok": False, "error": "user_not_found"})
        if method == "conversations.replies":
            messages = self.threads.get((params.get("channel", ""), params.get("ts", "")))
            if messages is None:
                return web.json_response({"ok": False, "error": "thread_not_found"})
            start, limit = int(params.get("cursor") or 0), int(params.get("limit") or 100)
            if method in self.tiers:
                limit = min(limit, self.tiers[method][1])
            messages = [m for m in messages if self._readable(m)]
            page = [_as_listed(m, params) for m in messages[start:start + limit]]
            more = start + limit < len(messages)
            return web.json_response({"ok": True, "messages": page, "has_more": more,
                                      "response_metadata": {"next_cursor": str(start + limit) if more else ""}})
        if method == "chat.getPermalink":
            channel, ts = params.get("channel", ""), params.get("message_ts", "")
            if self.find(channel, ts) is None:
                return web.json_response({"ok": False, "error": "message_not_found"})
            return web.json_response({"ok": True, "channel": channel,
                                      "permalink": f"https://fake.slack.test/archives/{channel}/p{ts.replace('.', '')}"})
        if method == "conversations.info":
            channel = params.get("channel", "")
            return web.json_response({"ok": True, "channel": {"id": channel, "is_im": channel.startswith("D"),
                                                              "is_private": channel in self.private}})
        if method == "conversations.members":
            return web.json_response({"ok": True, "members": self.members.get(params.get("channel", ""), []),
                                      "response_metadata": {"next_cursor": ""}})
        if method == "views.publish":
            view = params.get("view")
            self.homes[str(params.get("user_id", ""))] = json.loads(view) if isinstance(view, str) else view
            return web.json_response({"ok": True, "view": {"id": "V1"}})
        if method == "apps.connections.open":
            assert self.server is not None
            url = str(self.server.make_url("/socket")).replace("http://", "ws://")
            return web.json_response({"ok": True, "url": url})
        return web.json_response({"ok": True})

    def _edit(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Do what chat.appendStream, chat.stopStream, chat.update or chat.delete asks; the answer."""
        found = self.find(params.get("channel", ""), params.get("ts", ""))
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        where, message = found
        if method == "chat.delete":
            where.remove(message)
            self.deleted.append(message["ts"])
        elif method == "chat.update":
            message.update(text=params.get("text"), blocks=params.get("blocks"))
            _set_metadata(message, params)
        else:
            if not message.get("streaming"):
                return {"ok": False, "error": "message_not_in_streaming_state"}
            message["text"] = (message.get("text") or "") + _streamed(params)
            if method == "chat.stopStream":
                message.update(streaming=False, blocks=params.get("blocks"))
                _set_metadata(message, params)
        return {"ok": True, "channel": params.get("channel"), "ts": message["ts"]}

    def _readable(self, message: dict[str, Any]) -> bool:
        return time.monotonic() - message.get("_at", 0.0) >= self.read_lag

    def find(self, channel: str, ts: str) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        """The list holding the message ``ts`` of ``channel`` (its thread or the channel), and the message."""
        lists = [m for (c, _), m in self.threads.items() if c == channel] + [self.channels.get(channel, [])]
        for messages in lists:
            for message in messages:
                if message["ts"] == ts:
                    return messages, message
        return None

    def bot_messages(self, channel: str, thread_ts: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages in a thread (or at the top level of a channel) as they now stand."""
        messages = self.threads.get((channel, thread_ts), []) if thread_ts else self.channels.get(channel, [])
        return [m for m in messages if m.get("user") == BOT_USER]

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1, "debug_info": {}, "connection_info": {}})
        self.connected.set()
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                data = json.loads(msg.data)
                if "envelope_id" in data:
                    self.acks.append(data["envelope_id"])
        return ws

    async def push_event(self, envelope_id: str, body: dict[str, Any]) -> None:
        await self.connected.wait()
        await self.sockets[-1].send_json({"envelope_id": envelope_id, "type": "events_api", "payload": body,
                                          "accepts_response_payload": False, "retry_attempt": 0,
                                          "retry_reason": ""})


def _as_listed(message: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A message as conversations.history/replies list it: its metadata only when asked for."""
    listed = {k: v for k, v in message.items() if k != "_at"}
    if str(params.get("include_all_metadata", "")).lower() in ("1", "true"):
        return listed
    return {k: v for k, v in listed.items() if k != "metadata"}


def _set_metadata(message: dict[str, Any], params: dict[str, Any]) -> None:
    """The metadata a call gives a message (chat.postMessage, chat.update, chat.stopStream), if it gives any."""
    metadata = params.get("metadata")
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    if metadata:
        message["metadata"] = metadata


def _streamed(params: dict[str, Any]) -> str:
    """The markdown a streaming call adds, sent as ``markdown_text`` or as markdown chunks."""
    chunks = params.get("chunks") or []
    if isinstance(chunks, str):
        chunks = json.loads(chunks)
    return (params.get("markdown_text") or "") + "".join(c.get("text", "") for c in chunks
                                                         if c.get("type") == "markdown_text")


def sign(secret: str, body: str | bytes, timestamp: int | None = None) -> dict[str, str]:
    """Slack's headers for ``body`` (its bytes as sent: a string is sent as UTF-8)."""
    ts = str(timestamp if timestamp is not None else int(time.time()))
    sent = body.encode() if isinstance(body, str) else body
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + sent, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}", "Content-Type": "application/json"}


def event_body(event: dict[str, Any], *, event_id: str, team: str = "T1") -> dict[str, Any]:
    return {"token": "unused", "team_id": team, "api_app_id": "A1", "type": "event_callback", "event_id": event_id,
            "event_time": int(time.time()), "event": event, "authorizations": [{"user_id": BOT_USER,
                                                                                "is_bot": True, "team_id": team,
                                                                                "enterprise_id": None,
                                                                                "is_enterprise_install": False}]}
