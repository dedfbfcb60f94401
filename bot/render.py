"""Text renderings for people: lineage tables and context listings."""

from __future__ import annotations

from datetime import datetime, timezone

from threadkeeper.persistence import LineageEntry
from threadkeeper.services import ContextReport
from threadkeeper.services.recall import RECALL_HEADER


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _messages(count: int) -> str:
    """The conversation's message count as every view words it."""
    return f"{count:,} message{'' if count == 1 else 's'} so far"


HELD = "held: messages the history at a checkpoint holds (what a turn from it loads; fewer after a compaction)"


def lineage_text(conversation_id: str, rows: list[LineageEntry], messages: int) -> str:
    lines = [f"lineage of {conversation_id} ({_messages(messages)}; oldest first, {len(rows)} checkpoints; {HELD})",
             f"  {'':4} {'checkpoint':30} {'kind':10} {'status':15} {'held':>6} {'tokens':>8}  {'created':19}  from"]
    for r in rows:
        origin = f"forked from {r.forked_from}" if r.forked_from else (f"parent {r.parent}" if r.parent else "-")
        lines.append(f"  {'HEAD' if r.is_head else '':4} {r.id:30} {r.kind.value:10} {r.status.value:15} "
                     f"{r.message_count:>6,} {r.token_total:>8,}  {_stamp(r.created_at)}  {origin}")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def context_text(report: ContextReport, *, width: int = 100) -> str:
    b = report.budget
    lines = [f"context of {report.conversation_id} ({_messages(report.messages)}): the next request holds "
             f"{report.context_tokens:,} tokens in {len(report.context)} entries",
             f"budget: window {b.window_tokens:,} = output reserve {b.output_reserve_tokens:,} + fixed prompt "
             f"{b.fixed_prompt_tokens:,} + usable {b.usable_tokens:,}; trigger {b.trigger_tokens:,}, target "
             f"{b.target_tokens:,}, retained user {b.retained_user_tokens:,}, summary cap {b.summary_cap_tokens:,}, "
             f"recall {b.recall_tokens:,}",
             f"history now: {report.history_tokens:,} tokens"
             + (" (the next turn compacts first; shown after compaction)" if report.would_compact else "")]
    for i, entry in enumerate(report.context):
        head, _, recalled = entry.text.partition(f"\n{RECALL_HEADER}\n") if entry.role == "system" else \
            (entry.text, "", "")
        text = _clip(" ".join(head.split()), width)
        ids = ",".join(entry.source_ids[:3]) + ("…" if len(entry.source_ids) > 3 else "")
        lines.append(f"{i:>4} {entry.role:9} {entry.tokens:>6,} tok  [{ids}] {text}")
        if recalled:
            lines.append(f"{'':>4} recalled for the new message ({len(entry.source_ids)}):")
            lines.extend(f"{'':>6}{_clip(line, width)}" for line in recalled.splitlines())
    return "\n".join(lines)
