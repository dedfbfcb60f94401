"""Memory across conversations: the stored records, their scopes' versions, switches, jobs and locks.

Every key of one workspace's memory shares the hash tag ``{mem:<workspace>}``, so multi-key operations stay in
one slot of a Redis Cluster:

``<prefix>:{mem:<ws>}:rec``              hash    record id → record JSON (the live records)
``<prefix>:{mem:<ws>}:gen``              string  bumped on every change of the records (readers cache by it)
``<prefix>:{mem:<ws>}:changes``          zset    record id → the generation that last wrote or removed it (the
                                                 last ``CHANGES_KEPT`` generations: a reader catches up by them)
``<prefix>:{mem:<ws>}:shown|uses|last``  hash    record id → times shown, times cited, last shown or cited
``<prefix>:{mem:<ws>}:switch``           hash    ``workspace`` / ``channel:<id>`` → ``on`` | ``off``
``<prefix>:{mem:<ws>}:job:<conv>``       string  a conversation's extraction job (watermark, outcome, attempts)
``<prefix>:{mem:<ws>}:lock:<name>``      string  a lease (extraction of a conversation, consolidation of a scope)
``<prefix>:{mem:<ws>}:ver:<scope>``      list    the scope's consolidation versions, newest first (two kept)
``<prefix>:{mem:<ws>}:gone``             zset    tombstones: ``msg:<channel>:<id>`` of a deleted, edited or forgotten
                                                 source message → when it was retracted, kept for the retention period
``<prefix>:{mem:<ws>}:edited``           hash    the tombstone of an edited (not deleted) source → the version of its
                                                 text now (:func:`text_version`): that version is not retracted

A record cites each source at the version of its text it was derived from. A tombstone retracts every version of its
message but the one ``edited`` names (none for a deletion): a record derived from an edited message's new text is
current, one derived from its old text is not (readers show it SUSPECT until its conversation is extracted again).
Every write of records (an extraction's, a consolidation's, a retraction's rewrite) runs in one script that first
looks up each record's sources among the tombstones: a record derived from a retracted version is never written.

Knows no Slack and no model: what a record says and who may see it is decided in ``services.memory``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from .base import RedisStore, _text
from .base import glob_escape as _glob_escape
from .errors import CorruptRecordError, ThreadkeeperError


class RecordChangedError(ThreadkeeperError):
    """A record a writer read was changed by another writer before its write: read again."""

    def __init__(self, workspace: str) -> None:
        super().__init__(f"a memory record of workspace {workspace} changed while it was being rewritten")

Kind = Literal["fact", "decision", "constraint", "identifier", "outcome"]
Scope = Literal["conversation", "channel", "workspace"]
Visibility = Literal["public", "private", "dm"]
KEPT_VERSIONS = 2
"""A scope keeps its newest consolidation and the one before it."""
CHANGES_KEPT = 1000
"""Generations the change log keeps: a reader further behind reads the records whole."""

_WRITE = """
-- KEYS: rec, gen, gone, shown, uses, last, ver, changes, edited. ARGV: records count, reset usage (1|0), version JSON
-- or '', versions kept, retention seconds, expire-at (0: leave), checks count, generations the change log keeps, the
-- first generation of a new workspace, then per check: id, the JSON it must still have ('' : absent); then per
-- record: id, JSON, marks count, marks each with the version of the text it cites; then the ids to remove. A check
-- that fails: nothing is written, {'changed'} is returned; written: {'done', how many of the ids to remove were stored}. Any record citing a retracted version (a tombstone whose
-- edited version is not the one cited): nothing is written, each tombstone hit is returned with the version now
-- ('' : deleted).
local n = tonumber(ARGV[1])
local i = 10
for _ = 1, tonumber(ARGV[7]) do
  local now = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  if now ~= ARGV[i + 1] then return {'changed'} end
  i = i + 2
