"""A scripted model behind litellm's custom-provider interface, and helpers to build test pipelines."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import fakeredis

from threadkeeper.services.models._litellm import (  # isort: skip (first: it configures litellm before litellm is imported)
    register_provider,
)
from litellm import CustomLLM, ModelResponse  # noqa: E402  # isort: skip
from threadkeeper.root import Stores, build_pipeline, build_stores
from threadkeeper.services.models import Tokenizer
from threadkeeper.settings import Settings


@dataclass
class Step:
    """One scripted model response."""

    text: str = ""
    tool_calls: list[tuple[str, str]] = field(default_factory=list)
    """(name, JSON arguments) pairs."""
    error: BaseException | None = None
    delay: float = 0.0
    wait_for: asyncio.Event | None = None
    started: asyncio.Event | None = None
    usage: tuple[int, int] | None = None
    """(prompt tokens, completion tokens); default: rough counts."""
    finish_reason: str | None = None
    """What the provider says ended the output (default: ``stop``, or ``tool_calls`` with tool calls)."""


async def until(done: Callable[[], Awaitable[bool] | bool], seconds: float, why: str | Callable[[], str], *,
                every: float = 0.02) -> None:
    """Wait until ``done()`` (a value or an awaitable) holds, checking every ``every`` seconds; fail with ``why`` (or
    what ``why()`` says then: worker logs, say) after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        result = done()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, why if isinstance(why, str) else why()
        await asyncio.sleep(every)


