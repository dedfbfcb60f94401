"""A loopback model server for tests: OpenAI-compatible (``/v1/chat/completions``, ``/v1/embeddings``) and
Ollama-compatible (``/api/chat``, ``/api/embed``), logging every request, answering chat from a script (text, tool
calls, usage, finish reason or an error), whole or streamed (server-sent events for OpenAI, JSON lines for Ollama) as
the request asks, and embeddings with a deterministic toy model (:func:`toy_embedding`)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import struct
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
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """(name, JSON arguments) of each tool call the reply makes."""
    chunk_delay: float = 0.0
    """Seconds between streamed chunks (a model that writes slowly)."""
    fail_after_chunks: int | None = None
    """Streamed: drop the connection after this many text chunks (a stream cut mid-reply)."""

    def pieces(self) -> list[str]:
        """The text as a streaming provider sends it: a word (with its leading space) per chunk."""
        words = self.text.split(" ")
        return [w if i == 0 else " " + w for i, w in enumerate(words) if w or i == 0]


SYNONYMS = {word: concept for concept, words in {
    "craft": "hobby hobbies pastime pottery ceramics clay kiln",
    "vehicle": "car cars vehicle automobile sedan",
    "money": "budget cost costs price spend euros dollars",
}.items() for word in words.split()}
"""Words the toy model places together: a question and a message that share none of their words but a concept are
near each other (what BM25 cannot see)."""
_STOP = frozenset("the and for are was what which did does she her his him they them you your our with from this "
                  "that have has had any about".split())


def toy_embedding(text: str, dims: int = 256) -> list[float]:
    """A deterministic embedding: each content word (by its concept in :data:`SYNONYMS`) hashed into one of ``dims``
    signed buckets, plus a small constant component (no text is the zero vector)."""
    vector = [0.0] * dims
    vector[0] = 0.05
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if len(word) < 3 or word in _STOP:
            continue
        digest = hashlib.blake2b(SYNONYMS.get(word, word).encode(), digest_size=8).digest()
        vector[1 + int.from_bytes(digest[:4], "little") % (dims - 1)] += 1.0 if digest[4] & 1 else -1.0
    return vector


@dataclass
class ModelServer:
    replies: deque[Reply] = field(default_factory=deque)
    default: Reply = field(default_factory=Reply)
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    sent: list[tuple[float, str]] = field(default_factory=list)
    """(monotonic time, text) of every streamed text chunk, so a test can tell what arrived before what."""
    hung_up: list[float] = field(default_factory=list)
    """When a caller hung up on a streamed reply before its end (monotonic time), one entry per stream cut."""
    embedded: list[list[str]] = field(default_factory=list)
    """The texts of each embedding request, in order."""
    embed_dims: int = 256
    embed_error: Reply | None = None
    """Every embedding request is answered with this reply's ``status`` and ``error`` body while it is set."""
    embed_wrong: int | None = None
    """Answer embeddings of this many dimensions instead (a misconfigured server)."""
    embed_delay: float = 0.0
    """Seconds to wait before answering an embedding request (a hung server: longer than the client's timeout)."""

    def push(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def _next(self) -> Reply:
        return self.replies.popleft() if self.replies else self.default

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.paths.append(request.path)
        reply = self._next()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.error is not None:
            return web.json_response(reply.error, status=reply.status, headers=reply.headers)
        head = {"id": f"chatcmpl-{len(self.requests)}", "created": int(time.time()), "model": body.get("model", "test")}
        usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                 "total_tokens": reply.prompt_tokens + reply.completion_tokens}
        calls = [{"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
                 for i, (name, arguments) in enumerate(reply.tool_calls)]
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if calls:
                message["tool_calls"] = calls
            return web.json_response({**head, "object": "chat.completion", "usage": usage,
                                      "choices": [{"index": 0, "message": message,
                                                   "finish_reason": reply.finish_reason}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            chunk = {**head, "object": "chat.completion.chunk", **extra,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else []}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

        await event({"role": "assistant", "content": ""})
        try:
            for n, piece in enumerate(reply.pieces() if reply.text else []):
                if reply.fail_after_chunks is not None and n >= reply.fail_after_chunks:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                self.sent.append((time.monotonic(), piece))
                await event({"content": piece})
        except (asyncio.CancelledError, ConnectionResetError):  # the caller hung up (the handler is cancelled)
            self.hung_up.append(time.monotonic())
            raise
        for i, call in enumerate(calls):  # a call's name first, then its arguments in two pieces
            arguments = call["function"]["arguments"]
            await event({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]})
            for part in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2:]):
                await event({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
        await event({}, reply.finish_reason)
        if (body.get("stream_options") or {}).get("include_usage"):
            await event({}, None, usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _ollama(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.text())
        self.requests.append(body)
        self.paths.append(request.path)
        reply = self._next()
        if reply.error is not None:
            return web.json_response(reply.error, status=reply.status)
        head = {"model": body.get("model", "test"), "created_at": "2026-01-01T00:00:00Z"}
        done = {**head, "done": True, "done_reason": reply.finish_reason,
                "prompt_eval_count": reply.prompt_tokens, "eval_count": reply.completion_tokens}
        if body.get("stream") is False:
            return web.json_response({**done, "message": {"role": "assistant", "content": reply.text}})
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for piece in reply.pieces():
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            self.sent.append((time.monotonic(), piece))
            line = {**head, "message": {"role": "assistant", "content": piece}, "done": False}
            await response.write((json.dumps(line) + "\n").encode())
        await response.write((json.dumps({**done, "message": {"role": "assistant", "content": ""}}) + "\n").encode())
        await response.write_eof()
        return response

    async def _vectors(self, request: web.Request, texts: list[str]) -> list[list[float]] | web.Response:
        self.paths.append(request.path)
        self.embedded.append(texts)
        if self.embed_delay:
            await asyncio.sleep(self.embed_delay)
        if self.embed_error is not None:
            return web.json_response(self.embed_error.error or {"error": {"message": "refused"}},
                                     status=self.embed_error.status)
        return [toy_embedding(t, self.embed_wrong or self.embed_dims) for t in texts]

    async def _openai_embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
        vectors = await self._vectors(request, texts)
        if isinstance(vectors, web.Response):
            return vectors
        def encoded(v: list[float]) -> object:  # the OpenAI SDK asks for base64 unless told otherwise
            return base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode() \
                if body.get("encoding_format") == "base64" else v
        return web.json_response({"object": "list", "model": body.get("model", "test"),
                                  "data": [{"object": "embedding", "index": i, "embedding": encoded(v)}
                                           for i, v in enumerate(vectors)],
                                  "usage": {"prompt_tokens": 3 * len(texts), "total_tokens": 3 * len(texts)}})

    async def _ollama_embed(self, request: web.Request) -> web.Response:
        body = json.loads(await request.text())
        texts = [body["input"]] if isinstance(body["input"], str) else list(body["input"])
        vectors = await self._vectors(request, texts)
        if isinstance(vectors, web.Response):
            return vectors
        return web.json_response({"model": body.get("model", "test"), "embeddings": vectors,
                                  "prompt_eval_count": 3 * len(texts)})

    async def start(self) -> ModelServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/chat/completions", self._openai)
        app.router.add_post("/api/chat", self._ollama)
        app.router.add_post("/v1/embeddings", self._openai_embeddings)
        app.router.add_post("/embeddings", self._openai_embeddings)
        app.router.add_post("/api/embed", self._ollama_embed)
        self._runner = web.AppRunner(app, handler_cancellation=True)  # a caller that hangs up ends its request
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