end
local hits, fields, written = {}, {}, {}
for _ = 1, n do
  local id, json, m = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  i = i + 3
  for k = i, i + 2 * m - 1, 2 do
    if redis.call('ZSCORE', KEYS[3], ARGV[k]) then
      local now = redis.call('HGET', KEYS[9], ARGV[k])
      if not now or now ~= ARGV[k + 1] then
        hits[#hits + 1] = ARGV[k]
        hits[#hits + 1] = now or ''
      end
    end
  end
  i = i + 2 * m
  fields[#fields + 1] = id
  fields[#fields + 1] = json
  written[#written + 1] = id
end
if #hits > 0 then return hits end
local removed = {}
for k = i, #ARGV do removed[#removed + 1] = ARGV[k] end
local function each(cmd, key, items)
  for s = 1, #items, 1000 do
    redis.call(cmd, key, unpack(items, s, math.min(s + 999, #items)))
  end
end
each('HSET', KEYS[1], fields)
local deleted = 0
for s = 1, #removed, 1000 do
  deleted = deleted + redis.call('HDEL', KEYS[1], unpack(removed, s, math.min(s + 999, #removed)))
end
local reset = removed
if ARGV[2] == '1' then
  reset = {}
  for _, id in ipairs(removed) do reset[#reset + 1] = id end
  for _, id in ipairs(written) do reset[#reset + 1] = id end
end
for k = 4, 6 do each('HDEL', KEYS[k], reset) end
if ARGV[3] ~= '' then
  redis.call('LPUSH', KEYS[7], ARGV[3])
  redis.call('LTRIM', KEYS[7], 0, tonumber(ARGV[4]) - 1)
  redis.call('EXPIRE', KEYS[7], ARGV[5])
end
if ARGV[6] ~= '0' then
  redis.call('EXPIREAT', KEYS[1], ARGV[6], 'GT')
  redis.call('EXPIREAT', KEYS[1], ARGV[6], 'NX')
end
redis.call('SET', KEYS[2], ARGV[9], 'NX')
local g = redis.call('INCR', KEYS[2])
local changed = {}
for _, id in ipairs(written) do changed[#changed + 1] = g; changed[#changed + 1] = id end
for _, id in ipairs(removed) do changed[#changed + 1] = g; changed[#changed + 1] = id end
each('ZADD', KEYS[8], changed)
redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', g - tonumber(ARGV[8]))
redis.call('EXPIRE', KEYS[8], ARGV[5])
return {'done', deleted}
"""
_TOMBSTONE = """
-- KEYS: gone, edited, gen. ARGV: now, retention seconds, the first generation of a new workspace, the version of the
-- text now ('' : deleted), then the marks. Tombstones past the retention period go, with their versions.
local now, keep = tonumber(ARGV[1]), tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - keep)
for s = 1, #old, 1000 do redis.call('HDEL', KEYS[2], unpack(old, s, math.min(s + 999, #old))) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - keep)
for k = 5, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[k])
  if ARGV[4] == '' then redis.call('HDEL', KEYS[2], ARGV[k]) else redis.call('HSET', KEYS[2], ARGV[k], ARGV[4]) end
end
for k = 1, 2 do redis.call('EXPIRE', KEYS[k], keep) end
redis.call('SET', KEYS[3], ARGV[3], 'NX')
return redis.call('INCR', KEYS[3])
"""
_SETTLE = """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[3], ARGV[1])
"""


def message_mark(channel: str, message_id: str) -> str:
    """A source message's tombstone (a message id is unique within its channel)."""
    return f"msg:{channel}:{message_id}"


def any_channel_mark(message_id: str) -> str:
    """A source message's tombstone by its id alone: what a record merged before merged records kept their parts cites
    (it does not know which channel each of its sources was in), so a retraction in any channel reaches it."""
    return f"id:{message_id}"


def text_version(text: str) -> str:
    """The version of a source message's text a record cites (and an edit's tombstone names as the one now)."""
    return hashlib.sha1(text.encode()).hexdigest()[:12]


Tombstones = Mapping[str, "str | None"]
"""Tombstone → the version of its message's text now (an edited message), or None (deleted: every version)."""


def _retracted(cited: Mapping[str, str], gone: Tombstones) -> bool:
    """Whether a part citing these ``mark → version`` is retracted: one of its marks has a tombstone that does not
    keep the version it cites."""
    return any(m in gone and gone[m] != v for m, v in cited.items())


def _deleted(cited: Mapping[str, str], gone: Tombstones) -> bool:
    return any(m in gone and gone[m] is None for m in cited)


class MemoryOrigin(BaseModel):
    """One of the records a merged record was made of, as it was: what the merged record falls back to when
    another of its sources is retracted."""

    model_config = ConfigDict(extra="ignore")
    id: str
    text: str
    conversation: str
    channel: str
    source_ids: list[str]
    authors: list[str] = Field(default_factory=list)
    said_at: float
    versions: dict[str, str] = Field(default_factory=dict)
    """Source id → the version of its text this part was derived from (:func:`text_version`); a source without one
    (a part written before versions were kept) is retracted by any tombstone of it."""
    any_channel: bool = Field(default=False, exclude=True)
    """The whole of a record merged before merged records kept their parts: its sources' channels are unknown, so it
    also cites each by id alone (:func:`any_channel_mark`)."""

    def marks(self) -> set[str]:
        return set(self.cites())

    def cites(self) -> dict[str, str]:
        """Its tombstones, each with the version of the text it cites ('' : unknown)."""
        out = {message_mark(self.channel, s): self.versions.get(s, "") for s in self.source_ids}
        if self.any_channel:
            out.update({any_channel_mark(s): "" for s in self.source_ids})
        return out


class MemoryRecord(BaseModel):
    """One thing a team told the bot in one conversation, kept for the conversations that may see it."""

    model_config = ConfigDict(extra="ignore")
    id: str
    text: str = Field(min_length=1, max_length=2000)
    kind: Kind = "fact"
    workspace: str
    channel: str
    conversation: str
    visibility: Visibility
    scope: Scope
    source_ids: list[str] = Field(min_length=1)
    authors: list[str] = Field(default_factory=list)
    said_at: float
    created_at: float
    expires_at: float
    subject: str = ""
    """What a decision is about (its rarest words): a newer decision on the same subject supersedes it."""
    supersedes: list[str] = Field(default_factory=list)
    superseded_by: str | None = None
    merged_from: list[str] = Field(default_factory=list)
    origins: list[MemoryOrigin] = Field(default_factory=list)
    """A merged record's parts (itself first), each with its sources; empty for a record never merged."""
    versions: dict[str, str] = Field(default_factory=dict)
    """Source id → the version of its text the record was derived from (see :attr:`MemoryOrigin.versions`)."""
    suspect: bool = Field(default=False, exclude=True)
    """As a reader sees it: every part it has left cites an edited message's earlier text (never stored: it is seen
    through the tombstones)."""
    uses: int = 0
    """How often a reply cited it."""
    shown: int = 0
    """How often it was shown in a turn's context."""
    last_used: float | None = None
    _stored: str = PrivateAttr(default="")

    @property
    def stored(self) -> str:
        """The JSON this record was read from ('' for one not read from the store)."""
        return self._stored

    def parts(self) -> list[MemoryOrigin]:
        """What the record was made of: its origins when merged, else itself."""
        return self.origins or [MemoryOrigin(id=self.id, text=self.text, conversation=self.conversation,
                                             channel=self.channel, source_ids=self.source_ids, authors=self.authors,
                                             said_at=self.said_at, versions=self.versions,
                                             any_channel=bool(self.merged_from))]

    def marks(self) -> set[str]:
        """The tombstones any of which retracts (part of) this record."""
        return {m for part in self.parts() for m in part.marks()}

    def cites(self) -> dict[str, str]:
        """Each tombstone of its parts with the version of the text the part cites (a source two parts cite at two
        versions: the one first cited; a tombstone keeps at most one of them)."""
        out: dict[str, str] = {}
        for part in self.parts():
            for mark, version in part.cites().items():
                out.setdefault(mark, version)
        return out

    def without(self, gone: Tombstones) -> MemoryRecord | None:
        """The record once the tombstones ``gone`` retract what they retract: itself when none of its parts cites a
        retracted version, None when every part does, else a merged record that keeps only the other parts (its text,
        conversation and time those of the first part kept, its sources and authors theirs)."""
        return self._keeping([p for p in self.parts() if not _retracted(p.cites(), gone)], suspect=False)

    def seen(self, gone: Tombstones) -> MemoryRecord | None:
        """The record as a reader sees it through the tombstones ``gone``: without its retracted parts; when only
        parts citing an edited message's earlier text are left, those, marked :attr:`suspect`; None when nothing is
        left (every source deleted)."""
        current = self.without(gone)
        if current is not None:
            return current
        return self._keeping([p for p in self.parts() if not _deleted(p.cites(), gone)], suspect=True)

    def edited_only(self, gone: Tombstones) -> bool:
        """Whether no part of the record cites a deleted message (what retracts it is only edits)."""
        return not any(_deleted(p.cites(), gone) for p in self.parts())

    def _keeping(self, kept: list[MemoryOrigin], *, suspect: bool) -> MemoryRecord | None:
        if not kept:
            return None
        if len(kept) == len(self.parts()):
            return self if self.suspect == suspect else self.model_copy(update={"suspect": suspect})
        lead = kept[0]
        return self.model_copy(update={
            "text": lead.text, "conversation": lead.conversation, "channel": lead.channel, "said_at": lead.said_at,
            "source_ids": list(dict.fromkeys(s for p in kept for s in p.source_ids)),
            "authors": list(dict.fromkeys(a for p in kept for a in p.authors)),
            "versions": {s: v for p in reversed(kept) for s, v in p.versions.items()},
            "merged_from": [p.id for p in kept if p.id != self.id], "origins": kept if len(kept) > 1 else [],
            "suspect": suspect})


class ExtractionJob(BaseModel):
    """Where a conversation's extraction stands: what it read up to, and how the last run ended."""

    model_config = ConfigDict(extra="ignore")
    watermark_at: float = 0.0
    watermark_ids: list[str] = Field(default_factory=list)
    """Ids of the messages at ``watermark_at`` already read (several messages may share a time)."""
    activity: float = 0.0
    """The conversation's last activity that the last successful run covered."""
    outcome: Literal["none", "succeeded", "succeeded_empty", "failed"] = "none"
    attempts: int = 0
    retry_at: float = 0.0
    records: int = 0
    error: str | None = None
    model_calls_day: str = ""
    model_calls: int = 0
    revised: dict[str, str] = Field(default_factory=dict)
    """Edited message id → the version of its text extraction read (another version now: it is read again)."""


class MemoryVersion(BaseModel):
    model_config = ConfigDict(extra="ignore")
    number: int
    at: float
    records: list[str]
    merged: dict[str, str] = Field(default_factory=dict)
    """Duplicate id → the record it was merged into."""
    superseded: dict[str, str] = Field(default_factory=dict)
    dropped: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class MemoryChanges:
    """What changed in a workspace's records after a generation (:meth:`MemoryStore.changes`)."""

    generation: int
    written: list[MemoryRecord]
    removed: list[str]
    gone: dict[str, str | None]
    """The tombstones now (see :data:`Tombstones`)."""


def _first_generation() -> int:
    """Where a workspace's generations start: the time in microseconds. A workspace forgotten and written again starts
    past every generation a reader may still hold of it (they moved on by one per write, far slower than one per
    microsecond), so that reader finds itself more than the change log's reach behind and reads the records whole,
    never the forgotten ones. (Exact in Redis, Lua and a sorted set's scores: below 2^53.)"""
    return int(time.time() * 1_000_000)


def _tombstones(gone: Iterable[Any], edited: Mapping[Any, Any]) -> dict[str, str | None]:
    versions = {_text(k): _text(v) for k, v in edited.items()}
    return {(m := _text(raw)): versions.get(m) for raw in gone}


def _numbers(values: dict[Any, Any]) -> dict[str, float]:
    return {_text(k): float(v) for k, v in values.items()}


class MemoryStore(RedisStore):
    """Records of memory, per workspace (see the module's description for the key layout)."""

    def _base(self, workspace: str) -> str:
        if not workspace or any(c in workspace for c in "{}\n\r"):
            raise ThreadkeeperError(f"invalid workspace id {workspace!r}: it must be non-empty and contain no "
                                    "braces or line breaks")
        return f"{self.prefix}:{{mem:{workspace}}}"

    # -- records -------------------------------------------------------------------------------

    async def generation(self, workspace: str) -> int:
        raw = await self._call(self.client.get(f"{self._base(workspace)}:gen"))
        return int(raw or 0)

    async def state(self, workspace: str) -> tuple[dict[str, bool], int]:
        """The workspace's switches and the generation of its records, in one round trip."""
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(f"{base}:switch")
        pipe.get(f"{base}:gen")
        raw, generation = await self._call(pipe.execute())
        return ({(k.decode() if isinstance(k, bytes) else k): (v in (b"on", "on")) for k, v in raw.items()},
                int(generation or 0))

    async def records(self, workspace: str, *, now: float | None = None, retracted: bool = False
                      ) -> list[MemoryRecord]:
        """The live records of ``workspace`` (expired ones left out) with their usage, oldest first, as a reader may
        see them: without the parts whose sources are retracted (a record whose retraction was interrupted before it
        was rewritten is never shown). ``retracted``: as stored, for the retraction that rewrites them."""
        return (await self.snapshot(workspace, now=now, retracted=retracted)).written

    async def snapshot(self, workspace: str, *, now: float | None = None, retracted: bool = False) -> MemoryChanges:
        """:meth:`records` with the generation they are at and the tombstones now, read in one round trip."""
        base = self._base(workspace)
        # one transaction: the generation is the one the records are at (a write landing between the reads would
        # otherwise be counted as read, and a reader catching up from it would never fetch it)
        pipe = self.client.pipeline(transaction=True)
        for name in ("rec", "shown", "uses", "last"):
            pipe.hgetall(f"{base}:{name}")
        pipe.zrange(f"{base}:gone", 0, -1)
        pipe.hgetall(f"{base}:edited")
        pipe.get(f"{base}:gen")
        raw, shown, uses, last, gone_raw, edited, generation = await self._call(pipe.execute())
        gone = _tombstones(gone_raw, edited)
        # read off the event loop: a large workspace's records take seconds to validate
        out = await asyncio.to_thread(self._decoded, workspace, list(raw.items()), _numbers(shown), _numbers(uses),
                                      _numbers(last), {} if retracted else gone, time.time() if now is None else now)
        out.sort(key=lambda r: (r.created_at, r.id))
        return MemoryChanges(int(generation or 0), out, [], gone)

    def _decoded(self, workspace: str, raw: Iterable[tuple[Any, Any]], shown: dict[str, float],
                 uses: dict[str, float], last: dict[str, float], gone: Tombstones, now: float
                 ) -> list[MemoryRecord]:
        """Stored records (id, JSON) as a reader sees them: validated, expired ones left out, with their usage,
        through the tombstones ``gone``."""
        out = []
        for key, value in raw:
            try:
                record = MemoryRecord.model_validate_json(value)
            except ValidationError as exc:
                raise CorruptRecordError(f"{self._base(workspace)}:rec field {_text(key)}",
                                         str(exc).splitlines()[0]) from None
            record._stored = _text(value)
            if record.expires_at > now:
                if record.id in last:  # usage is counted beside the record (a turn writes no record JSON)
                    record.shown += int(shown.get(record.id, 0))
                    record.uses += int(uses.get(record.id, 0))
                    record.last_used = max(record.last_used or 0.0, last[record.id])
                seen = record.seen(gone) if gone else record
                if seen is not None:
                    out.append(seen)
        return out

    async def changes(self, workspace: str, since: int, *, now: float | None = None) -> MemoryChanges | None:
        """What changed in ``workspace``'s records after generation ``since``, as a reader sees it: the records
        written since (live, through the tombstones), the ids removed or expired since, and the tombstones now;
        None when the change log no longer reaches back that far (or the memory was forgotten): read them whole."""
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=False)
        pipe.get(f"{base}:gen")
        pipe.zrangebyscore(f"{base}:changes", f"({since}", "+inf")
        pipe.zrange(f"{base}:gone", 0, -1)
        pipe.hgetall(f"{base}:edited")
        pipe.exists(f"{base}:changes")
        raw_generation, raw_ids, gone_raw, edited, logged = await self._call(pipe.execute())
        generation = int(raw_generation or 0)
        if generation < since or generation - since > CHANGES_KEPT or (generation > since and not logged):
            return None  # behind what the log holds, or the log expired or was forgotten: read them whole
        ids = list(dict.fromkeys(_text(i) for i in raw_ids))
        gone = _tombstones(gone_raw, edited)
        if not ids:
            return MemoryChanges(generation, [], [], gone)
        pipe = self.client.pipeline(transaction=False)
        for name in ("rec", "shown", "uses", "last"):
            pipe.hmget(f"{base}:{name}", ids)
        raw, shown, uses, last = await self._call(pipe.execute())

        def by_id(values: list[Any]) -> dict[str, float]:
            return {i: float(v) for i, v in zip(ids, values, strict=True) if v is not None}

        written = self._decoded(workspace, [(i, v) for i, v in zip(ids, raw, strict=True) if v is not None],
                                by_id(shown), by_id(uses), by_id(last), gone, time.time() if now is None else now)
        live = {r.id for r in written}
        return MemoryChanges(generation, written, [i for i in ids if i not in live], gone)

    async def put(self, workspace: str, records: Sequence[MemoryRecord], *, removed: Sequence[str] = (),
                  unchanged: Sequence[MemoryRecord] = ()) -> list[str]:
        """Write (or overwrite) records, and delete ``removed``, unless they cite a retracted source (see
        :meth:`_write`); the workspace's memory lives as long as its longest-lived record. The ids not written.

        ``unchanged``: records as :meth:`records` read them, which must still be stored exactly so (a rewrite of
        what was read); when one changed meanwhile nothing is written and :class:`RecordChangedError` is raised,
        so the writer reads again."""
        if not records and not removed:
            return []
        return (await self._write(workspace, list(records), list(removed), reset_usage=False,
                                  unchanged=unchanged))[0]

    async def _write(self, workspace: str, records: list[MemoryRecord], removed: list[str], *, reset_usage: bool,
                     scope: str | None = None, version: MemoryVersion | None = None,
                     unchanged: Sequence[MemoryRecord] = ()) -> tuple[list[str], int]:
        """The one write of records: in one script, the ``unchanged`` records are compared with what is stored
        (any difference: nothing is written, :class:`RecordChangedError`), each record's sources are looked up among
        the tombstones and nothing is written when one is hit; then the records are taken without what was retracted
        (a merged record keeps its other parts, any other goes) and the write is tried again. The ids not written,
        as retracted, and how many of ``removed`` were stored (counted by the write itself). A record left with nothing current that lost only parts citing an edited message's earlier
        text is not written and not removed either: what is stored of it stays, which readers show as suspect until
        its conversation is extracted again."""
        base = self._base(workspace)
        script = self._script_text("_write", _WRITE)
        gone: dict[str, str | None] = {}
        dropped: list[str] = []
        keys = [f"{base}:{name}" for name in ("rec", "gen", "gone", "shown", "uses", "last")] + \
            [f"{base}:ver:{scope or '-'}", f"{base}:changes", f"{base}:edited"]
        while True:
            until = int(max(r.expires_at for r in records)) + 1 if records and not reset_usage else 0
            args: list[Any] = [len(records), "1" if reset_usage else "0",
                               version.model_dump_json() if version is not None else "", KEPT_VERSIONS,
                               self.retention_seconds, until, len(unchanged), CHANGES_KEPT, _first_generation()]
            for r in unchanged:
                args += [r.id, r.stored]
            for r in records:
                cited = sorted(r.cites().items())
                args += [r.id, r.model_dump_json(), len(cited), *(x for pair in cited for x in pair)]
            hits = await self._call(script(keys=keys, args=[*args, *removed]))
            if hits[0] in (b"done", "done"):
                return dropped, int(hits[1])
            if hits[0] in (b"changed", "changed"):
                raise RecordChangedError(workspace)
            hit = [_text(h) for h in hits]
            gone.update((mark, version or None) for mark, version in zip(hit[::2], hit[1::2], strict=True))
            kept = []
            for r in records:
                left = r.without(gone)
                if left is None:
                    dropped.append(r.id)
                    if not r.edited_only(gone):
                        removed.append(r.id)
                else:
                    kept.append(left)
            if all(a is b for a, b in zip(kept, records, strict=False)) and len(kept) == len(records):
                raise ThreadkeeperError(f"memory of workspace {workspace}: the write refused records for tombstones "
                                        f"that retract none of them ({sorted(gone)[:3]}); nothing was written")
            records = kept
            if version is not None:
                version.records = [i for i in version.records if i not in dropped]
                version.dropped = list(dict.fromkeys([*version.dropped, *dropped]))

    async def tombstone(self, workspace: str, marks: Sequence[str], *, at: float | None = None,
                        version: str | None = None) -> None:
        """Retract source messages (:func:`message_mark`): from now on no record citing one is written, in one
        script. ``version``: the messages were edited, and records citing that version of their text
        (:func:`text_version`) are current; else they were deleted, and no version is. Tombstones older than the
        retention period go."""
        if not marks:
            return
        base = self._base(workspace)
        script = self._script_text("_tombstone", _TOMBSTONE)
        await self._call(script(keys=[f"{base}:gone", f"{base}:edited", f"{base}:gen"],
                                args=[repr(time.time() if at is None else at), self.retention_seconds,
                                      _first_generation(), version or "", *marks]))

    async def retracted(self, workspace: str) -> dict[str, str | None]:
        """The tombstones of ``workspace`` (see :data:`Tombstones`)."""
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=True)
        pipe.zrange(f"{base}:gone", 0, -1)
        pipe.hgetall(f"{base}:edited")
        gone, edited = await self._call(pipe.execute())
        return _tombstones(gone, edited)

    async def delete(self, workspace: str, ids: Iterable[str]) -> int:
        """Delete records (and their usage): how many of them were stored. Written through the one write of records,
        so the change log has them."""
        ids = list(ids)
        if not ids:
            return 0
        # (counted by the write that deletes them: a delete running beside it never counts a record twice)
        return (await self._write(workspace, [], list(dict.fromkeys(ids)), reset_usage=False))[1]

    async def touch(self, workspace: str, ids: Sequence[str], *, at: float, cited: bool) -> None:
        """Count records as shown (or, ``cited``, as used by a reply), in one round trip and without rewriting them:
        readers' caches stay valid (usage changes no one's visibility)."""
        if not ids:
            return
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=False)
        counter = f"{base}:{'uses' if cited else 'shown'}"
        for ident in ids:
            pipe.hincrby(counter, ident, 1)
        pipe.hset(f"{base}:last", mapping={ident: repr(at) for ident in ids})
        for name in ("uses" if cited else "shown", "last"):
            pipe.expire(f"{base}:{name}", self.retention_seconds)
        await self._call(pipe.execute())

    async def forget_workspace(self, workspace: str) -> int:
        """Delete every key of the workspace's memory; how many went. Its generation starts again from the time of
        its next write (see :data:`_FIRST_GENERATION`), past any a reader in another worker may still hold."""
        found = [k async for k in self.client.scan_iter(match=f"{_glob_escape(self._base(workspace))}:*",
                                                        count=1000)]
        for start in range(0, len(found), 500):
            await self._call(self.client.delete(*found[start:start + 500]))
        return len(found)

    async def workspaces(self) -> list[str]:
        """Workspaces that have any memory key."""
        prefix = f"{self.prefix}:{{mem:"
        found: set[str] = set()
        async for key in self.client.scan_iter(match=f"{_glob_escape(prefix)}*", count=1000):
            text = key.decode() if isinstance(key, bytes) else key
            found.add(text[len(prefix):text.index("}:", len(prefix))])
        return sorted(found)

    # -- switches ------------------------------------------------------------------------------

    async def switches(self, workspace: str) -> dict[str, bool]:
        raw = await self._call(self.client.hgetall(f"{self._base(workspace)}:switch"))
        return {(k.decode() if isinstance(k, bytes) else k): (v in (b"on", "on")) for k, v in raw.items()}

    async def set_switch(self, workspace: str, name: str, on: bool) -> None:
        await self._call(self.client.hset(f"{self._base(workspace)}:switch", name, "on" if on else "off"))

    # -- jobs and locks ------------------------------------------------------------------------

    async def job(self, workspace: str, conversation_id: str) -> ExtractionJob:
        key = f"{self._base(workspace)}:job:{conversation_id}"
        raw = await self._call(self.client.get(key))
        if raw is None:
            return ExtractionJob()
        try:
            return ExtractionJob.model_validate_json(raw)
        except ValidationError as exc:
            raise CorruptRecordError(key, str(exc).splitlines()[0]) from None

    async def save_job(self, workspace: str, conversation_id: str, job: ExtractionJob) -> None:
        await self._call(self.client.set(f"{self._base(workspace)}:job:{conversation_id}", job.model_dump_json(),
                                         ex=self.retention_seconds))

    async def forget_job(self, workspace: str, conversation_id: str) -> None:
        await self._call(self.client.delete(f"{self._base(workspace)}:job:{conversation_id}"))

    async def claim(self, workspace: str, name: str, seconds: float) -> str | None:
        """A lease on ``name`` (one holder at a time): its token, or None when another holds it."""
        return await self._take_lease(f"{self._base(workspace)}:lock:{name}", seconds)

    async def renew(self, workspace: str, name: str, token: str, seconds: float) -> bool:
        return await self._renew_lease(f"{self._base(workspace)}:lock:{name}", token, seconds)

    async def release(self, workspace: str, name: str, token: str) -> bool:
        return await self._release_lease(f"{self._base(workspace)}:lock:{name}", token)

    def _script_text(self, name: str, text: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.client.register_script(text)
        return script

    # -- versions ------------------------------------------------------------------------------

    async def versions(self, workspace: str, scope: str) -> list[MemoryVersion]:
        key = f"{self._base(workspace)}:ver:{scope}"
        raw = await self._call(self.client.lrange(key, 0, -1))
        try:
            return [MemoryVersion.model_validate_json(v) for v in raw]
        except ValidationError as exc:
            raise CorruptRecordError(key, str(exc).splitlines()[0]) from None

    async def write_version(self, workspace: str, scope: str, version: MemoryVersion,
                            records: Sequence[MemoryRecord], removed: Sequence[str]) -> list[str]:
        """One consolidation, atomically: its records written (their usage is folded into them: the counters start
        again), the removed ones deleted, the version pushed (the previous version kept); a record citing a retracted
        source is not written (see :meth:`_write`). The ids not written, as retracted."""
        return (await self._write(workspace, list(records), list(removed), reset_usage=True, scope=scope,
                                  version=version))[0]

    # -- idle conversations --------------------------------------------------------------------

    async def idle_conversations(self, *, idle_before: float, active_after: float,
                                 limit: int) -> list[tuple[str, float]]:
        """Conversations owing extraction (the activity registry: a conversation enters it when an item arrives and
        leaves it once extracted, see :meth:`settle`) whose last inbound item is between ``active_after`` and
        ``idle_before``, the longest idle first: ``(id, last activity)``. Those active before ``active_after`` (past
        the retention period) leave the registry here."""
        from .keys import activity_key

        pipe = self.client.pipeline(transaction=False)
        pipe.zremrangebyscore(activity_key(self.prefix), "-inf", f"({active_after!r}")
        pipe.zrangebyscore(activity_key(self.prefix), active_after, idle_before, start=0, num=limit, withscores=True)
        _, raw = await self._call(pipe.execute())
        return [((k.decode() if isinstance(k, bytes) else k), float(s)) for k, s in raw]

    async def owe(self, conversations: Sequence[tuple[str, float]]) -> int:
        """Put conversations back in the activity registry (memory switched on where they are), each with the time of
        its last activity, unless it is there already; how many were added."""
        from .keys import activity_key

        added = 0
        for start in range(0, len(conversations), 1000):
            part = dict(conversations[start:start + 1000])
            added += int(await self._call(self.client.zadd(activity_key(self.prefix), part, nx=True)))
        return added

    async def settle(self, conversation_id: str, activity: float, *, until: float | None = None) -> bool:
        """The conversation owes no extraction for the activity ``activity`` read from the registry: it leaves the
        registry, or with ``until`` is due again then (a retry); unless an item arrived since (its activity moved),
        in one script. Whether it changed anything."""
        from .keys import activity_key

        script = self._script_text("_settle", _SETTLE)
        return bool(await self._call(script(keys=[activity_key(self.prefix)],
                                            args=[conversation_id, repr(activity),
                                                  "" if until is None else repr(until)])))


def record_json(record: MemoryRecord) -> str:
    """A record as the CLI prints it."""
    return json.dumps(record.model_dump(), ensure_ascii=False, indent=2)
