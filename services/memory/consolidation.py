"""Consolidation, memory's second phase: per scope under one lock, duplicates merged, a newer decision on the same
subject supersedes the older one (both kept, the older marked), records unused for ``max_unused_days`` dropped; each
consolidation is a new version of the scope, the previous one kept."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

from threadkeeper.persistence.memory import MemoryRecord, MemoryStore, MemoryVersion

from ..text import terms
from .config import DAY, MemoryConfig
from .lease import held


class Consolidator:
    """Consolidation over one :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, *, config: MemoryConfig, clock: Callable[[], float] = time.time) -> None:
        self.store, self.config, self.clock = store, config, clock

    async def consolidate(self, workspace: str, scope: str) -> MemoryVersion | None:
        """Merge duplicates, supersede older decisions on the same subject, drop the unused, as a new version of
        ``scope`` (``workspace`` or ``channel:<id>``); None when another worker holds the scope's lock."""
        async with held(self.store, workspace, f"consolidate:{scope}", self.config.lease_seconds) as token:
            if token is None:
                return None
            now = self.clock()
            every = await self.store.records(workspace, now=now)
            mine = [r for r in every if _scope_key(r) == scope]
            version, changed, removed = consolidated(mine, now=now, max_unused_days=self.config.max_unused_days)
            previous = await self.store.versions(workspace, scope)
            version.number = (previous[0].number + 1) if previous else 1
            await self.store.write_version(workspace, scope, version, changed, removed)
            return version


def _scope_key(record: MemoryRecord) -> str:
    return "workspace" if record.scope == "workspace" else f"channel:{record.channel}"


DUPLICATE_SHARE = 0.85
"""Two records of one kind are duplicates when they share this share of the words of the longer one."""


def _same(ta: frozenset[str], tb: frozenset[str]) -> bool:
    return len(ta & tb) >= DUPLICATE_SHARE * max(len(ta), len(tb))


def _same_subject(old: MemoryRecord, new: MemoryRecord) -> bool:
    a, b = set(old.subject.split()), set(new.subject.split())
    shared = a & b
    return len(shared) >= 2 and len(shared) * 2 >= min(len(a), len(b))


def consolidated(records: Sequence[MemoryRecord], *, now: float, max_unused_days: float
                 ) -> tuple[MemoryVersion, list[MemoryRecord], list[str]]:
    """One scope's consolidation as a pure function: the version, the records it rewrites, the ids it removes."""
    removed: list[str] = []
    merged: dict[str, str] = {}
    superseded: dict[str, str] = {}
    dropped: list[str] = []
    alive: list[MemoryRecord] = []
    for r in sorted(records, key=lambda r: (r.said_at, r.id)):
        last = r.last_used if r.last_used is not None else r.created_at
        if r.expires_at <= now or now - last > max_unused_days * DAY:
            dropped.append(r.id)
            continue
        alive.append(r.model_copy(deep=True))
    kept: list[MemoryRecord] = []
    words = {r.id: frozenset(terms(r.text)) or frozenset([r.text]) for r in alive}
    df = Counter(w for ws in words.values() for w in ws)
    holders: dict[tuple[str, str], list[MemoryRecord]] = {}
    """(kind, word) → kept records with that word: a duplicate lacks at most 15% of the words, so it holds one of
    the rarest 1 + 15% of them, and is found among their holders."""
    for r in alive:
        mine = words[r.id]
        rare = sorted(mine, key=lambda w: (df[w], w))[:1 + int((1 - DUPLICATE_SHARE) * len(mine))]
        candidates = {id(k): k for w in rare for k in holders.get((r.kind, w), ())}
        twin = next((k for k in candidates.values() if _same(words[k.id], mine)), None)
        if twin is None:
            kept.append(r)
            for w in mine:
                holders.setdefault((r.kind, w), []).append(r)
            continue
        parts = twin.parts()  # before its sources grow: each part keeps its own, for a retraction of one of them
        twin.origins = [*parts, *(p for p in r.parts() if p.id not in {q.id for q in parts})]
        twin.source_ids = list(dict.fromkeys([*twin.source_ids, *r.source_ids]))
        twin.versions = {**r.versions, **twin.versions}
        twin.authors = list(dict.fromkeys([*twin.authors, *r.authors]))
        twin.merged_from = list(dict.fromkeys([*twin.merged_from, r.id, *r.merged_from]))
        twin.uses += r.uses
        twin.shown += r.shown
        twin.expires_at = max(twin.expires_at, r.expires_at)
        if r.last_used is not None:
            twin.last_used = max(twin.last_used or 0.0, r.last_used)
        merged[r.id] = twin.id
    decisions = [r for r in kept if r.kind == "decision"]
    for i, new in enumerate(decisions):
        for old in decisions[:i]:
            if old.superseded_by is None and old.said_at < new.said_at and _same_subject(old, new):
                old.superseded_by = new.id
                new.supersedes = list(dict.fromkeys([*new.supersedes, old.id]))
                superseded[old.id] = new.id
    removed = dropped + list(merged)
    kept.sort(key=lambda r: (-r.uses, -r.shown, -(r.last_used or r.said_at)))
    version = MemoryVersion(number=0, at=now, records=[r.id for r in kept], merged=merged, superseded=superseded,
                            dropped=dropped)
    return version, kept, removed
