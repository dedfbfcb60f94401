"""Text renderings for people: lineage tables and context listings."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from threadkeeper.persistence import LineageEntry
from threadkeeper.services import ContextReport
from threadkeeper.services.context import HANDOFF_HEADER
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


BAR_PARTS = (("prompt", "▓"), ("handoff", "█"), ("recall & memory", "▒"), ("recent", "░"), ("free", "·"),
             ("reply", "-"))
"""The parts of the window the budget bar shows, each with its character: the system prompt, the handoff (the
standing context), the runtime context (time, recall, memory), the recent messages, what is free, and the room kept
for the reply."""


def budget_bar(report: ContextReport, *, width: int = 60) -> list[str]:
    """The window as a bar of ``width`` characters, each part in proportion to its tokens (any part that has tokens
    at least one character), and its legend."""
    used = {name: 0 for name, _ in BAR_PARTS}
    for i, entry in enumerate(report.context):
        if entry.role == "system":
            used["prompt" if i == 0 else "recall & memory"] += entry.tokens
        elif entry.text.startswith(HANDOFF_HEADER):
            used["handoff"] += entry.tokens
        else:
            used["recent"] += entry.tokens
    window = report.budget.window_tokens
    used["reply"] = report.budget.output_reserve_tokens
    used["free"] = max(0, window - sum(used.values()))
    total = max(window, sum(used.values()), 1)
    cells = {name: max(1, round(width * tokens / total)) if tokens else 0 for name, tokens in used.items()}
    cells["free"] = max(0, cells["free"] - (sum(cells.values()) - width))  # rounding: the free part absorbs it
    bar = "".join(mark * cells[name] for name, mark in BAR_PARTS)
    legend = "  ".join(f"{mark} {name} {used[name]:,}" for name, mark in BAR_PARTS if used[name])
    return [f"[{bar}] {window:,} tokens", legend]


def context_text(report: ContextReport, *, width: int = 100) -> str:
    b = report.budget
    lines = [f"context of {report.conversation_id} ({_messages(report.messages)}): the next request holds "
             f"{report.context_tokens:,} tokens in {len(report.context)} entries",
             f"budget: window {b.window_tokens:,} = output reserve {b.output_reserve_tokens:,} + fixed prompt "
             f"{b.fixed_prompt_tokens:,} + usable {b.usable_tokens:,}; trigger {b.trigger_tokens:,}, target "
             f"{b.target_tokens:,}, retained user {b.retained_user_tokens:,}, summary cap {b.summary_cap_tokens:,}, "
             f"recall {b.recall_tokens:,}",
             f"history now: {report.history_tokens:,} tokens"
             + (" (the next turn compacts first; shown after compaction)" if report.would_compact else ""),
             *budget_bar(report)]
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


def lineage_tree(conversation_id: str, rows: list[LineageEntry], messages: int) -> Any:
    """The lineage as a tree (rich): each run of turns on one line of descent, a compaction's fork as a branch
    under the checkpoint it forked from, a second turn from one checkpoint (a superseded attempt) as a branch of
    its own; the head marked."""
    from rich.tree import Tree

    children: dict[str | None, list[LineageEntry]] = {}
    for row in rows:
        children.setdefault(row.forked_from or row.parent, []).append(row)

    def label(row: LineageEntry) -> str:
        head = "[bold]HEAD[/bold] " if row.is_head else ""
        return (f"{head}{row.id} {row.kind.value} {row.status.value} · held {row.message_count:,} · "
                f"{row.token_total:,} tokens · {_stamp(row.created_at)}")

    def grow(branch: Any, row: LineageEntry | None) -> None:
        while row is not None:
            branch.add(label(row))
            kids = children.get(row.id, [])
            forks = [k for k in kids if k.forked_from == row.id]
            turns = [k for k in kids if k.forked_from != row.id]
            for fork in forks:
                grow(branch.add(f"[cyan]⑂ compacted: forked from {row.id}[/cyan]"), fork)
            for other in turns[:-1]:
                grow(branch.add(f"[yellow]another turn from {row.id}[/yellow]"), other)
            row = turns[-1] if turns else None

    tree = Tree(f"lineage of {conversation_id} ({_messages(messages)}; {len(rows)} checkpoints, oldest first)")
    for root in children.get(None, []):
        grow(tree, root)
    return tree
