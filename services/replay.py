"""Replay a recorded thread through the real pipeline and report the context the next turn would send."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from threadkeeper.persistence import InboxItem, ThreadkeeperError

from .conversation import Conversation

if TYPE_CHECKING:
    from .app import Pipeline


class ReplayInputError(ThreadkeeperError):
    """The thread file is malformed; nothing was written to the store."""


class ReplayMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    author: str = Field(min_length=1)
    text: str
    ts: str | None = None
    """Slack's seconds since the epoch, as Slack writes them (``"1700000000.000100"``); a number is taken too."""
    pinned: bool = False
    edits: str | None = None
    """This entry is an edit of the message with this id (its ``text`` is the new text)."""
    deletes: str | None = None
    """This entry deletes the message with this id."""
    reply: bool = True
    """Whether the message asks the bot for an answer (a mention or a DM); ``false``: people talking among
    themselves, recorded without a model call."""

    @field_validator("ts", mode="before")
    @classmethod
    def _number_is_a_time(cls, value: object) -> object:
        return repr(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("id", "author", "text", "ts", "edits", "deletes")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("holds a character that is not valid Unicode (a lone surrogate)") from None
        return value

    @property
    def created_at(self) -> float | None:
        """The message's time from its ``ts`` (Slack's seconds since the epoch), when it is one."""
        try:
            value = float(self.ts) if self.ts else None
        except ValueError:
            return None
        return value if value is not None and 0 < value < 1e11 else None


class ReplayThread(BaseModel):
    model_config = ConfigDict(extra="ignore")
    conversation_id: str | None = None
    messages: list[ReplayMessage]


def _slack_export(items: list[Any], source: str) -> ReplayThread:
    messages = []
    for index, raw in enumerate(items):
        if not isinstance(raw, dict):
            raise ReplayInputError(f"{source}: message {index}: expected a JSON object, got {type(raw).__name__}")
        if raw.get("subtype") in ("channel_join", "channel_leave", "thread_broadcast_deleted"):
            continue
        for field in ("ts", "text"):
            if not isinstance(raw.get(field), str):
                raise ReplayInputError(f"{source}: message {index}: field {field!r} is missing or not a string")
        author = raw.get("user") or raw.get("username") or raw.get("bot_id")
        if not isinstance(author, str) or not author:
            raise ReplayInputError(f"{source}: message {index} (ts {raw['ts']}): field 'user' is missing")
        try:
            message = ReplayMessage(id=raw["ts"], author=author, text=raw["text"], ts=raw["ts"],
                                    pinned=bool(raw.get("pinned_to")))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ReplayInputError(f"{source}: message {index}: field {'.'.join(map(str, err['loc']))!r}: "
                                   f"{err['msg']}") from None
        if message.created_at is None:
            raise ReplayInputError(f"{source}: message {index}: field 'ts' must be Slack's seconds since the epoch "
                                   f"(\"1700000000.000100\"), not {raw['ts'][:40]!r}")
        messages.append(message)
    messages.sort(key=lambda m: m.created_at or 0.0)
    return ReplayThread(messages=messages)


def parse_thread(raw: str | bytes, source: str = "thread") -> ReplayThread:
    """Parse a replay file: ``{"conversation_id"?, "messages": [...]}`` or a Slack export list."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ReplayInputError(f"{source}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ReplayInputError(f"{source}: not valid JSON: nested too deeply") from None
    if isinstance(data, list):
        thread = _slack_export(data, source)
    elif isinstance(data, dict):
        if not isinstance(data.get("messages"), list):
            raise ReplayInputError(f"{source}: expected a 'messages' list (or a Slack export: a JSON list)")
        for index, item in enumerate(data["messages"]):
            try:
                ReplayMessage.model_validate(item)
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or "(message)"
                ident = item.get("id") if isinstance(item, dict) else None
                label = f"message {index}" + (f" (id {ident!r})" if ident else "")
                raise ReplayInputError(f"{source}: {label}: field {field!r}: {err['msg']}") from None
        thread = ReplayThread.model_validate(data)
    else:
        raise ReplayInputError(f"{source}: expected a JSON object or list, got {type(data).__name__}")
    if not thread.messages:
        raise ReplayInputError(f"{source}: the thread has no messages")
    _check_references(thread, source)
    return thread


def _check_references(thread: ReplayThread, source: str) -> None:
    """Every id once; a message says something; an edit or a deletion names a message before it. The whole
    file is checked before anything is written, so a bad file writes nothing."""
    seen: set[str] = set()
    for index, message in enumerate(thread.messages):
        label = f"{source}: message {index} (id {message.id!r})"
        if message.id in seen:
            raise ReplayInputError(f"{source}: message {index}: id {message.id!r} appears twice")
        if message.edits and message.deletes:
            raise ReplayInputError(f"{label}: an entry either edits or deletes a message, not both")
        target = message.edits or message.deletes
        if target is not None and target not in seen:
            raise ReplayInputError(f"{label}: it {'edits' if message.edits else 'deletes'} {target!r}, which is not "
                                   "a message before it in the file")
        if not message.deletes and not message.text.strip():
            raise ReplayInputError(f"{label}: field 'text' is empty")
        seen.add(message.id)


def load_thread(path: str | Path) -> ReplayThread:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ReplayInputError(f"cannot read {path}: {exc.strerror}") from None
    return parse_thread(raw, str(path))


def default_conversation_id(thread: ReplayThread, source: str) -> str:
    digest = hashlib.sha1("\n".join(m.id for m in thread.messages).encode()).hexdigest()[:10]
    return f"replay:{Path(source).stem}:{digest}"


async def replay(pipeline: Pipeline, thread: ReplayThread, *, conversation: Conversation | str, turn_every: int = 1,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Deliver the thread's messages in order, running a turn every ``turn_every`` messages and after the last.
    ``conversation``: where (with what is known of its channel's privacy), or its id."""
    from .app import as_conversation

    conversation = as_conversation(conversation)
    conversation_id = conversation.id
    if turn_every < 1:
        raise ReplayInputError("--turn-every must be at least 1")
    compactions: list[dict[str, Any]] = []
    turns = 0
    total = len(thread.messages)
    clock = pipeline.clock
    wall_clock, latest = clock.source, 0.0
    # The bot's replies and notices happen in the thread's time, right after what they answer.
    clock.source = lambda: latest or wall_clock()
    try:
        for index, message in enumerate(thread.messages, start=1):
            latest = max(latest, message.created_at or 0.0)
            turns += await _deliver(pipeline, message, conversation, compactions,
                                    run=index % turn_every == 0 or index == total)
            if progress:
                progress(index, total)
    finally:
        clock.source = wall_clock
    report = await pipeline.context(conversation_id)
    out = report.as_dict()
    out.pop("would_compact", None)
    return {"conversation_id": conversation_id, "window_tokens": pipeline.budget.window_tokens,
            "budget": out["budget"], "messages": total, "turns": turns, "compactions": compactions,
            "context": out["context"], "context_tokens": out["context_tokens"]}


async def _deliver(pipeline: Pipeline, message: ReplayMessage, conversation: Conversation,
                   compactions: list[dict[str, Any]], *, run: bool) -> int:
    """Deliver one replayed message (a message, an edit or a deletion); run the turns if ``run``."""
    at = message.created_at or pipeline.clock()  # an edit or deletion happens in the thread's time
    if message.edits:
        edited = pipeline.message(message.text, author=message.author, id=message.edits)
        await pipeline.submit_item(conversation, InboxItem(kind="edit", event_id=message.id, message=edited,
                                                              change=message.id, reply_expected=False,
                                                              received_at=at))
    elif message.deletes:
        await pipeline.submit_item(conversation, InboxItem(kind="delete", event_id=message.id,
                                                              target_id=message.deletes, reply_expected=False,
                                                              received_at=at))
    else:
        await pipeline.submit(conversation, message.text, author=message.author, id=message.id,
                              pinned=message.pinned, reply_expected=message.reply, created_at=message.created_at)
    if not run:
        return 0
    results = await pipeline.run(conversation)
    compactions.extend(r.compaction.summary() for r in results if r.compaction is not None)
    return len(results)
