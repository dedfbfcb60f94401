"""What memory's jobs are set to, and the calendar they count in: a record's day (how the block groups records, and
the day a daily cap of model calls counts)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

DAY = 86_400.0


def day_of(at: float) -> str:
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class MemoryConfig:
    workspaces: frozenset[str] = frozenset()
    """Workspaces with memory on (``*``: every workspace); a stored switch overrides."""
    channels: frozenset[str] = frozenset()
    """Channels with memory on within such a workspace (``*``: every channel); a stored switch overrides."""
    idle_seconds: float = 1800.0
    ttl_days: float = 90.0
    max_unused_days: float = 60.0
    claims_per_sweep: int = 20
    lease_seconds: float = 60.0
    retry_seconds: float = 300.0
    max_attempts: int = 5
    notes_share: float = 1.0
    """An extraction keeps the most informative notes within this share of all its notes' tokens (1.0: every note
    the ledger keeps, a person's repeats dropped; chatter has no note). On REALTALK at 8k, 0.5 kept 24% of answers
    where 1.0 kept 35%: a note left out is a fact no later thread can find."""
    model_calls_per_day: int = 200
    membership_seconds: float = 60.0
