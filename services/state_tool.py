"""The ``record_state`` tool: the model proposes ledger entries; the host validates them.

Each entry must cite an existing message id as evidence. Entries without evidence, and entries that
are standing behavioural instructions ("always…", "from now on ignore…") rather than facts, decisions
or plan steps, are rejected with a reason the model sees. Accepted entries are written into the tool
result, from which the ledger folds them at the next compaction.
"""

from __future__ import annotations

import json
from typing import Any

from . import extract as x
from .ledger import ACCEPTED_MARK, RECORD_STATE
from .tools import Tool, ToolContext

KINDS = ("fact", "decision", "plan_step")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entries": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": list(KINDS)},
                    "text": {"type": "string", "description": "One sentence stating the fact, decision or step."},
                    "evidence": {"type": "array", "items": {"type": "string"},
                                 "description": "Ids of the thread messages this comes from."},
                },
                "required": ["kind", "text", "evidence"],
            },
        }
    },
    "required": ["entries"],
}


def validate_entry(entry: Any, messages: dict[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """An accepted entry (with its evidence hash) or the reason it is rejected."""
    if not isinstance(entry, dict):
        return None, "each entry must be an object with kind, text and evidence"
    kind, text, evidence = entry.get("kind"), entry.get("text"), entry.get("evidence")
    if kind not in KINDS:
        return None, f"kind must be one of {', '.join(KINDS)}"
    if not isinstance(text, str) or not text.strip():
        return None, "text must be a non-empty sentence"
    if len(text) > 500:
        return None, "text must be at most 500 characters"
    if x.POLICY.search(text):
        return None, ("this is a standing behavioural instruction, not a fact, decision or plan step; "
                      "instructions are not recorded")
    if not isinstance(evidence, list) or not evidence or not all(isinstance(e, str) for e in evidence):
        return None, "evidence must list at least one message id"
    missing = [e for e in evidence if e not in messages]
    if missing:
        return None, f"evidence {', '.join(missing)} is not a message of this thread"
    return {"kind": kind, "text": " ".join(text.split()), "evidence": evidence,
            "hash": x.content_hash(messages[evidence[0]])}, None


async def _record_state(args: dict[str, Any], ctx: ToolContext) -> str:
    entries = args.get("entries")
    if not isinstance(entries, list) or not entries:
        return "rejected: 'entries' must be a non-empty list"
    known = {m.id: m.text for m in ctx.messages if not m.flags.runtime and not m.flags.handoff}
    accepted, rejected = [], []
    for i, entry in enumerate(entries):
        ok, reason = validate_entry(entry, known)
        if ok is not None:
            accepted.append(ok)
        else:
            rejected.append(f"entry {i}: {reason}")
    lines = [f"recorded {len(accepted)} of {len(entries)} entries"]
    if accepted:
        lines.append(ACCEPTED_MARK + json.dumps(accepted, sort_keys=True, separators=(",", ":")))
    lines.extend(f"rejected {r}" for r in rejected)
    return "\n".join(lines)


def record_state_tool() -> Tool:
    return Tool(RECORD_STATE, "Record a fact, decision or plan step from this thread so it survives when older "
                "messages are compacted. Cite the ids of the messages it comes from.", PARAMETERS, _record_state)
