"""A loopback model server for tests: OpenAI-compatible (``/v1/chat/completions``) and Ollama-compatible
(``/api/chat``), logging every request, answering from a script (text, usage, finish reason or an error)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    text: str = "ok"
    prompt_tokens: int = 100
    completion_tokens: int = 5
    finish_reason: str = "stop"
    status: int = 200
    error: dict[str, Any] | None = None
    """An error body (``{"error": {...}}``) sent with ``status``."""
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers (``Retry-After`` with a 429)."""
    delay: float = 0.0
    """Seconds to wait before answering (a hung provider: longer than the client's timeout)."""


@dataclass
class ModelServer:
    replies: deque[Reply] = field(default_factory=deque)
    default: Reply = field(default_factory=Reply)
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None

    def push(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def _next(self) -> Reply:
        return self.replies.popleft() if self.replies else self.default

    async def _openai(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.paths.append(request.path)
        reply = self._next()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None:
            return web.json_response(reply.error, status=reply.status, headers=reply.headers)
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "test"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                         "finish_reason": reply.finish_reason}],
            "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens}})

    async def _ollama(self, request: web.Request) -> web.Response:
        body = json.loads(await request.text())
        self.requests.append(body)
        self.paths.append(request.path)
        reply = self._next()
        if reply.error is not None:
            return web.json_response(reply.error, status=reply.status)
        return web.json_response({
            "model": body.get("model", "test"), "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": reply.text}, "done": True, "done_reason": reply.finish_reason,
            "prompt_eval_count": reply.prompt_tokens, "eval_count": reply.completion_tokens})

    async def start(self) -> ModelServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/chat/completions", self._openai)
        app.router.add_post("/api/chat", self._ollama)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
