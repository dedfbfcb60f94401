"""Context budgets: every threshold is a fraction of the model's usable window.

``usable = window - output reserve - fixed prompt (system prompt + tool schemas, measured)``.

Defaults and why:

* **trigger 0.80**: compaction runs before a turn once the history reaches 80% of the usable
  window. The remaining 20% absorbs the turn's new input, tool output and the runtime context
  without hitting the hard guard.
* **target 0.50**: after compaction the history must sit at or under half the usable window, so
  one compaction buys at least 30% of the window of new conversation before the next.
* **planned ahead four turns before the trigger, never before 0.60**: once a committed turn leaves the history
  within four turns' growth of the trigger (at the rate its last turn grew it; the turn that reaches the trigger
  counts as one of the four), the next compaction's narrative is planned in the background from that checkpoint,
  and the turn that reaches the trigger adopts it instead of waiting for the summarizer. Measured with a
  summarizer 1.5× as slow as the chat model and turns back to back (``threadkeeper bench``, see
  docs/benchmarks.md): planned two or three turns ahead, the turn that reaches the trigger still waited for the
  rest of the plan (its p95 2.8× and 2.0× an ordinary turn's); four turns ahead it did not (1.2×, the compaction's
  own few milliseconds on a 0.2 s model). Earlier plans leave more of the folded messages to the notes alone (the
  narrative is written before they arrive). A fixed share would plan hundreds of thousands of tokens early on a 1M
  window; 0.60 bounds how early a burst of large messages can make it.
* **retained user messages 0.10, pins 0.10; the handoff gets the rest of the target** (0.30 or more;
  less only when a large input arrives and needs the room): a compaction keeps the newest words of people
  verbatim and every pinned message within their shares, and the handoff fills what the target leaves, so
  an unused pin share flows to the notes. Recent messages stay verbatim for the flow of the conversation;
  older ones are worth more as notes, which cost a fraction of their tokens (measured on REALTALK at an 8k
  window: 42% of questions keep all their evidence with 0.10, 37% with 0.15; see the README).
* **recall 0.25**: the earlier messages recalled for a turn's new message (per-turn runtime context, never
  stored as history) take at most this share, less when the request has no room for it beside the history
  and a tool result. They are what the question is about, so they are worth more per token than anything
  else in the request (REALTALK at an 8k window, questions with every piece of evidence in the context
  built for them: 77% with 0.15, 79% with 0.20, 80% with 0.25; BEAM: 68%, 74%, 77%).
* **output reserve 10% of the window**, at least 256 tokens and at most the model's maximum
  output (``AI_MAX_OUTPUT_TOKENS`` overrides): enough for a long answer on small windows without
  reserving 100k tokens on a 1M model.

The same fractions give an 8k model about 700 tokens of retained user messages and a 1M model
about 90k: nothing is a fixed count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from threadkeeper.persistence import ThreadkeeperError

PREPARE_TURNS = 4
"""How many turns before the trigger (at the rate the last one grew the history, the turn that reaches it included)
the next compaction is planned."""
OFFLINE_WINDOW_TOKENS = 32_000
"""The offline model's window when ``AI_MODEL_CONTEXT_WINDOW_TOKENS`` does not say otherwise."""


class BudgetError(ThreadkeeperError):
    """The window is unknown or too small to hold the fixed prompt and a reply."""


@dataclass(frozen=True)
class BudgetPolicy:
    trigger: float = 0.80
    prepare: float = 0.60
    """The earliest a committed turn has the next compaction planned ahead, in the background (0: never); it is
    planned :data:`PREPARE_TURNS` turns before the trigger (see :meth:`ContextBudget.preparing`)."""
    target: float = 0.55
    retained_user: float = 0.05
    summary_cap: float = 0.15
    """The summary share of the comparison strategies in the continuity eval."""
    pins: float = 0.10
    recall: float = 0.25
    """Before a turn, earlier messages recalled for the new message get at most this share, and never more than
    the request has room for beside the history and a tool result (``Executor.runtime_message``)."""
    memory: float = 0.10
    """Before a turn, records of memory from other conversations found for the new message get at most this
    share (``services.memory``); what they leave unused stays free."""
    output_reserve: float = 0.10
    min_output_reserve: int = 256
    max_output_reserve: int = 8_192


