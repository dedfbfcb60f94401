"""Tools the model may call, with bounded output and an authorization gate."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from threadkeeper.persistence import Message


@dataclass
class ToolContext:
    conversation_id: str
    checkpoint_id: str
    messages: list[Message]
    """The turn's history so far (tools validate evidence against these ids)."""
    extras: dict[str, Any] = field(default_factory=dict)


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]

RECORDS = "records"
"""``ToolContext.extras`` key: structured records a tool returns beside its text (``record_state``'s accepted
entries). The executor stores them whole on the tool result, so cutting the text never loses them."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    requires_authorization: bool = False
    """If set, the turn pauses (``awaiting_resume``) until a person approves the call."""
    status: str = ""
    """What people are shown while it runs ("searching the thread…"); empty: nothing new."""

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        return [self._tools[name].schema() for name in sorted(self._tools)]

    async def run(self, name: str, arguments: str, ctx: ToolContext) -> str:
        """Run a tool; every failure becomes a message the model can read, never an exception."""
        tool = self._tools.get(name)
        if tool is None:
            return f"error: there is no tool named {name!r}; available: {', '.join(sorted(self._tools)) or 'none'}"
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return f"error: arguments to {name} are not a JSON object: {exc}"
        try:
            return await tool.handler(args, ctx)
        except Exception as exc:  # noqa: BLE001 - tool failures are reported to the model
            return f"error: {name} failed: {type(exc).__name__}: {exc}"
