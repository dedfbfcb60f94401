"""Memory across conversations: the stored records, their scopes' versions, switches, jobs and locks.

Every key of one workspace's memory shares the hash tag ``{mem:<workspace>}``, so multi-key operations stay in
one slot of a Redis Cluster:

``<prefix>:{mem:<ws>}:rec``              hash    record id → record JSON (the live records)
``<prefix>:{mem:<ws>}:gen``              string  bumped on every change of the records (readers cache by it)
``<prefix>:{mem:<ws>}:shown|uses|last``  hash    record id → times shown, times cited, last shown or cited
``<prefix>:{mem:<ws>}:switch``           hash    ``workspace`` / ``channel:<id>`` → ``on`` | ``off``
``<prefix>:{mem:<ws>}:job:<conv>``       string  a conversation's extraction job (watermark, outcome, attempts)
``<prefix>:{mem:<ws>}:lock:<name>``      string  a lease (extraction of a conversation, consolidation of a scope)
``<prefix>:{mem:<ws>}:ver:<scope>``      list    the scope's consolidation versions, newest first (two kept)

Knows no Slack and no model: what a record says and who may see it is decided in ``services.memory``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .base import RedisStore
from .base import glob_escape as _glob_escape
from .errors import CorruptRecordError, ThreadkeeperError

Kind = Literal["fact", "decision", "constraint", "identifier", "outcome"]
Scope = Literal["conversation", "channel", "workspace"]
Visibility = Literal["public", "private", "dm"]
KEPT_VERSIONS = 2
"""A scope keeps its newest consolidation and the one before it."""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


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
    uses: int = 0
    """How often a reply cited it."""
    shown: int = 0
    """How often it was shown in a turn's context."""
    last_used: float | None = None


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


class MemoryVersion(BaseModel):
    model_config = ConfigDict(extra="ignore")
    number: int
    at: float
    records: list[str]
    merged: dict[str, str] = Field(default_factory=dict)
    """Duplicate id → the record it was merged into."""
    superseded: dict[str, str] = Field(default_factory=dict)
    dropped: list[str] = Field(default_factory=list)


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

    async def records(self, workspace: str, *, now: float | None = None) -> list[MemoryRecord]:
        """The live records of ``workspace`` (expired ones left out) with their usage, oldest first."""
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=False)
        for name in ("rec", "shown", "uses", "last"):
            pipe.hgetall(f"{base}:{name}")
        raw, shown, uses, last = await self._call(pipe.execute())

        def decoded(values: dict[Any, Any]) -> dict[str, float]:
            return {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in values.items()}

        shown, uses, last = decoded(shown), decoded(uses), decoded(last)
        now = time.time() if now is None else now
        out = []
        for key, value in raw.items():
            try:
                record = MemoryRecord.model_validate_json(value)
            except ValidationError as exc:
                name = key.decode() if isinstance(key, bytes) else key
                raise CorruptRecordError(f"{self._base(workspace)}:rec field {name}",
                                         str(exc).splitlines()[0]) from None
            if record.expires_at > now:
                if record.id in last:  # usage is counted beside the record (a turn writes no record JSON)
                    record.shown += int(shown.get(record.id, 0))
                    record.uses += int(uses.get(record.id, 0))
                    record.last_used = max(record.last_used or 0.0, last[record.id])
                out.append(record)
        out.sort(key=lambda r: (r.created_at, r.id))
        return out

    async def put(self, workspace: str, records: Sequence[MemoryRecord]) -> None:
        """Write (or overwrite) records; the workspace's memory lives as long as its longest-lived record."""
        if not records:
            return
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(f"{base}:rec", mapping={r.id: r.model_dump_json() for r in records})
        pipe.incr(f"{base}:gen")
        until = max(r.expires_at for r in records)
        pipe.expireat(f"{base}:rec", int(until) + 1, gt=True)
        pipe.expireat(f"{base}:rec", int(until) + 1, nx=True)
        await self._call(pipe.execute())

    async def delete(self, workspace: str, ids: Iterable[str]) -> int:
        ids = list(ids)
        if not ids:
            return 0
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(f"{base}:rec", *ids)
        for name in ("shown", "uses", "last"):
            pipe.hdel(f"{base}:{name}", *ids)
        pipe.incr(f"{base}:gen")
        deleted = (await self._call(pipe.execute()))[0]
        return int(deleted)

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
        """Delete every key of the workspace's memory; how many went."""
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
        token = uuid.uuid4().hex
        ok = await self._call(self.client.set(f"{self._base(workspace)}:lock:{name}", token, nx=True,
                                              px=max(1, int(seconds * 1000))))
        return token if ok else None

    async def renew(self, workspace: str, name: str, token: str, seconds: float) -> bool:
        script = self._script_text("_renew", _RENEW)
        return bool(await self._call(script(keys=[f"{self._base(workspace)}:lock:{name}"],
                                            args=[token, max(1, int(seconds * 1000))])))

    async def release(self, workspace: str, name: str, token: str) -> bool:
        script = self._script_text("_release", _RELEASE)
        return bool(await self._call(script(keys=[f"{self._base(workspace)}:lock:{name}"], args=[token])))

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
                            records: Sequence[MemoryRecord], removed: Sequence[str]) -> None:
        """One consolidation, atomically: its records written, the removed ones deleted, the version pushed (the
        previous version kept)."""
        base = self._base(workspace)
        pipe = self.client.pipeline(transaction=True)
        if records:  # their usage is folded into them: the counters start again
            pipe.hset(f"{base}:rec", mapping={r.id: r.model_dump_json() for r in records})
        gone = [*removed, *(r.id for r in records)]
        if removed:
            pipe.hdel(f"{base}:rec", *removed)
        if gone:
            for name in ("shown", "uses", "last"):
                pipe.hdel(f"{base}:{name}", *gone)
        pipe.lpush(f"{base}:ver:{scope}", version.model_dump_json())
        pipe.ltrim(f"{base}:ver:{scope}", 0, KEPT_VERSIONS - 1)
        pipe.expire(f"{base}:ver:{scope}", self.retention_seconds)
        pipe.incr(f"{base}:gen")
        await self._call(pipe.execute())

    # -- idle conversations --------------------------------------------------------------------

    async def idle_conversations(self, *, idle_before: float, active_after: float,
                                 limit: int) -> list[tuple[str, float]]:
        """Conversations of the activity registry whose last inbound item is between ``active_after`` and
        ``idle_before``, oldest first: ``(id, last activity)``."""
        from .keys import activity_key

        raw = await self._call(self.client.zrangebyscore(activity_key(self.prefix), active_after, idle_before,
                                                         start=0, num=limit, withscores=True))
        return [((k.decode() if isinstance(k, bytes) else k), float(s)) for k, s in raw]


def record_json(record: MemoryRecord) -> str:
    """A record as the CLI prints it."""
    return json.dumps(record.model_dump(), ensure_ascii=False, indent=2)
