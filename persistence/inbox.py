"""Per-conversation inbox (durable append with dedup), and the lease that makes one worker own a thread."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from .base import RedisStore
from .errors import CorruptRecordError
from .keys import activity_key, dead_registry_key, pending_key
from .models import InboxItem, Lease

log = logging.getLogger("threadkeeper.inbox")


def unreadable_because(exc: ValidationError) -> str:
    """Why a stored item cannot be read, in one line: the first problem, where it is."""
    errors = exc.errors()
    if not errors:
        return f"item: {str(exc).splitlines()[0]}"
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"]) or "item"
    return f"{where}: {first['msg']}"


def why_unreadable(raw: str) -> str | None:
    """Why this version cannot read a stored inbox item (a dead letter), in one line; None when it can now (a dead
    letter that ``retry_dead_letters`` would queue again)."""
    try:
        InboxItem.model_validate_json(raw)
    except ValidationError as exc:
        return unreadable_because(exc)
    return None


class Inbox(RedisStore):
    """Inbound events wait here until a turn takes them; they leave only when that turn completes."""

    async def append(self, conversation_id: str, item: InboxItem, *, dedup_ttl_seconds: int = 86_400,
                     front: bool = False, flags: Mapping[str, str] | None = None,
                     thread_of: tuple[str, str] | None = None) -> bool:
        """Append ``item`` durably unless a copy of it was seen (:meth:`InboxItem.dedup_keys`); returns whether it
        was appended.

        Its dedup keys are set in the same atomic step, so a retried event can never be appended twice. With ``front`` the item goes before every waiting item: only
        for the holder of the conversation's lease while no turn has taken items (a turn counts what it
        takes from the head). ``flags`` are set on the conversation's notes in the same step (what the transport
        knows of it, such as the channel's privacy), only when the item is appended.
        """
        keys = self.keys(conversation_id)
        dkeys = [keys.dedup(k) for k in item.dedup_keys()]
        now = time.time()
        # The registry lives in another hash slot, so it cannot join the script. The conversation is marked
        # as owing work after its item is queued (in the same round trip where Redis keeps the order), so a lease
        # holder that drains it (and unmarks it, then looks again: ``unmark_pending``) can never leave a queued
        # item unmarked; a duplicate marks it too, and the next opening finds nothing to do.

        def then(pipe: Any) -> None:
            self._marking(pipe, conversation_id, active=True, now=now)
            self._listing(pipe, conversation_id, now)
            if thread_of is not None:  # (the reply's own key, the thread it is in): see NotesStore.remember_thread
                pipe.set(self.keys(thread_of[0]).thread, thread_of[1], ex=self.retention_seconds)

        appended = await self._run_then("ENQUEUE", [*keys.durable, *dkeys],
                                        [item.model_dump_json(), max(1, dedup_ttl_seconds), self.retention_seconds,
                                         now, "front" if front else "back", json.dumps(dict(flags)) if flags else ""],
                                        then)
        return bool(int(appended))

    @property
    def pending_key(self) -> str:
        return pending_key(self.prefix)

    async def mark_pending(self, conversation_id: str, *, active: bool = False) -> None:
        """Record that the conversation owes work (queued items, a reply not yet delivered); with ``active``, that
        an item just arrived (the activity registry memory's extraction reads)."""
        pipe = self.client.pipeline(transaction=False)
        self._marking(pipe, conversation_id, active=active, now=time.time())
        await self._call(pipe.execute())

    def _marking(self, pipe: Any, conversation_id: str, *, active: bool, now: float) -> None:
        pipe.zadd(self.pending_key, {conversation_id: now})
        pipe.expire(self.pending_key, self.retention_seconds)
        if active:
            pipe.zadd(activity_key(self.prefix), {conversation_id: now})
            pipe.expire(activity_key(self.prefix), self.retention_seconds)

    async def unmark_pending(self, conversation_id: str) -> None:
        """Take the conversation off the registry of owed work. Only its lease holder does this, once it has
        drained the inbox, and it then looks at the inbox again and marks it back if an item arrived
        meanwhile (``append`` marks after queueing, so no interleaving loses an item)."""
        await self._call(self.client.zrem(self.pending_key, conversation_id))

    async def pending_conversations(self, limit: int = 10_000) -> list[str]:
        """Conversations that owe work, the longest waiting first: one read, whatever the number of
        conversations stored or active."""
        raw = await self._call(self.client.zrange(self.pending_key, 0, max(1, limit) - 1))
        return [r.decode() if isinstance(r, bytes) else r for r in raw]

    async def peek(self, conversation_id: str, *, start: int = 0, quarantine: bool = False,
                   raw: list[Any] | None = None) -> list[InboxItem]:
        """Items waiting, oldest first, from ``start`` on. Nothing is removed, except with ``quarantine``.
        ``raw``: the stored items from ``start`` on, already read (a turn's opening reads them with its lease).

        An item that cannot be read (corrupt, or written by an incompatible version) must not wedge its
        thread: it is skipped with an error in the log, and with ``quarantine`` (the turn that would take it)
        moved to the conversation's dead letters (``dead_letters``), atomically and only if it is still
        where it was read.
        """
        keys = self.keys(conversation_id)
        for _ in range(5):
            if raw is None:
                raw = await self._call(self.client.lrange(keys.inbox, start, -1))
            items: list[InboxItem] = []
            bad: list[tuple[int, Any, str]] = []
            for offset, value in enumerate(raw):
                try:
                    items.append(InboxItem.model_validate_json(value))
                except ValidationError as exc:
                    bad.append((start + offset, value, unreadable_because(exc)))
            if not bad:
                return items
            for index, value, why in bad:
                log.error("unreadable inbox item %s[%d] skipped%s: %s", keys.inbox, index,
                          " and moved to the dead letters" if quarantine else "", why)
            if not quarantine:
                return items
            moved = 0
            for index, value, _ in bad:  # in order; each one moved shifts the later ones down by one
                moved += int(await self._run("QUARANTINE", [keys.inbox, keys.dead],
                                             [index - moved, value, self.retention_seconds]))
            if moved:
                pipe = self.client.pipeline(transaction=False)
                pipe.zadd(self.dead_key, {conversation_id: time.time()})
                pipe.expire(self.dead_key, self.retention_seconds)
                await self._call(pipe.execute())
            if moved == len(bad):
                return items
            raw = None
        raise CorruptRecordError(keys.inbox, "unreadable items kept moving while being set aside; try again")

    @property
    def dead_key(self) -> str:
        return dead_registry_key(self.prefix)

    async def dead_letters(self, conversation_id: str) -> list[str]:
        """Inbox items set aside as unreadable, as they were stored."""
        raw = await self._call(self.client.lrange(self.keys(conversation_id).dead, 0, -1))
        return [r.decode() if isinstance(r, bytes) else r for r in raw]

    async def dead_letter_counts(self) -> dict[str, int]:
        """Conversation → how many dead letters it holds, for every conversation that holds any (entries whose
        dead letters expired or were retried are pruned)."""
        raw = await self._call(self.client.zrange(self.dead_key, 0, -1))
        cids = [r.decode() if isinstance(r, bytes) else r for r in raw]
        counts: dict[str, int] = {}
        for cid in cids:
            n = int(await self._call(self.client.llen(self.keys(cid).dead)))
            if n:
                counts[cid] = n
            else:
                await self._call(self.client.zrem(self.dead_key, cid))
        return counts

    async def retry_dead_letters(self, conversation_id: str) -> tuple[int, list[str]]:
        """Queue again the conversation's dead letters that this version reads (after the items waiting); the
        others stay set aside. Returns how many were queued and, for each one kept, why it cannot be read."""
        keys = self.keys(conversation_id)
        queued, kept = 0, []
        for value in await self.dead_letters(conversation_id):
            try:
                InboxItem.model_validate_json(value)
            except ValidationError as exc:
                kept.append(unreadable_because(exc))
                continue
            queued += int(await self._run("REQUEUE", [keys.dead, keys.inbox], [value, self.retention_seconds]))
        if queued:
            await self.mark_pending(conversation_id)
        if not await self._call(self.client.llen(keys.dead)):
            await self._call(self.client.zrem(self.dead_key, conversation_id))
        return queued, kept

    async def size(self, conversation_id: str) -> int:
        return int(await self._call(self.client.llen(self.keys(conversation_id).inbox)))


class LeaseManager(RedisStore):
    """One worker per conversation: a token with an expiry, renewable and releasable only by its holder."""

    async def acquire(self, conversation_id: str, ttl_seconds: float) -> Lease | None:
        """Take the lease if nobody holds it (or the holder's lease expired); None otherwise."""
        token = await self._take_lease(self.keys(conversation_id).lease, ttl_seconds)
        return Lease(conversation_id, token, time.time() + ttl_seconds) if token is not None else None

    async def renew(self, lease: Lease, ttl_seconds: float) -> Lease | None:
        """Extend a held lease; None when it was lost (expired and taken over)."""
        ok = await self._renew_lease(self.keys(lease.conversation_id).lease, lease.token, ttl_seconds)
        return Lease(lease.conversation_id, lease.token, time.time() + ttl_seconds) if ok else None

    async def release_if_drained(self, lease: Lease) -> int | None:
        """Release ``lease`` if its conversation's inbox is empty, in one round trip: the number of items waiting
        (the lease kept), 0 (released), or None when the lease was no longer this holder's."""
        keys = self.keys(lease.conversation_id)
        waiting = int(await self._run("RELEASE_IF_DRAINED", [keys.lease, keys.inbox], [lease.token]))
        return None if waiting < 0 else waiting

    async def release(self, lease: Lease) -> bool:
        """Release a held lease; a stale holder cannot release someone else's."""
        return await self._release_lease(self.keys(lease.conversation_id).lease, lease.token)

    async def holder(self, conversation_id: str) -> str | None:
        raw = await self._call(self.client.get(self.keys(conversation_id).lease))
        return raw.decode() if isinstance(raw, bytes) else raw
