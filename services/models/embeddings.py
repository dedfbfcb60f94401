"""Embeddings for recall's dense half: any litellm embedding provider (OpenAI-compatible servers, Ollama, hosted
ones), one request per call, no retries (a turn whose embedding fails recalls by words alone). Like every model
call, through litellm, imported on first use: a worker without an embedding model never imports it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .llm import ModelError, _litellm, _said, refused

if TYPE_CHECKING:
    import numpy as np
else:
    from .._numpy import np


class EmbeddingError(ModelError):
    """An embedding call failed (the server is down or refuses, or its answer is not one vector per text of one
    length); the message is one line naming the setting."""


class Embedder(Protocol):
    """What recall needs of an embedding model."""

    @property
    def model(self) -> str:
        """The model's name (vectors of different models are never mixed)."""

    async def embed(self, texts: Sequence[str]) -> Any:
        """One unit-length float32 row per text (a numpy array); raises :class:`EmbeddingError`."""


class EmbeddingClient:
    """:class:`Embedder` through litellm's ``aembedding``."""

    def __init__(self, model: str, *, timeout_seconds: float = 15.0, setting: str = "AI_EMBEDDING_MODEL") -> None:
        self._model = model
        self.timeout_seconds = timeout_seconds
        self.setting = setting
        self._ready = False

    @property
    def model(self) -> str:
        return self._model

    async def embed(self, texts: Sequence[str]) -> Any:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        litellm = _litellm()
        named = f"{self.setting}={self.model!r}"
        try:
            if not self._ready:  # once, on a thread: registering asks Ollama about the model with a blocking request
                await asyncio.wait_for(asyncio.to_thread(_known_to_litellm, litellm, self.model),
                                       timeout=self.timeout_seconds)
                self._ready = True
            response = await asyncio.wait_for(
                litellm.aembedding(model=self.model, input=list(texts), timeout=self.timeout_seconds, max_retries=0),
                timeout=self.timeout_seconds)
        except (asyncio.TimeoutError, litellm.Timeout):
            raise EmbeddingError(f"{named}: the embedding model did not answer within {self.timeout_seconds:g}s"
                                 ) from None
        except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError) as exc:
            raise EmbeddingError(str(refused(exc, self.model, self.setting))) from None
        except litellm.APIConnectionError as exc:
            raise EmbeddingError(f"{named}: the embedding server does not answer ({_said(exc)})") from None
        except Exception as exc:  # noqa: BLE001 - litellm maps providers' errors to its own hierarchy, or not at all
            refused_connection = _connection_error(exc)
            if refused_connection is not None:
                said = refused_connection.strerror or str(refused_connection)
                raise EmbeddingError(f"{named}: the embedding server does not answer ({said[:200]})") from None
            if getattr(exc, "status_code", None) in (401, 403, 404):
                raise EmbeddingError(str(refused(exc, self.model, self.setting))) from None
            raise EmbeddingError(f"{named}: the embedding call failed ({type(exc).__name__}: {_said(exc)})") from None
        return _rows(response, len(texts), named)


def _known_to_litellm(litellm: Any, model: str) -> None:
    """An Ollama model litellm's price map does not list is registered there at no cost (it runs locally): litellm's
    bookkeeping after each response would otherwise ask the Ollama server for the model's details with a blocking
    request, on the event loop (a blocking call litellm makes on its async path)."""
    try:
        provider = litellm.get_llm_provider(model)[1]
    except Exception:  # noqa: BLE001 - a model litellm cannot route fails on its call, with its own line
        return
    if provider == "ollama" and model not in litellm.model_cost:
        litellm.register_model({model: {"litellm_provider": "ollama", "mode": "embedding", "input_cost_per_token": 0.0,
                                         "output_cost_per_token": 0.0}})


def _rows(response: Any, count: int, named: str) -> Any:
    """The response's vectors in the order of the texts, unit length; EmbeddingError unless one finite, non-zero
    vector per text, all of one length."""
    data = getattr(response, "data", None) or []
    items = sorted(data, key=lambda item: _get(item, "index") or 0)
    vectors = [_get(item, "embedding") for item in items]
    if len(vectors) != count:
        raise EmbeddingError(f"{named}: the embedding server answered {len(vectors)} vectors for {count} texts")
    sizes = {len(v) if isinstance(v, (list, tuple)) else -1 for v in vectors}
    if len(sizes) != 1 or min(sizes) <= 0:
        raise EmbeddingError(f"{named}: the embedding server answered vectors of different lengths "
                             f"({', '.join(str(s) for s in sorted(sizes))})")
    try:
        rows = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        raise EmbeddingError(f"{named}: the embedding server answered vectors that are not numbers") from None
    norms = np.linalg.norm(rows, axis=1)
    if not np.all(np.isfinite(norms)) or not np.all(norms > 0) or not math.isfinite(float(norms.sum())):
        raise EmbeddingError(f"{named}: the embedding server answered an empty or non-finite vector")
    normalized: Any = rows / norms[:, None]
    return normalized


def _connection_error(exc: BaseException) -> OSError | None:
    """The connection failure behind ``exc`` (litellm reports some providers' refused connections as a server
    error), if any."""
    seen: list[OSError] = []
    cause: BaseException | None = exc
    while cause is not None and not any(cause is s for s in seen) and len(seen) < 20:
        if isinstance(cause, OSError):
            seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    # the one that says what happened in words (some clients wrap it in one that prints their settings)
    return next((e for e in seen if e.strerror), seen[0] if seen else None)


def _get(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)
