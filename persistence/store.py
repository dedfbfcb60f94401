"""The checkpoint store: durable, forked agent history per conversation on Redis.

A ``turn`` checkpoint stores only the messages it adds to its parent; a ``compaction`` checkpoint
starts a new epoch with its replacement history. Completed checkpoints never change. The head moves
only by compare-and-set. Every multi-key update is one Lua script over keys sharing a hash tag.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import redis.asyncio as aioredis
from pydantic import ValidationError

from .base import _text, glob_escape, new_id
from .cache import SegmentCache
from .errors import CorruptRecordError, HeadConflictError, NotFoundError
from .keys import ConversationKeys, directory_built_key, directory_key
from .models import (
    Checkpoint,
    CheckpointKind,
    CheckpointMeta,
    CheckpointOutcome,
    CheckpointStatus,
    ConversationState,
    ConversationSummary,
    History,
    Lease,
    LineageEntry,
    Message,
    PreparedHandoff,
    carried_tokens,
    messages_so_far,
)
from .notes import Notes
from .reading import EPOCH_PIECE, MESSAGES_PER_CALL, HistoryReader


class Opening(NamedTuple):
    """What a worker reads, with its lease, to start a turn (``CheckpointStore.open_turn``)."""

    lease: Lease
    state: ConversationState | None
    active: Checkpoint | None
    """The conversation's running or paused turn, if any."""
    inbox_start: int
    """Where the waiting items begin: after those a paused turn already took, else 0."""
    inbox_raw: list[Any]
    """The waiting items as stored, from ``inbox_start`` on (``Inbox.peek`` parses them)."""
    notes: Notes
    """The conversation's notes (edits, deletions, pins, the transport's flags)."""


class EpochChain(NamedTuple):
    """An earlier epoch, without its messages: the checkpoint it ends at (the one a compaction forked from), that
    checkpoint's record as stored, and its chain, oldest first, each checkpoint with how many messages it adds."""

    id: str
    record: tuple[Any, ...]
    chain: tuple[tuple[str, int], ...]


class Commit(NamedTuple):
    version: int
    """The conversation state's version after the head moved."""
    inbox_left: int
    """Inbox items still waiting after the ones this turn consumed left."""


def _message_args(messages: Iterable[Message]) -> list[Any]:
    """(JSON, tokens) pairs: a checkpoint's token count sums what its messages carry (:func:`carried_tokens`)."""
    args: list[Any] = []
    for message in messages:
        args.append(message.model_dump_json())
        args.append(carried_tokens(message))
    return args


def compaction_checkpoint(conversation_id: str, *, forked_from: str, messages: Sequence[Message],
                          covered_ids: Sequence[str], info: dict[str, Any] | None = None) -> Checkpoint:
    """The completed ``compaction`` checkpoint that forks ``forked_from`` with ``messages`` as its history: what
    :meth:`CheckpointStore.fork_compaction` writes (and a preview shows without writing)."""
    meta = CheckpointMeta(id=new_id(), conversation_id=conversation_id, kind=CheckpointKind.COMPACTION,
                          parent_id=forked_from, forked_from=forked_from, covered_ids=list(covered_ids),
                          info=info or {})
    return Checkpoint(meta=meta, status=CheckpointStatus.COMPLETED, message_count=len(messages),
                      token_count=sum(carried_tokens(m) for m in messages))


_LISTED = frozenset({"CREATE", "FORK_COMMIT", "CAS_HEAD"})
"""The writes that move a conversation up the directory (with every item arriving in its inbox): a turn starting, a
compaction, a head moved by an operator. A turn's appends and its commit, moments after its start, do not: what a
turn writes costs no more for the directory than one command."""


