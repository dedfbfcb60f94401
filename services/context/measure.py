"""How much of the window a history takes, as the provider counts it: the calibration of the local estimate by
the last model call's reported usage, and the measure every trigger, target and room is compared on."""

from __future__ import annotations

from collections.abc import Sequence

from threadkeeper.persistence import CheckpointKind, History, Message, carried_tokens

from .render import standing_part

CALIBRATION_BOUNDS = (0.5, 4.0)


def calibration(history: History | None, *, fixed_prompt_tokens: int) -> float:
    """How the provider counts against the local estimate: the last model call's reported input tokens over
    the estimate of what that call carried (1.0 when no call reported usage), within ``CALIBRATION_BOUNDS``.

    Triggers, targets and room are all compared on this one measure, so a provider that counts 1.5× the
    estimate compacts about as often as one that counts 1.0×, instead of compacting to an estimated target
    that its own count puts over the trigger again.
    """
    if history is None:
        return 1.0
    outcome = history.checkpoint.outcome
    messages = history.messages
    low, high = CALIBRATION_BOUNDS
    if not (outcome and outcome.usage and outcome.usage.input_tokens > 0
            and 0 < outcome.usage_covered_messages <= len(messages)):
        # A compaction calls no model for the turn: it keeps the measure its plan was made in, so the history it
        # wrote is not judged over the target by another measure until the next call reports usage.
        compaction = history.checkpoint.kind is CheckpointKind.COMPACTION
        kept = history.checkpoint.meta.info.get("calibration") if compaction else None
        return min(high, max(low, float(kept))) if isinstance(kept, (int, float)) and kept > 0 else 1.0
    covered = outcome.usage_covered_messages
    runtime = history.last_runtime(covered)  # the runtime context that call carried
    estimate = fixed_prompt_tokens + history.visible_tokens(covered) + (runtime.tokens if runtime else 0)
    first = messages[0]  # a compacted history opens with its handoff, whose notes that call may have left out
    if runtime is not None and first.flags.handoff and first.id in runtime.source_ids:
        estimate -= first.tokens - standing_part(first).tokens
    if estimate <= 0:
        return 1.0
    return min(high, max(low, outcome.usage.input_tokens / estimate))


def measure(history: History | None, *, fixed_prompt_tokens: int, extra: Sequence[Message] = ()) -> int:
    """Tokens of history the next request carries (fixed prompt excluded), plus ``extra`` new messages, as
    the provider counts them.

    When the head checkpoint's last model call reported usage, that number is the ground truth for what the
    call carried; the stored estimates are scaled by the same ratio (:func:`calibration`). The runtime context
    that call carried (recalled messages included) is never sent again and does not count. Cumulative usage
    of a turn is never used.
    """
    estimate = sum(carried_tokens(m) for m in extra)
    if history is None:
        return estimate
    estimate += history.visible_tokens()
    ratio = calibration(history, fixed_prompt_tokens=fixed_prompt_tokens)
    if ratio == 1.0:
        return estimate
    return max(0, round(ratio * (fixed_prompt_tokens + estimate)) - fixed_prompt_tokens)