@dataclass(frozen=True)
class ContextBudget:
    window_tokens: int
    output_reserve_tokens: int
    fixed_prompt_tokens: int
    usable_tokens: int
    trigger_tokens: int
    target_tokens: int
    retained_user_tokens: int
    summary_cap_tokens: int
    pin_tokens: int
    recall_tokens: int = 0
    memory_tokens: int = 0
    prepare_tokens: int = 0
    """The earliest size at which a committed turn has the next compaction planned ahead (0: never; see
    :meth:`preparing`)."""

    @classmethod
    def derive(cls, window_tokens: int, *, fixed_prompt_tokens: int, max_output_tokens: int | None = None,
               policy: BudgetPolicy = BudgetPolicy()) -> ContextBudget:
        cap = max_output_tokens or policy.max_output_reserve
        reserve = int(min(max(window_tokens * policy.output_reserve, policy.min_output_reserve), cap))
        usable = window_tokens - reserve - fixed_prompt_tokens
        if usable < 256:
            raise BudgetError(
                f"a {window_tokens:,}-token window leaves {usable:,} tokens for the conversation after "
                f"{reserve:,} reserved for output and {fixed_prompt_tokens:,} for the system prompt and tools; "
                "use a model with a larger window (or raise AI_MODEL_CONTEXT_WINDOW_TOKENS if it is set too low)"
            )
        return cls(
            window_tokens=window_tokens,
            output_reserve_tokens=reserve,
            fixed_prompt_tokens=fixed_prompt_tokens,
            usable_tokens=usable,
            trigger_tokens=int(usable * policy.trigger),
            target_tokens=int(usable * policy.target),
            retained_user_tokens=int(usable * policy.retained_user),
            summary_cap_tokens=int(usable * policy.summary_cap),
            pin_tokens=int(usable * policy.pins),
            recall_tokens=int(usable * policy.recall),
            memory_tokens=int(usable * policy.memory),
            prepare_tokens=int(usable * policy.prepare),
        )

    def in_estimates(self, ratio: float) -> ContextBudget:
        """These thresholds in the local estimate's units, for a provider that counts ``ratio`` times the
        estimate (see ``services.context.calibration``): what a compaction plans and recall fills with."""
        if ratio == 1.0:
            return self

        def total(tokens: int) -> int:  # a size that includes the fixed prompt, as the provider sees it
            return max(0, int((self.fixed_prompt_tokens + tokens) / ratio) - self.fixed_prompt_tokens)

        return replace(self, usable_tokens=total(self.usable_tokens), trigger_tokens=total(self.trigger_tokens),
                       target_tokens=total(self.target_tokens),
                       retained_user_tokens=int(self.retained_user_tokens / ratio),
                       summary_cap_tokens=int(self.summary_cap_tokens / ratio), pin_tokens=int(self.pin_tokens / ratio),
                       recall_tokens=int(self.recall_tokens / ratio),
                       memory_tokens=int(self.memory_tokens / ratio),
                       prepare_tokens=total(self.prepare_tokens) if self.prepare_tokens else 0,
                       output_reserve_tokens=self.window_tokens - int(self.request_limit_tokens / ratio))

    def preparing(self, growth: int = 0) -> ContextBudget | None:
        """This budget with the preparation threshold as its trigger: the size past which the next compaction is
        planned ahead, asked through the one rule of whether a history compacts (None: never planned ahead). It is
        :data:`PREPARE_TURNS` turns of ``growth`` (what the last turn added) below the trigger, and never below
        ``prepare_tokens``."""
        if not 0 < self.prepare_tokens < self.trigger_tokens:
            return None
        threshold = max(self.prepare_tokens, self.trigger_tokens - PREPARE_TURNS * max(0, growth))
        return replace(self, trigger_tokens=min(threshold, self.trigger_tokens - 1))

    @property
    def request_limit_tokens(self) -> int:
        """The most input tokens a request may carry: the window less the output reserve."""
        return self.window_tokens - self.output_reserve_tokens

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def model_info(model: str) -> dict[str, Any]:
    """litellm's model info for a provider model (empty when litellm does not know it). Only real models are
    looked up, so the offline model never imports litellm."""
    from ._litellm import litellm

    try:
        return dict(litellm.get_model_info(model))
    except Exception:  # litellm raises several types for unmapped models
        return {}


def resolve_window(model: str, override: int | None, *, variable: str = "AI_MODEL_CONTEXT_WINDOW_TOKENS") -> int:
    """The model's input window: the override, else litellm's model info; unknown is an error."""
    if override:
        return override
    if is_offline(model):
        return OFFLINE_WINDOW_TOKENS
    info = model_info(model)
    window = info.get("max_input_tokens") or info.get("max_tokens")
    if not window:
        raise BudgetError(f"the context window of model {model!r} is unknown to litellm; set {variable} "
                          "to its input window in tokens")
    return int(window)


def resolve_max_output(model: str, override: int | None) -> int | None:
    if override:
        return override
    if is_offline(model):
        return None
    return model_info(model).get("max_output_tokens")


def offers_tools(model: str) -> bool:
    """Whether a model is offered the optional tools (``thread_search``): every model except the offline one
    and those litellm knows cannot call functions (a model unknown to litellm is assumed able to)."""
    if is_offline(model):
        return False
    # A model unknown to litellm (a local or custom one) has no entry and is offered them.
    return model_info(model).get("supports_function_calling") is not False


def is_offline(model: str) -> bool:
    return model.split("/", 1)[-1] == "offline" and model.split("/", 1)[0] in ("offline", "threadkeeper-offline")
