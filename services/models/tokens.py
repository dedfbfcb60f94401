"""Token counting: tiktoken through litellm's choice of tokenizer for the model, with fallbacks.

Counts are computed once, when a message is written, and stored with it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, cast

from threadkeeper.persistence import ImagePart, Message, TextPart, ToolCallPart, ToolResultPart

from ..context import refs
from .budget import is_offline

if TYPE_CHECKING:
    import tiktoken

log = logging.getLogger("threadkeeper.tokens")

MESSAGE_OVERHEAD = 4
"""Tokens a chat format spends per message on role and separators."""
IMAGE_TOKENS = 85
"""What an image reference is counted as (a low-detail image on OpenAI-style models)."""


class Encoder(Protocol):
    def encode(self, text: str, *, disallowed_special: Collection[str] = ...) -> list[int]: ...


LINE_BREAKING = frozenset({"cl100k_base", "o200k_base"})
"""Encodings whose pre-tokenizer ends a piece at a line break followed by a line that opens with neither white space
nor ``/``: such a text's count is the sum of its lines' counts (each with its line break)."""
LINES_KEPT = 8_192
"""Lines whose counts a tokenizer keeps: a turn's runtime context repeats most of the lines of the last one (its
recalled messages, its memory), so it is counted in what changed."""
LINES_FROM = 512
"""Texts shorter than this are counted whole (their lines are not worth looking up)."""
LINE_MAX = 2_000
"""A longer line is counted as it comes, not kept."""


class Tokenizer:
    """Counts tokens for one model. Chosen once; ``characters / 4`` only if nothing else loads."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.encoder, self.name = _encoder_for(model)
        self._line = lru_cache(maxsize=LINES_KEPT)(self._encoded)
        """The count of a line (with its line break), kept for the lines counted most recently."""

    def count(self, text: str, known: Mapping[str, int] | None = None) -> int:
        """``text``'s tokens. ``known``: counts of some of its lines (each with its line break), made by this
        tokenizer before (:meth:`count_line`); where it counts a text by its lines (:attr:`sums_lines`), those lines
        are not counted again."""
        if not text:
            return 0
        if self.encoder is None:
            return (len(text) + 3) // 4
        if len(text) < LINES_FROM or not self.sums_lines or "\n" not in text:
            return self._encoded(text)
        known = known or {}
        return sum(known.get(line) or (self._line(line) if len(line) <= LINE_MAX else self._encoded(line))
                   for line in _lines(text))

    @property
    def sums_lines(self) -> bool:
        """Whether a text's count is the sum of its lines' (see :data:`LINE_BREAKING`): then a line counted once, when
        its message was written, need not be counted again where it is shown."""
        return self.encoder is not None and self.name in LINE_BREAKING

    def count_line(self, line: str) -> int:
        """The tokens of one line of a longer text, ``line`` ending with its line break: what :meth:`count` adds for
        it. Counted as it comes (a line counted when its message is written is not kept for this process)."""
        return self._encoded(line)

    def _encoded(self, text: str) -> int:
        assert self.encoder is not None
        return len(self.encoder.encode(text, disallowed_special=()))

    def count_message(self, message: Message) -> int:
        return count_parts(self, message)

    def counted(self, message: Message, known: Mapping[str, int] | None = None) -> Message:
        """``message`` with its token count computed now: the one way a message is counted, once, before it is
        stored (its reference and author included, as the model reads them). ``known``: lines of its text counted
        before (see :meth:`count`). What was counted of its lines before (a message whose text is cut, say) is
        dropped with the old count: a copy never carries the counts of what it no longer reads."""
        return message.model_copy(update={"tokens": count_parts(self, message, known), "line_tokens": {}})

    def count_tools(self, schemas: list[dict[str, Any]]) -> int:
        """Tokens the tool schemas add to every request."""
        import json

        return self.count(json.dumps(schemas, sort_keys=True)) if schemas else 0

    def count_chat(self, messages: list[dict[str, Any]]) -> int:
        """Tokens of a request's messages in the provider's chat format (strings and tool calls)."""
        total = 0
        for m in messages:
            total += MESSAGE_OVERHEAD
            content = m.get("content")
            if isinstance(content, str):
                total += self.count(content)
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {})
                total += self.count(fn.get("name", "")) + self.count(fn.get("arguments", ""))
        return total


def _lines(text: str) -> list[str]:
    """``text`` cut after each line break that a line opening with neither white space nor ``/`` follows (where the
    :data:`LINE_BREAKING` encodings end a piece): the pieces, joined, are ``text``."""
    lines = text.split("\n")
    out: list[str] = []
    current = lines[0]
    for line in lines[1:]:
        if line and not line[0].isspace() and line[0] != "/":
            out.append(current + "\n")
            current = line
        else:
            current += "\n" + line
    out.append(current)
    return out


