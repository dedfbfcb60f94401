"""The model and tool loop of one turn: the request guard, bounded tool steps with bounded output, the authorization
pause, and the turn's final reply."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from threadkeeper.persistence import CheckpointOutcome, Message, TextPart, ToolCallPart, ToolResultPart, new_id

from ..context import next_ref, to_chat, visible
from ..conversation import Conversation
from ..models import RECORDS, ContextBudget, Draft, ModelTimeoutError, Tokenizer, ToolContext, ToolRegistry, bound_text
from ..recall import line_counted
from ..text import reply_additions
from .assembler import ContextAssembler
from .input import TurnInput
from .seams import CheckpointStore, Model
from .types import THINKING, ExecutorConfig, TurnEvents, TurnState, TurnStatus

REPLY_LOOKBACK = (8, 400)
"""The earlier replies a reply's note is compared with: at most this many, among this many newest messages."""


def earlier_replies(messages: list[Message]) -> list[str]:
    """The bot's newest earlier replies, newest first (a bounded look back: its cost does not grow with the
    thread)."""
    most, window = REPLY_LOOKBACK
    out: list[str] = []
    for m in reversed(messages[-window:]):
        if m.role == "assistant" and not m.flags.runtime and m.text:
            out.append(m.text)
            if len(out) == most:
                break
    return out


def window_id(conversation_id: str, messages: list[Message]) -> str:
    """Which context window a request belongs to: the conversation and the handoff its history starts from (the
    same for every turn between two compactions)."""
    first = messages[0] if messages else None
    return f"{conversation_id}#{first.id if first is not None and first.flags.handoff else 'start'}"


def tool_tokens(budget: ContextBudget, config: ExecutorConfig) -> int:
    """The most one tool result may take of the window (its output is cut to this)."""
    return max(200, int(budget.usable_tokens * config.tool_output_fraction))