def free_port() -> int:
    """A loopback port free now (bound, then released), for a server a test starts."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_COUNTER = Tokenizer("gpt-4o")


class ScriptedModel(CustomLLM):
    def __init__(self) -> None:
        super().__init__()
        self.script: deque[Step] = deque()
        self.requests: list[dict[str, Any]] = []
        self.default = Step(text="ok")
        self.usage_scale = 1.0
        """Prompt tokens are reported as this multiple of the local count (a provider that counts differently)."""

    def push(self, *steps: Step) -> None:
        self.script.extend(steps)

    async def astreaming(self, model: str, messages: list, *args: Any, **kwargs: Any):  # type: ignore[override]
        """The same reply streamed, as litellm's custom providers stream: a word per chunk, then each tool
        call, then the finish reason and usage."""
        response = await self.acompletion(model, messages, *args, **kwargs)
        choice = response.choices[0]
        text = choice.message.content or ""
        words = text.split(" ")
        for i, word in enumerate(words):
            yield {"text": word if i == 0 else " " + word, "tool_use": None, "is_finished": False,
                   "finish_reason": "", "usage": None, "index": 0}
        for i, call in enumerate(choice.message.tool_calls or []):
            yield {"text": "", "is_finished": False, "finish_reason": "", "usage": None, "index": 0,
                   "tool_use": {"id": call.id, "type": "function", "index": i,
                                "function": {"name": call.function.name, "arguments": call.function.arguments}}}
        usage = response.usage
        yield {"text": "", "tool_use": None, "is_finished": True, "finish_reason": choice.finish_reason,
               "index": 0, "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                                     "total_tokens": usage.total_tokens}}

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        optional = kwargs.get("optional_params") or (args[7] if len(args) > 7 else {})
        metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
        self.requests.append({"messages": messages, "tools": (optional or {}).get("tools"),
                              "kind": metadata.get("threadkeeper_kind"), "window": metadata.get("threadkeeper_window")})
        step = self.script.popleft() if self.script else self.default
        if step.started:
            step.started.set()
        if step.wait_for:
            await step.wait_for.wait()
        if step.delay:
            await asyncio.sleep(step.delay)
        if step.error is not None:
            raise step.error
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if step.tool_calls:
            message["tool_calls"] = [{"id": f"call_{len(self.requests)}_{i}", "type": "function",
                                      "function": {"name": n, "arguments": a}}
                                     for i, (n, a) in enumerate(step.tool_calls)]
        if step.usage is not None:
            prompt, completion = step.usage
        else:  # counted like the provider would: every message and the tool schemas
            tools = (optional or {}).get("tools") or []
            prompt = round(self.usage_scale * (_COUNTER.count_chat(messages) + _COUNTER.count_tools(tools)))
            completion = 5
        return ModelResponse(model=model, choices=[{"index": 0, "message": message,
                                                    "finish_reason": step.finish_reason or
                                                    ("tool_calls" if step.tool_calls else "stop")}],
                             usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                    "total_tokens": prompt + completion})


def scripted(provider: str = "scripted") -> ScriptedModel:
    """A fresh scripted model answering for ``<provider>/<any name>``."""
    model = ScriptedModel()
    register_provider(provider, model)
    return model


def settings(prefix: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {"threadkeeper_key_prefix": prefix, "ai_model": "scripted/test",
                            "ai_model_context_window_tokens": 16_000, "ai_retry_attempts": 1,
                            "ai_timeout_seconds": 5.0, "redis_url": None}
    base.update(overrides)
    return Settings(_env_file=None, **base)  # type: ignore[call-arg]


def stores(prefix: str, client: Any = None, **overrides: Any) -> Stores:
    client = client or fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    return build_stores(settings(prefix, **overrides), client=client)


def pipeline(prefix: str, client: Any = None, **kwargs: Any):  # type: ignore[no-untyped-def]
    overrides = kwargs.pop("settings", {})
    st = stores(prefix, client, **overrides)
    return build_pipeline(settings(prefix, **overrides), st, retry_wait_seconds=0.01, **kwargs), st


async def written(p: Any, conversation_id: str, text: str) -> str:
    """``text`` with each short reference (``#N``) written out as the message id it stands for."""
    from threadkeeper.services.context import REF

    references = await p.references(conversation_id)
    return REF.sub(lambda m: references.get(m.group(0), m.group(0)), text)


def fields_read(recall: Any, monkeypatch: Any) -> list[list[str]]:
    """The fields of the ``:recall`` hash that ``recall`` reads from now on, one list per read (a round trip)."""
    asked: list[list[str]] = []
    real = recall.epochs.get

    async def get(conversation_id: str, fields: list[str]) -> dict[str, bytes]:
        asked.append(list(fields))
        return await real(conversation_id, fields)

    monkeypatch.setattr(recall.epochs, "get", get)
    return asked


@contextmanager
def counted_commands(client: Any, *, pipelines: bool = False) -> Iterator[list[str]]:
    """The names of the Redis commands ``client`` sends while the block runs, in order; with ``pipelines``, each
    command a pipeline carries counts too (else a pipeline is not counted)."""
    sent: list[str] = []
    original = client.execute_command
    original_pipeline = client.pipeline

    async def counted(*args: Any, **kwargs: Any) -> Any:
        sent.append(str(args[0]))
        return await original(*args, **kwargs)

    def pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = original_pipeline(*args, **kwargs)
        execute = pipe.execute

        async def counted_execute(*a: Any, **k: Any) -> Any:
            sent.extend(str(command[0][0]) for command in pipe.command_stack)
            return await execute(*a, **k)

        pipe.execute = counted_execute
        return pipe

    client.execute_command = counted
    if pipelines:
        client.pipeline = pipeline
    try:
        yield sent
    finally:
        del client.execute_command
        if pipelines:
            del client.pipeline


class Paused:
    """A writer of memory stopped between its read and its write: ``reached`` is set when it calls the store's
    method, which runs once ``go`` is set (only the first call waits)."""

    def __init__(self, store: Any, method: str) -> None:
        self.reached, self.go = asyncio.Event(), asyncio.Event()
        original: Callable[..., Awaitable[Any]] = getattr(store, method)
        first = [True]

        async def paused(*args: Any, **kwargs: Any) -> Any:
            if first[0]:
                first[0] = False
                self.reached.set()
                await self.go.wait()
            return await original(*args, **kwargs)

        setattr(store, method, paused)

    async def during(self, writer: Awaitable[Any], retraction: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``writer`` up to its write, then ``retraction``, then let the write go on."""
        task = asyncio.ensure_future(writer)
        await asyncio.wait_for(self.reached.wait(), 30)
        await retraction()
        self.go.set()
        return await task


@contextmanager
def round_trips(client: Any) -> Iterator[list[str]]:
    """The round trips to Redis ``client`` makes while the block runs, in order, each named by its first command
    (a pipeline or a transaction is one round trip, named ``PIPELINE(n)``): counted where a request leaves for the
    server, whichever of the client's paths sent it."""
    sent: list[str] = []
    pool = client.connection_pool
    original = pool.get_connection

    def name(packed: Any) -> str:
        data = packed if isinstance(packed, (bytes, str)) else b"".join(packed)
        text = data.decode(errors="replace") if isinstance(data, bytes) else data
        parts = text.split("\r\n")
        commands = text.count("\r\n*") + 1
        if commands > 1:
            return f"PIPELINE({commands}: " + " ".join(parts[i].upper() for i in range(2, len(parts), 2)
                                                        if parts[i - 2].startswith("*")) + ")"
        return parts[2].upper() + (f" {parts[4]}" if len(parts) > 4 else "")

    def watch(connection: Any) -> Any:
        if getattr(connection, "_round_trips", None) is not sent:
            send = type(connection).send_packed_command.__get__(connection)

            async def counted(command: Any, check_health: bool = True) -> None:
                sent.append(name(command))
                await send(command, check_health)

            connection.send_packed_command = counted
            connection._round_trips = sent
        return connection

    async def get_connection(*args: Any, **kwargs: Any) -> Any:
        return watch(await original(*args, **kwargs))

    pool.get_connection = get_connection
    try:
        yield sent
    finally:
        del pool.get_connection
        for connection in [*pool._available_connections, *pool._in_use_connections]:
            if getattr(connection, "_round_trips", None) is sent:
                del connection.send_packed_command, connection._round_trips