class CheckpointStore(HistoryReader):
    """Checkpoints, the head and the conversation state of every conversation."""

    def __init__(self, client: aioredis.Redis, *, prefix: str = "tk", retention_days: float = 30, url: str = "",
                 cache_messages: int = 200_000, cache_bytes: int = 128 * 1024 * 1024) -> None:
        super().__init__(client, prefix=prefix, retention_days=retention_days, url=url)
        self._segments = SegmentCache(cache_messages, cache_bytes)
        self._fences: dict[str, str] = {}
        """conversation → the lease token this process's writes carry (see :meth:`_write`)."""
        self._writing: dict[tuple[str, str], list[str]] = {}
        self._pending: dict[str, tuple[History | None, list[tuple[Checkpoint, list[Message]]]]] = {}
        """conversation → the history it extends and the checkpoints this process committed since (see
        :meth:`_committed`)."""
        """(conversation, running checkpoint) → its messages as this process wrote them (JSON): what the checkpoint
        holds once committed, so the history after a commit is known without reading it back."""

    @property
    def cached_bytes(self) -> int:
        """The estimated memory the parsed messages this process keeps hold (:func:`.cache.message_bytes`)."""
        return self._segments.bytes

    # -- writing ------------------------------------------------------------------------------

    async def _write(self, name: str, conversation_id: str, args: Sequence[Any], extra: Sequence[str] = ()) -> Any:
        """Run the fenced script ``name``: with the lease this process took when it opened the conversation's turns
        (:meth:`open_turn`, until :meth:`let_go`), refused with :class:`LeaseLostError` once another worker holds
        that lease; a process that opened none writes unfenced (orchestration, the command line). ``extra``: keys of
        the conversation the script takes after those."""
        token, now = self._fences.get(conversation_id, ""), time.time()
        return await self._fenced(name, conversation_id, token, args, extra,
                                  (lambda pipe: self._listing(pipe, conversation_id, now)) if name in _LISTED else None)

    def let_go(self, conversation_id: str) -> None:
        """This process no longer writes under the lease it opened the conversation with."""
        self._fences.pop(conversation_id, None)

    async def start_turn(self, conversation_id: str, *, parent_id: str | None = None,
                         from_head: bool = True, info: dict[str, Any] | None = None,
                         messages: Sequence[Message] = (), inbox_consumed: int = 0) -> Checkpoint:
        """Start a running ``turn`` checkpoint extending ``parent_id`` (by default the head), holding
        ``messages`` from the start; ``inbox_consumed`` counts the inbox items they came from (see ``append``)."""
        if from_head and parent_id is None:
            state = await self.get_state(conversation_id)
            parent_id = state.head_checkpoint_id if state else None
        meta = CheckpointMeta(id=new_id(), conversation_id=conversation_id, kind=CheckpointKind.TURN,
                              parent_id=parent_id, info=info or {})
        args = _message_args(messages)
        await self._create(meta, args, inbox_consumed)
        if len(self._writing) > 10_000:  # turns that ended elsewhere (a lost lease): never left running here long
            self._writing.clear()
        self._writing[(conversation_id, meta.id)] = args[::2]
        return Checkpoint(meta=meta, status=CheckpointStatus.RUNNING, message_count=len(messages),
                          token_count=sum(carried_tokens(m) for m in messages), inbox_consumed=inbox_consumed)

    async def fork_compaction(self, conversation_id: str, *, forked_from: str, messages: Sequence[Message],
                              covered_ids: Sequence[str], info: dict[str, Any] | None = None,
                              outcome: CheckpointOutcome | None = None) -> Checkpoint:
        """Write a compaction: a new epoch whose history is ``messages``, forked from ``forked_from`` (the
        summarized checkpoint, which must be the head), created completed and made the head in one atomic
        step, which also deletes the handoff planned ahead (:meth:`keep_prepared`: adopted now, or stale once the
        head starts a new epoch). ``forked_from`` and its ancestors are not touched. Raises
        :class:`HeadConflictError`, having written nothing, when the head moved.
        """
        fork = compaction_checkpoint(conversation_id, forked_from=forked_from, messages=messages,
                                     covered_ids=covered_ids, info=info)
        outcome = outcome or CheckpointOutcome()
        result = await self._write("FORK_COMMIT", conversation_id,
                                   [fork.id, forked_from, fork.meta.model_dump_json(), time.time(), self.retention_seconds,
                                    forked_from, outcome.model_dump_json(), *_message_args(messages)],
                                   extra=[self.keys(conversation_id).prepared])
        if not int(result[0]):
            raise HeadConflictError(conversation_id, forked_from, _text(result[1]) or None)
        return fork

    # -- a compaction planned ahead -------------------------------------------------------------

    async def keep_prepared(self, conversation_id: str, prepared: PreparedHandoff, *, ttl_seconds: float) -> bool:
        """Keep the handoff planned ahead for the conversation's next compaction, for ``ttl_seconds``, in place of
        any earlier one: only while the checkpoint it was planned from is the head or an ancestor of it in the
        head's epoch (one script; a plan that finished after a fork is not kept). Returns whether it was kept."""
        keys = self.keys(conversation_id)
        kept = await self._run("KEEP_PREPARED", [keys.state, keys.checkpoints, keys.prepared],
                               [prepared.from_checkpoint_id, prepared.model_dump_json(),
                                max(1, int(ttl_seconds * 1000)), 100_000])
        return bool(int(kept))

    async def prepared(self, conversation_id: str) -> PreparedHandoff | None:
        """The handoff planned ahead for the conversation's next compaction, if one is kept."""
        keys = self.keys(conversation_id)
        raw = await self._call(self.client.get(keys.prepared))
        if raw is None:
            return None
        try:
            return PreparedHandoff.model_validate_json(raw)
        except ValidationError as exc:
            raise CorruptRecordError(keys.prepared, str(exc).splitlines()[0]) from None

    async def claim_preparation(self, conversation_id: str, seconds: float) -> str | None:
        """The lease of the job that plans the conversation's next handoff ahead (one worker at a time): its token,
        or None when another holds it."""
        return await self._take_lease(self.keys(conversation_id).preparing, seconds)

    async def renew_preparation(self, conversation_id: str, token: str, seconds: float) -> bool:
        return await self._renew_lease(self.keys(conversation_id).preparing, token, seconds)

    async def release_preparation(self, conversation_id: str, token: str) -> bool:
        return await self._release_lease(self.keys(conversation_id).preparing, token)

    async def _create(self, meta: CheckpointMeta, message_args: Sequence[Any], inbox_consumed: int = 0) -> None:
        """Write a running checkpoint holding the messages of ``message_args`` (:func:`_message_args`)."""
        await self._write("CREATE", meta.conversation_id, [meta.id, meta.kind.value, meta.parent_id or "",
                                                 meta.model_dump_json(), time.time(), self.retention_seconds,
                                                 max(0, inbox_consumed), *message_args])

    async def append(self, conversation_id: str, checkpoint_id: str, messages: Sequence[Message], *,
                     inbox_consumed: int = 0) -> int:
        """Append messages to a running checkpoint; returns its message count.

        ``inbox_consumed`` counts inbox items these messages came from: they leave the inbox only
        when the checkpoint completes, so a crash before then loses nothing. The append carries an id of its own,
        so a copy the client sent again (Redis did not answer in time, and then ran both) is applied once.
        """
        args = _message_args(messages)
        count = int(await self._write("APPEND", conversation_id, [checkpoint_id, inbox_consumed, self.retention_seconds,
                                                             secrets.token_hex(8), *args]))
        written = self._writing.get((conversation_id, checkpoint_id))
        if written is not None:
            written.extend(args[::2])
        return count

    async def commit(self, conversation_id: str, checkpoint_id: str, *, expected_head: str | None,
                     outcome: CheckpointOutcome | None = None, messages: Sequence[Message] = ()) -> Commit:
        """Complete a running checkpoint and move the head to it, if the head is still ``expected_head``.

        ``messages`` are appended first, in the same atomic step (a turn's reply costs no extra round
        trip). Raises :class:`HeadConflictError` (and writes nothing) when the head moved; the caller
        retries from the new head or marks its checkpoint superseded.
        """
        keys = self.keys(conversation_id)
        outcome = outcome or CheckpointOutcome()
        args = _message_args(messages)
        written = self._writing.pop((conversation_id, checkpoint_id), None)
        result = await self._write("COMMIT", conversation_id, [checkpoint_id, expected_head or "",
                                                             outcome.model_dump_json(), time.time(),
                                                             self.retention_seconds, secrets.token_hex(8), *args])
        if not int(result[0]):
            raise HeadConflictError(conversation_id, expected_head, _text(result[1]) or None)
        if written is not None:
            self._committed(keys, checkpoint_id, expected_head, list(result[3:9]), [*written, *args[::2]])
        return Commit(version=int(result[1]), inbox_left=int(result[2]))

    def _committed(self, keys: ConversationKeys, checkpoint_id: str, parent: str | None, record: list[Any],
                   written: list[str]) -> None:
        """Keep what a checkpoint this process just committed adds to the history it extends (when this process
        holds that one, or the checkpoints it committed since): the next read of the history is built from them
        without reading them back (:meth:`_held_history`), once however many commits came in between."""
        conversation_id = keys.conversation_id
        pending = self._pending.pop(conversation_id, None)
        base = self._segments.assembled(conversation_id)
        if pending is not None and pending[1][-1][0].id == parent:
            start, steps = pending
        elif parent is None:
            start, steps = None, []
        elif base is not None and base.checkpoint.id == parent:
            start, steps = base, []
        else:
            return
        checkpoint = self._checkpoint(keys, checkpoint_id, record)
        if checkpoint.message_count != len(written) or checkpoint.meta.parent_id != parent:
            return  # not all of it was written here
        segment = self._parse(keys, checkpoint_id, "[" + ",".join(written) + "]")
        self._segments.put(conversation_id, checkpoint_id, segment)
        if self._segments.get(conversation_id, checkpoint_id) is not None and len(steps) < 256:
            # (a segment too large to keep, or many commits never read since: read back instead)
            self._pending[conversation_id] = (start, [*steps, (checkpoint, segment)])
            while len(self._pending) > 1_000:  # conversations committed here and never read again
                self._pending.pop(next(iter(self._pending)))

    def _held_history(self, conversation_id: str) -> None:
        """Build the history after the checkpoints this process committed since it last read it (see
        :meth:`_committed`) and hold it, in one pass over the messages."""
        pending = self._pending.pop(conversation_id, None)
        if pending is None:
            return
        start, steps = pending
        checkpoint = steps[-1][0]
        added = [m for _, segment in steps for m in segment]
        ids = [c.id for c, _ in steps]
        if start is None:
            history = History.model_construct(checkpoint=checkpoint, messages=added, chain=ids)
        else:
            history = start.extended(checkpoint, added, [*start.chain, *ids])
        self._segments.put_chain(conversation_id, checkpoint.id, history.chain)
        self._segments.put_assembled(conversation_id, history)

    async def _transition(self, conversation_id: str, checkpoint_id: str, status: CheckpointStatus,
                          outcome: CheckpointOutcome | None) -> None:
        if status is not CheckpointStatus.RUNNING:
            self._writing.pop((conversation_id, checkpoint_id), None)
        await self._write("TRANSITION", conversation_id, [checkpoint_id, status.value,
                                                     outcome.model_dump_json() if outcome else "",
                                                     time.time(), self.retention_seconds, secrets.token_hex(8)])

    async def fail(self, conversation_id: str, checkpoint_id: str, *, error: str, trace_id: str | None = None) -> None:
        await self._transition(conversation_id, checkpoint_id, CheckpointStatus.FAILED,
                               CheckpointOutcome(error=error, trace_id=trace_id))

    async def pause(self, conversation_id: str, checkpoint_id: str, *, resume: dict[str, Any],
                    outcome: CheckpointOutcome | None = None) -> None:
        """Save a running turn as ``awaiting_resume``; ``resume`` says what it waits for."""
        base = outcome or CheckpointOutcome()
        await self._transition(conversation_id, checkpoint_id, CheckpointStatus.AWAITING_RESUME,
                               base.model_copy(update={"resume": resume}))

    async def resume(self, conversation_id: str, checkpoint_id: str) -> None:
        """Set an ``awaiting_resume`` checkpoint running again, with exactly the history it had."""
        await self._transition(conversation_id, checkpoint_id, CheckpointStatus.RUNNING, None)

    async def supersede(self, conversation_id: str, checkpoint_id: str) -> None:
        await self._transition(conversation_id, checkpoint_id, CheckpointStatus.SUPERSEDED, None)

    async def cas_head(self, conversation_id: str, *, expected: str | None, new: str) -> int:
        """Move the head from ``expected`` to the completed checkpoint ``new``; returns the version."""
        ok, value = await self._write("CAS_HEAD", conversation_id, [expected or "", new, time.time(),
                                                               self.retention_seconds])
        if not int(ok):
            raise HeadConflictError(conversation_id, expected, _text(value) or None)
        return int(value)

    # -- reading ------------------------------------------------------------------------------

    async def open_turn(self, conversation_id: str, *, lease_seconds: float, lease: Lease | None = None,
                        ) -> Opening | None:
        """Take the conversation's lease (or renew ``lease``, for its holder's next turn) and read what a turn
        starts from, in one atomic round trip. None when another worker holds the lease (or ``lease`` was
        lost)."""
        keys = self.keys(conversation_id)
        token = lease.token if lease is not None else secrets.token_hex(12)
        out = await self._run("BEGIN", [*keys.durable, keys.lease],
                              [token, max(1, int(lease_seconds * 1000)), "renew" if lease is not None else "acquire"])
        if not int(out[0]):
            return None
        self._fences[conversation_id] = token
        state = self._state(keys, dict(zip(("head", "active", "version", "created_at", "updated_at"), out[1])))
        active_id = state.active_turn_id if state else None
        active = self._checkpoint(keys, active_id, out[2]) if active_id else None
        raw_notes = list(out[5])
        notes = Notes.parse(dict(zip(raw_notes[::2], raw_notes[1::2], strict=True)), keys.notes)
        return Opening(Lease(conversation_id, token, time.time() + lease_seconds), state, active, int(out[3]),
                       list(out[4]), notes)

    async def get_state(self, conversation_id: str) -> ConversationState | None:
        keys = self.keys(conversation_id)
        raw = await self._call(self.client.hgetall(keys.state))
        return self._state(keys, raw)

    def _state(self, keys: ConversationKeys, raw: dict[Any, Any]) -> ConversationState | None:
        fields = {_text(k): _text(v) for k, v in raw.items() if v is not None}
        if not fields:
            return None
        conversation_id = keys.conversation_id
        try:
            return ConversationState(
                conversation_id=conversation_id,
                head_checkpoint_id=fields.get("head") or None,
                active_turn_id=fields.get("active") or None,
                version=int(fields.get("version") or 0),
                created_at=float(fields["created_at"]),
                updated_at=float(fields.get("updated_at") or fields["created_at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptRecordError(keys.state, f"{type(exc).__name__}: {exc}") from None

    async def require_state(self, conversation_id: str) -> ConversationState:
        state = await self.get_state(conversation_id)
        if state is None:
            raise NotFoundError(f"no conversation {conversation_id!r} in this store "
                                f"(prefix {self.prefix!r}); check the id and THREADKEEPER_KEY_PREFIX")
        return state

    def _checkpoint(self, keys: ConversationKeys, checkpoint_id: str, rec: Sequence[Any]) -> Checkpoint:
        meta_raw, status, n, tok, out, consumed = rec
        if meta_raw is None:
            raise NotFoundError(f"no checkpoint {checkpoint_id!r} in conversation {keys.conversation_id!r}")
        where = f"{keys.checkpoints} field {checkpoint_id}"
        try:
            return Checkpoint(
                meta=CheckpointMeta.model_validate_json(meta_raw),
                status=CheckpointStatus(_text(status)),
                message_count=int(n),
                token_count=int(tok),
                outcome=CheckpointOutcome.model_validate_json(out) if out else None,
                inbox_consumed=int(consumed or 0),
            )
        except (ValidationError, ValueError, TypeError) as exc:
            raise CorruptRecordError(where, str(exc).splitlines()[0]) from None

    async def paused_turn(self, conversation_id: str) -> Checkpoint | None:
        """The conversation's turn awaiting resume, if it has one (see :attr:`Checkpoint.awaiting_resume`)."""
        state = await self.get_state(conversation_id)
        if state is None or not state.active_turn_id:
            return None
        active = await self.get(conversation_id, state.active_turn_id)
        return active if active.awaiting_resume else None

    async def get(self, conversation_id: str, checkpoint_id: str) -> Checkpoint:
        keys = self.keys(conversation_id)
        fields = [f"{checkpoint_id}:{f}" for f in ("meta", "status", "n", "tok", "out", "consumed")]
        rec = await self._call(self.client.hmget(keys.checkpoints, fields))
        return self._checkpoint(keys, checkpoint_id, rec)

    async def load_history(self, conversation_id: str, checkpoint_id: str | None = None) -> History:
        """The full history at ``checkpoint_id`` (default: the head), in one round trip when this process
        holds the history it extends (the usual case before a turn: only the new checkpoints are read)."""
        if checkpoint_id is None:
            state = await self.require_state(conversation_id)
            if state.head_checkpoint_id is None:
                raise NotFoundError(f"conversation {conversation_id!r} has no completed checkpoint yet")
            checkpoint_id = state.head_checkpoint_id
        keys = self.keys(conversation_id)
        self._held_history(conversation_id)
        base = self._segments.assembled(conversation_id)
        if base is not None and base.checkpoint.id == checkpoint_id and \
                base.checkpoint.status is CheckpointStatus.COMPLETED:
            return base  # a completed checkpoint never changes: the history this process holds is the one stored
        # Where the walk may stop: the checkpoint itself when its chain is cached (an earlier epoch's end, read
        # again by recall), the history this process holds (before a turn), the last chains read.
        first = [checkpoint_id] if self._segments.chain(conversation_id, checkpoint_id) is not None else []
        first += [base.checkpoint.id] if base is not None else []
        stops = list(dict.fromkeys([*first, *self._segments.known_chains(conversation_id)]))
        stop, rec, walked = await self._walk(keys, checkpoint_id, stops)
        checkpoint = self._checkpoint(keys, checkpoint_id, rec)
        if stop is not None and base is not None and stop == base.checkpoint.id:
            start: History | None = base
        elif stop is not None:
            start = self._from_segments(conversation_id, stop, checkpoint)
            if start is None:  # evicted meanwhile: read it all again
                self._segments.forget_chains(conversation_id)
                return await self.load_history(conversation_id, checkpoint_id)
        else:
            start = None
        new: list[Message] = []
        complete = True
        for cid, status, segment in walked:
            if status == CheckpointStatus.COMPLETED.value:
                # One copy of a segment in memory: the cached one when it is (read again through another chain).
                segment = self._segments.get(conversation_id, cid) or segment
                self._segments.put(conversation_id, cid, segment)
            else:
                complete = False
            new.extend(segment)
        walked_ids = [w[0] for w in walked]
        if start is None:
            history = History.model_construct(checkpoint=checkpoint, messages=new, chain=walked_ids)
        else:
            history = start.extended(checkpoint, new, [*start.chain, *walked_ids])
        if complete:
            self._segments.put_chain(conversation_id, checkpoint_id, history.chain)
            self._segments.put_assembled(conversation_id, history)
        return history

    def _from_segments(self, conversation_id: str, head: str, checkpoint: Checkpoint) -> History | None:
        """The messages up to ``head`` (whose chain is known) from cached segments, if all are cached (as a
        history to extend into the one at ``checkpoint``)."""
        chain = self._segments.chain(conversation_id, head)
        if not chain:
            return None
        segments = [self._segments.get(conversation_id, cid) for cid in chain]
        cached = [seg for seg in segments if seg is not None]
        if len(cached) < len(segments):
            return None
        messages = [m for seg in cached for m in seg]
        return History.model_construct(checkpoint=checkpoint, messages=messages, chain=list(chain))

    async def earlier_epochs(self, conversation_id: str, history: History, *, roots: set[str] | None = None,
                             forks: set[str] | None = None) -> list[History]:
        """The histories of the epochs before ``history``'s, newest first: each one is the history at the
        checkpoint a compaction forked from. The walk stops at an epoch whose first checkpoint is in ``roots`` or
        whose fork is in ``forks`` (what a caller already holds); both sets are updated with what it walked.

        Not a round trip per epoch: the chain of every epoch in a few calls (:meth:`epoch_chains`), then the messages
        this process does not hold (:meth:`epoch_messages`)."""
        chains = await self.epoch_chains(conversation_id, history, roots=roots, forks=forks)
        return await self.epoch_messages(conversation_id, chains)

    async def epoch_chains(self, conversation_id: str, history: History, *, roots: set[str] | None = None,
                           forks: set[str] | None = None, stopped: list[str] | None = None) -> list[EpochChain]:
        """The epochs before ``history``'s, newest first, without their messages: each one's last checkpoint (the one
        a compaction forked from) and its chain with each checkpoint's message count, walked as
        :meth:`earlier_epochs` says, in calls that each look at a bounded number of checkpoints. A chain names the
        epoch's messages for good: completed checkpoints never change. ``stopped`` gets the fork in ``forks`` the walk
        stopped at, if it stopped at one (the epochs it returns are those after it)."""
        roots = set() if roots is None else roots
        forks = set() if forks is None else forks
        if not history.chain or history.chain[0] in roots:
            return []
        keys = self.keys(conversation_id)
        root = history.checkpoint if history.chain[0] == history.checkpoint.id else None
        if root is None:
            looked, epochs = await self._epochs(keys, "root", history.chain[0], roots, forks, stopped)
        else:  # (a history not written yet, a compaction's preview: its first checkpoint is known here only)
            roots.add(root.id)
            fork = root.meta.forked_from if root.kind is CheckpointKind.COMPACTION else None
            if not fork or fork in forks:
                if fork and stopped is not None:
                    stopped.append(fork)
                return []
            looked, epochs = await self._epochs(keys, "fork", fork, roots, forks, stopped)
        roots.update(looked)
        forks.update(fork for fork, _, _ in epochs)
        return [EpochChain(fork, tuple(record), tuple(chain)) for fork, record, chain in epochs]

    async def epoch_messages(self, conversation_id: str, chains: Sequence[EpochChain]) -> list[History]:
        """The histories of the epochs ``chains`` names (from :meth:`epoch_chains`), in their order: the messages this
        process does not hold read in pieces of ``EPOCH_PIECE`` (earlier epochs are read for recall once per worker,
        so they are not kept in the segment cache)."""
        keys = self.keys(conversation_id)
        held: dict[str, list[Message]] = {}
        for epoch in chains:
            for cid, _ in epoch.chain:
                segment = self._segments.get(conversation_id, cid)
                if segment is not None:
                    held[cid] = segment
        # (one small piece at a time: the earlier epochs of a long thread are many pieces, each parsed on the event loop
        # as it arrives, and other conversations' turns take their turns between them)
        read = await self._read(keys, [(cid, count) for epoch in chains for cid, count in epoch.chain
                                       if cid not in held], in_flight=1, piece=EPOCH_PIECE)
        earlier: list[History] = []
        for epoch in chains:
            messages = [m for cid, _ in epoch.chain for m in (held[cid] if cid in held else read[cid])]
            earlier.append(History.model_construct(checkpoint=self._checkpoint(keys, epoch.id, epoch.record),
                                                   messages=messages,
                                                   chain=[cid for cid, _ in epoch.chain]))
            await asyncio.sleep(0)  # (hundreds of epochs: other conversations' events are served between them)
        return earlier

    async def messages_in_place(self, conversation_id: str, places: Sequence[tuple[str, int]]) -> list[Message]:
        """The messages at ``places`` (a checkpoint, the message's offset among those it adds), in that order: one
        round trip (commands of at most ``MESSAGES_PER_CALL``). What recall shows of an earlier epoch, read without
        the rest of it."""
        if not places:
            return []
        keys = self.keys(conversation_id)
        fields = [f"{cid}:{offset}" for cid, offset in places]
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(fields), MESSAGES_PER_CALL):
            pipe.hmget(keys.messages, fields[start:start + MESSAGES_PER_CALL])
        raw = [v for chunk in await self._call(pipe.execute()) for v in chunk]
        if any(v is None for v in raw):
            missing = next(place for place, v in zip(places, raw, strict=True) if v is None)
            raise CorruptRecordError(keys.messages, f"message {missing[1]} of checkpoint {missing[0]} is missing")
        return self._parse(keys, places[0][0], b"[" + b",".join(bytes(v) for v in raw) + b"]")

    async def lineage(self, conversation_id: str) -> list[LineageEntry]:
        """Every checkpoint of the conversation, oldest first, with history sizes and the head."""
        state = await self.require_state(conversation_id)
        keys = self.keys(conversation_id)
        ids = [_text(i) for i in await self._call(self.client.lrange(keys.order, 0, -1))]
        if not ids:
            return []
        fields = [f"{i}:{f}" for i in ids for f in ("meta", "status", "n", "tok", "out", "consumed")]
        rec = await self._call(self.client.hmget(keys.checkpoints, fields))
        rows: list[LineageEntry] = []
        totals: dict[str, tuple[int, int]] = {}
        for index, cid in enumerate(ids):
            cp = self._checkpoint(keys, cid, rec[index * 6:index * 6 + 6])
            base = (0, 0)
            if cp.kind is CheckpointKind.TURN and cp.meta.parent_id:
                base = totals.get(cp.meta.parent_id, (0, 0))
            totals[cid] = (base[0] + cp.message_count, base[1] + cp.token_count)
            rows.append(LineageEntry(id=cid, kind=cp.kind, status=cp.status, parent=cp.meta.parent_id,
                                     forked_from=cp.meta.forked_from, message_count=totals[cid][0],
                                     token_total=totals[cid][1], created_at=cp.meta.created_at,
                                     is_head=cid == state.head_checkpoint_id))
        return rows

    async def recent(self, limit: int) -> tuple[list[str], int]:
        """The ``limit`` conversations whose state changed most recently, newest first, and how many are stored:
        read from the directory (two round trips, however many are stored). Entries older than the retention period
        (their keys expired) leave it here; the first listing of a store written before the directory existed adds
        its conversations to it (one scan, once)."""
        directory = directory_key(self.prefix)
        await self._directory_ready()
        pipe = self.client.pipeline(transaction=False)
        pipe.zremrangebyscore(directory, "-inf", f"({time.time() - self.retention_seconds!r}")
        pipe.zrevrange(directory, 0, max(1, limit) - 1)
        pipe.zcard(directory)
        _, ids, total = await self._call(pipe.execute())
        return [_text(i) for i in ids], int(total)

    async def listed(self, beginning: str) -> list[tuple[str, float]]:
        """The stored conversations whose id begins with ``beginning``, with the time their state last changed, read
        from the directory (built first for a store written before it existed)."""
        directory = directory_key(self.prefix)
        await self._directory_ready()
        out: list[tuple[str, float]] = []
        async for member, score in self.client.zscan_iter(directory, match=f"{glob_escape(beginning)}*", count=1000):
            out.append((_text(member) or "", float(score)))
        return out

    async def unlist(self, conversation_id: str) -> None:
        """Take a conversation whose keys are gone (expired) out of the directory."""
        await self._call(self.client.zrem(directory_key(self.prefix), conversation_id))

    async def _directory_ready(self) -> None:
        """The directory holds every stored conversation: the first reader of a store written before it existed
        adds them (one scan, once)."""
        if not await self._call(self.client.exists(directory_built_key(self.prefix))):
            await self._build_directory()

    async def _build_directory(self) -> None:
        """Add the conversations stored before the directory existed, by the time their state last changed."""
        ids = await self.conversation_ids()
        for start in range(0, len(ids), 1000):
            part = ids[start:start + 1000]
            pipe = self.client.pipeline(transaction=False)
            for cid in part:
                pipe.hmget(self.keys(cid).state, "updated_at", "created_at")
            times = await self._call(pipe.execute())
            scores = {cid: float(_text(at[0]) or _text(at[1]) or 0) for cid, at in zip(part, times) if at[0] or at[1]}
            if scores:
                await self._call(self.client.zadd(directory_key(self.prefix), scores))
        # as long as a conversation's keys; once it expires, the next listing looks the store over once more
        await self._call(self.client.set(directory_built_key(self.prefix), "1", ex=self.retention_seconds))

    async def conversation_ids(self) -> list[str]:
        """Every conversation this store holds (under its prefix), found by scanning for their state keys."""
        pattern = f"{glob_escape(self.prefix)}:{{*}}:state"
        found = set()
        async for key in self.client.scan_iter(match=pattern, count=1000):
            text = _text(key) or ""
            found.add(text[len(self.prefix) + 2:-len("}:state")])
        return sorted(found)

    async def summary(self, conversation_id: str) -> ConversationSummary:
        """A conversation's last activity, its messages so far and its compaction generation."""
        state = await self.require_state(conversation_id)
        rows = {row.id: row for row in await self.lineage(conversation_id)}
        generation, at = 0, state.head_checkpoint_id
        while at is not None and at in rows:
            generation += rows[at].kind is CheckpointKind.COMPACTION
            at = rows[at].parent
        messages = await self.messages_at(conversation_id, state.head_checkpoint_id, rows)
        return ConversationSummary(id=conversation_id, last_activity=state.updated_at, messages=messages,
                                   generation=generation, head=state.head_checkpoint_id, active=state.active_turn_id)

    async def messages_at(self, conversation_id: str, checkpoint_id: str | None,
                          rows: dict[str, LineageEntry] | None = None) -> int:
        """The conversation's messages by ``checkpoint_id`` (:func:`messages_so_far`), read from the newest
        checkpoints of its history only: numbers grow along a history, so the newest checkpoint that holds a
        numbered message (or the handoff that starts its epoch) has the highest."""
        rows = rows if rows is not None else {row.id: row for row in await self.lineage(conversation_id)}
        keys = self.keys(conversation_id)
        at = checkpoint_id
        while at is not None and at in rows:
            row = rows[at]
            parent = rows.get(row.parent) if row.kind is CheckpointKind.TURN and row.parent else None
            own = row.message_count - (parent.message_count if parent is not None else 0)
            found = messages_so_far(await self._segment(keys, at, own)) if own > 0 else 0
            if found or row.kind is CheckpointKind.COMPACTION:
                return found
            at = row.parent
        return 0

    async def conversation_exists(self, conversation_id: str) -> bool:
        return bool(await self._call(self.client.exists(self.keys(conversation_id).state)))