class ModelLoop:
    """Calls the model with the turn's visible messages until it answers (or a tool needs approval, or the steps or
    the turn's model time run out), running the tools it calls in between."""

    def __init__(self, *, checkpoints: CheckpointStore, model: Model, tools: ToolRegistry, budget: ContextBudget,
                 tokenizer: Tokenizer, config: ExecutorConfig, messages: TurnInput) -> None:
        self.checkpoints = checkpoints
        self.model = model
        self.tools = tools
        self.budget = budget
        self.tokenizer = tokenizer
        self.config = config
        self.messages = messages
        """Makes the turn's own messages (counted once) and their notes."""
        self.tool_tokens = tool_tokens(budget, config)

    async def run(self, conversation: Conversation, turn: TurnState, events: TurnEvents,
                  draft: Draft | None = None) -> tuple[TurnStatus, str]:
        conversation_id = conversation.id
        schemas = self.tools.schemas()
        for _ in range(self.config.max_tool_steps + 1):
            sent = visible(turn.messages, turn.runtime_id)
            request_tokens = self.budget.fixed_prompt_tokens + sum(m.tokens for m in sent)
            if request_tokens > self.budget.request_limit_tokens:
                text = (f"I can't send this to the model: the request would be {request_tokens:,} tokens and the "
                        f"model accepts {self.budget.request_limit_tokens:,}. Please split the latest input into "
                        "smaller messages.")
                self._finish(turn, self.messages.message(text, role="assistant"), answered=False)
                return "refused", text
            remaining = self.config.turn_model_seconds - turn.model_seconds
            if remaining <= 0:
                raise ModelTimeoutError(f"the turn used its {self.config.turn_model_seconds:g}s of model time")
            started = time.perf_counter()
            try:
                reply = await asyncio.wait_for(
                    self.model.complete(to_chat(self.config.system_prompt, sent), tools=schemas or None,
                                        timeout_seconds=min(self.model.timeout_seconds, remaining), draft=draft,
                                        kind="turn", window=window_id(conversation_id, turn.messages)),
                    timeout=remaining)
            except asyncio.TimeoutError as exc:
                raise ModelTimeoutError(f"the turn used its {self.config.turn_model_seconds:g}s of model time "
                                        "(retries included)") from exc
            finally:
                turn.model_seconds += time.perf_counter() - started
            turn.calls += 1
            turn.spend.add(reply)
            turn.usage = reply.usage or turn.usage
            turn.covered = len(turn.messages)
            if not reply.tool_calls:
                text = reply.text.strip() or "(the model returned an empty reply)"
                self._finish(turn, self.messages.message(text, role="assistant"))
                return "completed", text
            if reply.text and draft is not None:
                await draft.discard()  # text before tool calls is not the answer the turn ends with
            call_parts = [ToolCallPart(call_id=c.id, name=c.name, arguments=c.arguments) for c in reply.tool_calls]
            parts: list[Any] = ([TextPart(text=reply.text)] if reply.text else []) + call_parts
            assistant = self.tokenizer.counted(Message(id=new_id("m"), role="assistant", parts=parts, tokens=0))
            results: list[Message] = []
            for call in reply.tool_calls:
                tool = self.tools.get(call.name)
                if tool is not None and tool.requires_authorization:
                    await self._append(conversation_id, turn, [assistant, *results])
                    await self.checkpoints.pause(
                        conversation_id, turn.checkpoint.id, outcome=self.outcome(turn),
                        resume={"reason": "authorization",
                                "tool_call": {"id": call.id, "name": call.name, "arguments": call.arguments},
                                **ContextAssembler.paused(turn.runtime)})
                    return "awaiting_resume", (f"I need your approval to run `{call.name}` with {call.arguments}. "
                                               "Reply *yes* to approve or *no* to decline.")
                if tool is not None and tool.status:
                    await events.status(conversation, tool.status)
                ctx = ToolContext(conversation_id, turn.checkpoint.id, turn.messages)
                content = await self.tools.run(call.name, call.arguments, ctx)
                results.append(self.tool_result(call.id, call.name, content, ctx.extras.get(RECORDS)))
            await self._append(conversation_id, turn, [assistant, *results])
            await events.status(conversation, THINKING)
        text = (f"I stopped after {self.config.max_tool_steps} tool steps without a final answer; "
                "ask again or narrow the request.")
        self._finish(turn, self.messages.message(text, role="assistant"), answered=False)
        return "completed", text

    def tool_result(self, call_id: str, name: str, content: str,
                    data: list[dict[str, Any]] | None = None) -> Message:
        """A tool's output as the history stores it, cut to the tool's share of the window."""
        content, truncated = bound_text(content, self.tokenizer, self.tool_tokens)
        part = ToolResultPart(call_id=call_id, name=name, content=content, truncated=truncated, data=data)
        return self.tokenizer.counted(Message(id=new_id("m"), role="tool", parts=[part], tokens=0))

    async def _append(self, conversation_id: str, turn: TurnState, messages: list[Message]) -> None:
        if messages:
            await self.checkpoints.append(conversation_id, turn.checkpoint.id, messages)
            turn.messages.extend(messages)

    def _finish(self, turn: TurnState, message: Message, *, answered: bool = True) -> None:
        """The turn's final reply. A model's answer answers the turn's asks (its ``source_ids``) and carries
        its note; a refusal does neither, so the asks stay open and its words never become a note."""
        update: dict[str, Any] = {"note": "", "ref": next_ref(turn.messages)}
        if answered:
            asked = [f"{m.author or ''}: {m.text}" for m in turn.incoming]
            update |= self.messages.noted(reply_additions(message.text, asked, earlier_replies(turn.messages)),
                                          message.created_at)
            update["source_ids"] = [m.id for m in turn.incoming if m.flags.addressed]
        message = line_counted(message.model_copy(update=update), self.tokenizer)
        turn.messages.append(message)
        turn.final.append(message)

    @staticmethod
    def outcome(turn: TurnState) -> CheckpointOutcome:
        return CheckpointOutcome(usage=turn.usage, usage_covered_messages=turn.covered if turn.usage else 0)
