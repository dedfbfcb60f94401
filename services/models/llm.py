"""The one wrapper every model call goes through: litellm, timeouts, retries, usage.

Every provider is called through litellm. The offline model is no provider: it answers in-process, and a
worker that runs only it never imports litellm (``services._litellm`` is imported on first use)."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential
from tenacity.wait import wait_base

from threadkeeper.persistence import ThreadkeeperError, Usage

from .budget import is_offline, resolve_max_output

if TYPE_CHECKING:
    from .offline import OfflineModel

log = logging.getLogger("threadkeeper.llm")


class ModelError(ThreadkeeperError):
    """A model call failed for good (after retries)."""


class ModelTimeoutError(ModelError):
    """A model call did not answer in time."""


class ModelSetupError(ModelError):
    """The provider refuses the model's configuration for good: a key it does not accept (401) or that may not use the
    model (403), a model it does not serve (404). Asking again cannot help, so it is never retried; the message is one
    line naming the setting to fix."""


_KEY_VARIABLES = {"gemini": "GEMINI_API_KEY", "vertex_ai": "GOOGLE_APPLICATION_CREDENTIALS",
                  "bedrock": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                  "sagemaker": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"}
"""Providers whose key is not ``<PROVIDER>_API_KEY``, as litellm reads it."""


def key_variable(provider: str) -> str:
    """The variable litellm reads the provider's key from."""
    return _KEY_VARIABLES.get(provider, f"{provider.upper()}_API_KEY")


def _said(exc: BaseException) -> str:
    """The first line of what the provider said, without litellm's prefixes, bounded."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return text.removeprefix("litellm.").split(" - ", 1)[-1][:200]


def refused(exc: Exception, model: str, setting: str) -> ModelSetupError:
    """The one line for a configuration the provider refuses (see :class:`ModelSetupError`): ``model`` as named by the
    variable ``setting``."""
    litellm = _litellm()
    named = f"{setting}={model!r}"
    said = _said(exc)
    code = getattr(exc, "status_code", None)  # (litellm maps some providers' 401 to another class)
    if isinstance(exc, litellm.NotFoundError) or code == 404:
        return ModelSetupError(f"{named}: the provider does not serve this model (404: {said}); set {setting} "
                               "to a model it serves")
    try:
        variable = key_variable(litellm.get_llm_provider(model)[1])
    except Exception:  # noqa: BLE001 - a model litellm routes only with more settings: name the key generally
        variable = "the provider's key variable"
    status = 403 if isinstance(exc, litellm.PermissionDeniedError) or code == 403 else 401
    what = "does not let the key use this model" if status == 403 else "refused the key"
    return ModelSetupError(f"{named}: the provider {what} ({status}: {said}); set {variable} to a valid key "
                           "(in the environment or .env)")


class ModelContextError(ModelError):
    """The provider refused the request as longer than the model's window (it counts tokens differently
    from the local estimate): the turn compacts tighter and tries once more."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ModelReply:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None
    model: str = ""
    cost_usd: float | None = None
    """What the call cost by litellm's price map (None: a model the map does not price)."""


class Draft(Protocol):
    """Where a reply's text goes while the model writes it (a transport that shows replies as they come)."""

    async def write(self, text: str) -> None:
        """The next piece of the reply."""

    async def discard(self) -> None:
        """What was written is not the reply after all (the call is retried, or it ends in tool calls)."""


def _litellm() -> Any:
    from ._litellm import litellm

    return litellm


def _transient(exc: BaseException) -> bool:
    litellm = _litellm()
    transient = (litellm.RateLimitError, litellm.APIConnectionError, litellm.InternalServerError,
                 litellm.ServiceUnavailableError, litellm.Timeout, asyncio.TimeoutError)
    return isinstance(exc, transient)