OFFLINE_COUNTED_AS = "gpt-4o"
"""The model whose tokenizer counts the offline model's tokens (``o200k_base``): every eval figure is in its tokens."""


def tokenizer_for(model: str) -> Tokenizer:
    """The tokenizer that counts ``model``'s turns (the offline model's: :data:`OFFLINE_COUNTED_AS`'s)."""
    return Tokenizer(OFFLINE_COUNTED_AS if is_offline(model) else model)


def count_parts(tokenizer: Tokenizer, message: Message, known: Mapping[str, int] | None = None) -> int:
    total = MESSAGE_OVERHEAD + (tokenizer.count(refs.speaker(message)) if message.author else 0)
    if refs.shown(message):
        total += tokenizer.count(refs.prefix(message))
    for part in message.parts:
        if isinstance(part, TextPart):
            total += tokenizer.count(part.text, known)
        elif isinstance(part, ToolResultPart):
            total += tokenizer.count(part.content)
        elif isinstance(part, ToolCallPart):
            total += tokenizer.count(part.name) + tokenizer.count(part.arguments)
        elif isinstance(part, ImagePart):
            total += IMAGE_TOKENS
    return total


def _bundled_encodings() -> None:
    """Point tiktoken at the encodings litellm ships (it would download them otherwise), as litellm itself does
    when imported (``CUSTOM_TIKTOKEN_CACHE_DIR`` wins there too), without importing litellm for it."""
    custom = os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR")
    spec = importlib.util.find_spec("litellm")
    if custom:
        os.environ["TIKTOKEN_CACHE_DIR"] = custom
    elif spec is not None and spec.submodule_search_locations:
        os.environ["TIKTOKEN_CACHE_DIR"] = os.path.join(list(spec.submodule_search_locations)[0],
                                                        "litellm_core_utils", "tokenizers")


@lru_cache(maxsize=32)
def _encoder_for(model: str) -> tuple[Encoder | None, str]:
    """A model's tokenizer, loaded once per process: tiktoken's encoding for the model's name, else litellm's
    choice (a Hugging Face tokenizer for some open models), else o200k or cl100k."""
    _bundled_encodings()
    import tiktoken

    bare = model.split("/", 1)[-1]
    try:
        name = tiktoken.encoding_name_for_model(bare)
        return _lean(tiktoken.get_encoding(name)), name
    except (KeyError, ValueError):
        pass
    try:
        from ._litellm import litellm

        selected = litellm.utils._select_tokenizer(model=bare)
        if selected.get("type") == "openai_tokenizer":
            # litellm types the tokenizer as any of its kinds; an "openai_tokenizer" is a tiktoken-style encoding
            enc = cast(Encoder, selected["tokenizer"])
            return enc, getattr(enc, "name", "tiktoken")
        hf = selected["tokenizer"]
        return _HuggingFaceEncoder(hf), f"huggingface:{bare}"
    except Exception as exc:  # a tokenizer that cannot load must not stop the service
        log.debug("litellm tokenizer unavailable for %s: %s", model, exc)
    for name in ("o200k_base", "cl100k_base"):
        try:
            return _lean(tiktoken.get_encoding(name)), name
        except Exception as exc:  # noqa: BLE001 - offline caches can be missing
            log.debug("tiktoken %s unavailable: %s", name, exc)
    log.warning("no tokenizer available for %s: counting characters / 4", model)
    return None, "chars/4"


def _lean(encoding: tiktoken.Encoding) -> tiktoken.Encoding:
    """``encoding`` without its Python copy of the merge ranks. tiktoken keeps that dict (o200k: 200,000 byte
    strings and their ranks, about 29 MB) beside the tables it built from it, and reads it back only to pickle an
    encoding it does not know by name; counting, encoding and decoding never do. The encoding is tiktoken's shared
    one (``tiktoken.get_encoding`` caches it), so the copy is freed for the whole process."""
    encoding._mergeable_ranks = {}
    return encoding


class _HuggingFaceEncoder:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str, **_: Any) -> list[int]:
        return list(self.tokenizer.encode(text).ids)


def bound_text(text: str, tokenizer: Tokenizer, max_tokens: int) -> tuple[str, bool]:
    """Cut ``text`` in the middle to at most about ``max_tokens``, saying how much was cut."""
    tokens = tokenizer.count(text)
    if tokens <= max_tokens:
        return text, False
    keep_chars = max(64, int(len(text) * max_tokens / tokens) - 80)
    head, tail = text[: keep_chars // 2], text[-(keep_chars // 2):]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[… {cut:,} characters ({tokens - max_tokens:,}+ tokens) cut …]\n{tail}", True
