"""What a request to the events endpoint must look like before Bolt reads it.

Slack posts JSON envelopes (Events API) or form bodies (interactivity: a ``payload`` field holding JSON; slash
commands). A request that cannot be one of those gets a 400 saying why, before any parsing that could fail
deep inside Bolt: a body that is not UTF-8, JSON nested deeper than Slack ever nests it, a top level that is
not an object, envelope fields of the wrong type. It runs on a request whose signature was checked first
(:mod:`bot.signature`), so nothing here is spent on a request that is not Slack's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError

MAX_DEPTH = 64
"""Slack's deepest envelopes (rich-text blocks inside an edited message) nest about 12 levels."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: StrictStr


class _Envelope(BaseModel):
    """The Events API envelope's own fields (the event inside is checked by its listener)."""

    model_config = ConfigDict(extra="allow")
    type: StrictStr
    token: StrictStr | None = None
    challenge: StrictStr | None = None
    team_id: StrictStr | None = None
    enterprise_id: StrictStr | None = None
    api_app_id: StrictStr | None = None
    event_id: StrictStr | None = None
    event_time: StrictInt | None = None
    event_context: StrictStr | None = None
    is_ext_shared_channel: StrictBool | None = None
    event: _Event | None = None
    authorizations: list[dict[str, Any]] | None = None


class _Payload(BaseModel):
    """An interactivity payload (shortcuts, actions, views)."""

    model_config = ConfigDict(extra="allow")
    type: StrictStr
    team: dict[str, Any] | None = None
    user: dict[str, Any] | None = None


def _too_deep(text: str) -> bool:
    """Whether JSON ``text`` nests deeper than :data:`MAX_DEPTH`, told without parsing (or recursing)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _json_object(text: str, what: str) -> tuple[dict[str, Any] | None, str | None]:
    if _too_deep(text):
        return None, f"{what} nests deeper than {MAX_DEPTH} levels"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"{what} is not JSON ({str(exc)[:80]})"
    if not isinstance(value, dict):
        return None, f"{what} must be a JSON object, not {type(value).__name__}"
    return value, None


def _schema_problem(model: type[BaseModel], value: dict[str, Any], what: str) -> str | None:
    try:
        model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        return f"{what}: field {where}: {first['msg']}"
    return None


def problem(headers: Mapping[str, str], body: bytes) -> str | None:
    """Why this request cannot be one Slack sends (None when it can)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    if not text.strip():
        return "the body is empty"
    content_type = headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type == "application/x-www-form-urlencoded":
        fields = parse_qs(text, keep_blank_values=True)
        if "payload" in fields:
            payload, why = _json_object(fields["payload"][0], "the payload")
            return why or _schema_problem(_Payload, payload or {}, "the payload")
        if "command" in fields:
            return None
        return "a form body must hold a payload or a command"
    envelope, why = _json_object(text, "the body")
    if why is not None:
        return why
    assert envelope is not None
    why = _schema_problem(_Envelope, envelope, "the envelope")
    if why is None and envelope.get("type") == "url_verification" and not isinstance(envelope.get("challenge"), str):
        return "a url_verification request must hold a challenge string"
    return why