def retry_after(exc: BaseException | None) -> float | None:
    """The seconds a provider asked to wait before trying again (``Retry-After`` on a 429 or 503), if any."""
    for headers in (getattr(exc, "litellm_response_headers", None),
                    getattr(getattr(exc, "response", None), "headers", None)):
        value = headers.get("retry-after") if headers else None
        if value is not None:
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return None
    return None


class _Backoff(wait_base):
    """Exponential backoff with jitter, or the provider's ``Retry-After`` when it says more."""

    def __init__(self, multiplier: float) -> None:
        self.backoff = wait_random_exponential(multiplier=multiplier, max=20)

    def __call__(self, retry_state: RetryCallState) -> float:
        base = self.backoff(retry_state)
        asked = retry_after(retry_state.outcome.exception() if retry_state.outcome else None)
        return max(base, asked) if asked is not None else base


class RateLimitedError(ModelError):
    """The provider asked to wait longer than a model call may take."""


def extract_usage(response: Any) -> Usage | None:
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                 output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                 cached_tokens=int(cached or 0))


class ModelClient:
    """Async chat completions for one model: through litellm, or in-process for the offline model."""

    def __init__(self, model: str, *, timeout_seconds: float = 60.0, attempts: int = 3,
                 max_output_tokens: int | None = None, retry_wait_seconds: float = 1.0,
                 context_window: int | None = None, offline_model: OfflineModel | None = None,
                 setting: str = "AI_MODEL") -> None:
        self.model = model
        self.local: OfflineModel | None = None
        """The in-process model that answers when ``model`` is the offline one."""
        if is_offline(model):
            from .offline import OfflineModel

            self.local = offline_model or OfflineModel()
        self.output_limit = resolve_max_output(model, None)
        """The most output the model itself allows (litellm's model info), when known: requests are clamped to it."""
        self.context_window = context_window
        """The window the budget assumes; Ollama is told it (``num_ctx``), or it truncates at its own default."""
        self.timeout_seconds = timeout_seconds
        self.attempts = max(1, attempts)
        self.max_output_tokens = max_output_tokens
        self.retry_wait_seconds = retry_wait_seconds
        self.setting = setting
        """The variable that names this model (``AI_MODEL``, ``AI_FAST_MODEL``), for messages about it."""

    @property
    def offline(self) -> bool:
        return is_offline(self.model)

    @property
    def streams(self) -> bool:
        """Whether replies are streamed to a draft: every real model; the offline model answers at once."""
        return not self.offline

    async def complete(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                       max_output_tokens: int | None = None, timeout_seconds: float | None = None,
                       draft: Draft | None = None, kind: str = "turn", window: str | None = None) -> ModelReply:
        """One chat completion, retried with backoff on transient errors; raises :class:`ModelError`.

        ``kind`` (turn, compaction, memory, routing) and ``window`` (the conversation and the handoff generation
        its context starts from) travel as the request's litellm metadata, for the deployment's logging and
        callbacks; providers do not receive them.

        With a ``draft``, the reply is streamed and its text written there as it arrives (an attempt that
        fails after writing is discarded before the next). The offline model answers at once and is not
        streamed."""
        if self.local is not None:
            text, usage = await self.local.answer(messages, tools)
            return ModelReply(text=text, usage=usage, finish_reason="stop", model="offline/offline", cost_usd=0.0)
        litellm = _litellm()
        timeout = timeout_seconds or self.timeout_seconds
        # One retry layer (below): the provider SDK's own retries are off, or each attempt would be several.
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "timeout": timeout,
                                  "_skip_mcp_handler": True, "max_retries": 0,
                                  "metadata": {"threadkeeper_kind": kind,
                                               **({"threadkeeper_window": window} if window else {})}}
        if tools:
            kwargs["tools"] = tools
        limit = max_output_tokens or self.max_output_tokens
        if limit:
            kwargs["max_tokens"] = min(limit, self.output_limit) if self.output_limit else limit
        if self.context_window and self.model.split("/", 1)[0] in ("ollama", "ollama_chat"):
            kwargs["num_ctx"] = self.context_window
        sink = _Written(draft) if draft is not None and self.streams else None
        try:
            async for attempt in AsyncRetrying(stop=stop_after_attempt(self.attempts), reraise=True,
                                               wait=_Backoff(self.retry_wait_seconds),
                                               retry=retry_if_exception(_transient)):
                with attempt:
                    if sink is not None:
                        await sink.restart()
                    try:
                        call = self._streamed(kwargs, sink) if sink is not None else self._whole(kwargs)
                        return await asyncio.wait_for(call, timeout=timeout)
                    except litellm.RateLimitError as exc:
                        asked = retry_after(exc)
                        if asked is not None and asked > timeout:
                            raise RateLimitedError(f"model {self.model} is rate limited: the provider asks to retry "
                                                   f"after {asked:g}s, longer than a call may take ({timeout:g}s)"
                                                   ) from exc
                        raise
        except (asyncio.TimeoutError, litellm.Timeout) as exc:
            raise ModelTimeoutError(f"model {self.model} did not answer within {timeout:g}s "
                                    f"({self.attempts} attempts)") from exc
        except RateLimitedError:
            raise
        except litellm.ContextWindowExceededError as exc:
            raise ModelContextError(f"model {self.model} refused the request as too long: {exc}") from exc
        except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError) as exc:
            raise self._refused(exc) from exc
        except Exception as exc:  # litellm maps provider errors to its own hierarchy
            raise ModelError(f"model {self.model} failed: {type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable: the retry loop returns or raises")  # pragma: no cover

    def _refused(self, exc: Exception) -> ModelSetupError:
        return refused(exc, self.model, self.setting)

    async def _whole(self, kwargs: dict[str, Any]) -> ModelReply:
        litellm = _litellm()
        response = await litellm.acompletion(**kwargs)
        return self._reply(response, (getattr(response, "_hidden_params", None) or {}).get("response_cost"))

    async def _streamed(self, kwargs: dict[str, Any], sink: _Written) -> ModelReply:
        """A streamed call: text pieces go to the draft as they come; the chunks are then assembled by
        litellm into one response (text, tool calls, usage), exactly as a whole reply would be read."""
        litellm = _litellm()
        stream = await litellm.acompletion(**kwargs, stream=True, stream_options={"include_usage": True})
        chunks = []
        async for chunk in stream:
            chunks.append(chunk)
            delta = chunk.choices[0].delta if chunk.choices else None
            if delta is not None and delta.content:
                await sink.write(delta.content)
        if not chunks:
            raise ModelError(f"model {self.model} streamed nothing")
        response = litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])
        try:
            cost = litellm.completion_cost(completion_response=response, model=kwargs["model"])
        except Exception:  # noqa: BLE001 - a model the price map does not know has no cost, not a failure
            cost = None
        return self._reply(response, cost)

    def _reply(self, response: Any, cost: Any = None) -> ModelReply:
        choice = response.choices[0]
        message = choice.message
        calls: list[ToolCall] = []
        for raw in getattr(message, "tool_calls", None) or []:
            fn = raw.function
            arguments = fn.arguments if isinstance(fn.arguments, str) else json.dumps(fn.arguments)
            calls.append(ToolCall(id=raw.id or f"call_{len(calls)}", name=fn.name, arguments=arguments or "{}"))
        return ModelReply(text=message.content or "", tool_calls=calls, usage=extract_usage(response),
                          finish_reason=getattr(choice, "finish_reason", None),
                          model=getattr(response, "model", "") or self.model,
                          cost_usd=float(cost) if isinstance(cost, (int, float)) else None)


class _Written:
    """A draft that knows whether anything was written to it, so a retried attempt starts it afresh."""

    def __init__(self, draft: Draft) -> None:
        self.draft = draft
        self.written = False

    async def write(self, text: str) -> None:
        self.written = True
        await self.draft.write(text)

    async def restart(self) -> None:
        if self.written:
            self.written = False
            await self.draft.discard()
