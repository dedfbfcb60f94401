"""Deterministic graders: does the final context keep each probe, and does it present stale items as current?

* ``identifier`` / ``decision``: the exact answer string is in the context.
* ``open_ask`` / ``constraint``: the evidence message is there verbatim, or a handoff line cites its id
  (an ask cited as resolved or superseded does not count as kept open).
* ``pinned``: the pinned message is there verbatim.
* ``superseded_ask`` / ``resolved_ask`` / ``reversed_decision``: kept when what closed it (the second
  evidence message) is there verbatim or cited. A **supercheckpoint error** is counted when the old
  item is still presented as current: listed as an open ask / active decision, or present verbatim, while
  what closed it is absent.
* ``suspect``: kept when a SUSPECT line cites the evidence message; an error when the stale text is
  there without that mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProbeResult:
    id: str
    kind: str
    kept: bool
    error: bool


def grade(probes: Sequence[dict[str, Any]], context_texts: Sequence[str],
          originals: dict[str, str]) -> list[ProbeResult]:
    full = "\n".join(context_texts)
    lines = full.splitlines()

    def cited(mid: str) -> bool:
        return any(mid in line for line in lines)

    def verbatim(mid: str) -> bool:
        text = originals.get(mid, "")
        return bool(text) and text in full

    def present(mid: str) -> bool:
        return verbatim(mid) or cited(mid)

    def listed_open(mid: str) -> bool:
        return any(line.startswith(f"- [ask {mid}]") for line in lines)

    def listed_active_decision(mid: str) -> bool:
        return any(line.startswith(f"- [decision {mid}]") for line in lines)

    out = []
    for p in probes:
        kind, ev = p["kind"], p.get("evidence") or []
        kept = error = False
        if kind in ("identifier", "decision"):
            kept = p["answer"] in full
        elif kind == "open_ask":
            closed = any(ev[0] in line and ("resolved by" in line or "superseded by" in line) for line in lines)
            kept = present(ev[0]) and not closed
        elif kind == "constraint":
            kept = present(ev[0])
        elif kind == "pinned":
            kept = verbatim(ev[0])
        elif kind in ("superseded_ask", "resolved_ask", "reversed_decision"):
            kept = present(ev[1])
            stale = listed_open(ev[0]) if kind != "reversed_decision" else listed_active_decision(ev[0])
            error = (stale or verbatim(ev[0])) and not kept
        elif kind == "suspect":
            kept = any("SUSPECT" in line and ev[0] in line for line in lines)
            error = any(p["answer"] in line and "SUSPECT" not in line for line in lines)
        out.append(ProbeResult(p["id"], kind, kept, error))
    return out
