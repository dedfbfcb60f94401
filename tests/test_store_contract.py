"""The checkpoint store contract, run against fakeredis and the real Redis."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import client_of
from factories import msg

from threadkeeper.persistence import (
    CheckpointKind,
    CheckpointOutcome,
    CheckpointStatus,
    CheckpointStore,
    CorruptRecordError,
    Forgetter,
    HeadConflictError,
    Inbox,
    InboxItem,
    InvalidTransitionError,
    LeaseManager,
    NotFoundError,
    StoreUnavailableError,
    Usage,
    connect,
    ping,
)

CONV = "slack:T1:C1:1700000000.000100"


@pytest.fixture(params=["fakeredis", "redis", "cluster"])
async def client(request: pytest.FixtureRequest, prefix: str):  # type: ignore[no-untyped-def]
    """The contract holds on fakeredis, on one real Redis and on a Redis Cluster."""
    async with client_of(request.param, request, prefix) as c:
        yield c


@pytest.fixture
def store(client, prefix) -> CheckpointStore:
    return CheckpointStore(client, prefix=prefix, retention_days=1)


async def turn(store: CheckpointStore, texts: list[str], conv: str = CONV) -> str:
    state = await store.get_state(conv)
    head = state.head_checkpoint_id if state else None
    cp = await store.start_turn(conv)
    await store.append(conv, cp.id, [msg(t) for t in texts])
    await store.commit(conv, cp.id, expected_head=head)
    return cp.id


async def test_turn_checkpoint_stores_only_added_messages(store: CheckpointStore) -> None:
    first = await turn(store, ["a", "b"])
    second = await turn(store, ["c"])
    assert (await store.get(CONV, first)).message_count == 2
    assert (await store.get(CONV, second)).message_count == 1
    history = await store.load_history(CONV)
    assert [m.text for m in history.messages] == ["a", "b", "c"]
    assert history.chain == [first, second]
    assert history.checkpoint.id == second


async def test_compaction_forks_and_leaves_parent_untouched(store: CheckpointStore, client, prefix) -> None:
    first = await turn(store, ["a", "b"])
    second = await turn(store, ["c", "d"])
    before_cp = await client.hgetall(f"{prefix}:{{{CONV}}}:cp")
    before_msgs = await client.hgetall(f"{prefix}:{{{CONV}}}:msgs")
    fork = await store.fork_compaction(CONV, forked_from=second, messages=[msg("summary", handoff=True), msg("d")],
                                       covered_ids=["a", "b", "c"], info={"reason": "manual"})
    after_cp = await client.hgetall(f"{prefix}:{{{CONV}}}:cp")
    after_msgs = await client.hgetall(f"{prefix}:{{{CONV}}}:msgs")
    for field, value in before_cp.items():
        assert after_cp[field] == value, field
    for field, value in before_msgs.items():
        assert after_msgs[field] == value, field
    head = await store.load_history(CONV)
    assert [m.text for m in head.messages] == ["summary", "d"]
    assert head.chain == [fork.id]
    assert head.checkpoint.meta.forked_from == second
    assert head.checkpoint.meta.covered_ids == ["a", "b", "c"]
    old = await store.load_history(CONV, second)
    assert [m.text for m in old.messages] == ["a", "b", "c", "d"]
    after_fork = await turn(store, ["e"])
    assert [m.text for m in (await store.load_history(CONV)).messages] == ["summary", "d", "e"]
    assert (await store.get(CONV, after_fork)).meta.parent_id == fork.id
    assert first in [row.id for row in await store.lineage(CONV)]


async def test_commit_with_stale_head_changes_nothing(store: CheckpointStore) -> None:
    base = await turn(store, ["a"])
    slow = await store.start_turn(CONV)
    await store.append(CONV, slow.id, [msg("slow")])
    fast = await turn(store, ["fast"])
    with pytest.raises(HeadConflictError) as info:
        await store.commit(CONV, slow.id, expected_head=base)
    assert info.value.actual == fast
    state = await store.require_state(CONV)
    assert state.head_checkpoint_id == fast
    assert (await store.get(CONV, slow.id)).status is CheckpointStatus.RUNNING
    await store.supersede(CONV, slow.id)
    superseded = await store.get(CONV, slow.id)
    assert superseded.status is CheckpointStatus.SUPERSEDED
    assert superseded.message_count == 1


async def test_completed_checkpoints_refuse_changes(store: CheckpointStore) -> None:
    done = await turn(store, ["a"])
    with pytest.raises(InvalidTransitionError):
        await store.append(CONV, done, [msg("late")])
    for change in (store.supersede(CONV, done), store.fail(CONV, done, error="x"), store.resume(CONV, done)):
        with pytest.raises(InvalidTransitionError):
            await change
    with pytest.raises(InvalidTransitionError):
        await store.commit(CONV, done, expected_head=done)
    assert [m.text for m in (await store.load_history(CONV)).messages] == ["a"]


async def test_head_only_moves_to_completed_checkpoints(store: CheckpointStore) -> None:
    base = await turn(store, ["a"])
    running = await store.start_turn(CONV)
    with pytest.raises(InvalidTransitionError):
        await store.cas_head(CONV, expected=base, new=running.id)
    other = await store.start_turn(CONV, parent_id=base)
    await store.commit(CONV, other.id, expected_head=base)
    with pytest.raises(HeadConflictError):
        await store.cas_head(CONV, expected=base, new=base)
    await store.cas_head(CONV, expected=other.id, new=base)
    assert (await store.require_state(CONV)).head_checkpoint_id == base


async def test_awaiting_resume_round_trip(store: CheckpointStore) -> None:
    base = await turn(store, ["a"])
    cp = await store.start_turn(CONV)
    await store.append(CONV, cp.id, [msg("please deploy"), msg("needs approval", role="assistant")])
    await store.pause(CONV, cp.id, resume={"reason": "authorization", "tool": "deploy"},
                      outcome=CheckpointOutcome(usage=Usage(input_tokens=10)))
    paused = await store.get(CONV, cp.id)
    assert paused.status is CheckpointStatus.AWAITING_RESUME
    assert paused.outcome and paused.outcome.resume == {"reason": "authorization", "tool": "deploy"}
    assert (await store.require_state(CONV)).active_turn_id == cp.id
    with pytest.raises(InvalidTransitionError):
        await store.append(CONV, cp.id, [msg("not while paused")])
    await store.resume(CONV, cp.id)
    await store.append(CONV, cp.id, [msg("approved")])
    await store.commit(CONV, cp.id, expected_head=base)
    history = await store.load_history(CONV)
    assert [m.text for m in history.messages] == ["a", "please deploy", "needs approval", "approved"]
    assert (await store.require_state(CONV)).active_turn_id is None


async def test_failed_turn_records_error_and_leaves_head(store: CheckpointStore) -> None:
    base = await turn(store, ["a"])
    cp = await store.start_turn(CONV)
    await store.fail(CONV, cp.id, error="provider timeout", trace_id="t-1")
    failed = await store.get(CONV, cp.id)
    assert failed.status is CheckpointStatus.FAILED
    assert failed.outcome and failed.outcome.error == "provider timeout" and failed.outcome.trace_id == "t-1"
    assert (await store.require_state(CONV)).head_checkpoint_id == base


async def test_lineage_lists_every_checkpoint_with_head(store: CheckpointStore) -> None:
    first = await turn(store, ["a", "b"])
    second = await turn(store, ["c"])
    fork = await store.fork_compaction(CONV, forked_from=second, messages=[msg("s", tokens=5)], covered_ids=["a"])
    rows = await store.lineage(CONV)
    assert [r.id for r in rows] == [first, second, fork.id]
    assert [r.message_count for r in rows] == [2, 3, 1]
    assert rows[2].token_total == 5 and rows[2].kind is CheckpointKind.COMPACTION
    assert [r.is_head for r in rows] == [False, False, True]
    assert rows[2].forked_from == second and rows[1].parent == first


async def test_unknown_conversation_and_checkpoint_are_clear_errors(store: CheckpointStore) -> None:
    with pytest.raises(NotFoundError, match="no conversation"):
        await store.lineage("slack:T:C:nope")
    await turn(store, ["a"])
    with pytest.raises(NotFoundError):
        await store.get(CONV, "cp_missing")
    with pytest.raises(NotFoundError):
        await store.load_history(CONV, "cp_missing")
    with pytest.raises(NotFoundError):
        await store.start_turn(CONV, parent_id="cp_missing")


async def test_corrupt_record_names_its_key_and_is_left_alone(store: CheckpointStore, client, prefix) -> None:
    cp = await turn(store, ["a"])
    key = f"{prefix}:{{{CONV}}}:msgs"
    await client.hset(key, f"{cp}:0", b"{not json")
    with pytest.raises(CorruptRecordError, match="msgs"):  # read by a worker that does not hold the history
        await CheckpointStore(client, prefix=prefix).load_history(CONV)
    assert await client.hget(key, f"{cp}:0") == b"{not json"
    await client.hset(f"{prefix}:{{{CONV}}}:cp", f"{cp}:meta", b'{"v": 1}')
    with pytest.raises(CorruptRecordError, match=cp):
        await store.get(CONV, cp)


async def test_a_long_history_read_is_taken_out_of_the_collectors_sight(store: CheckpointStore, client, prefix,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages read in bulk are long-lived: once thousands were parsed, the collector stops scanning what the process
    holds (a full pass over a long lineage would hold the event loop for a second and more), and they stay readable."""
    import gc

    from threadkeeper.persistence import reading

    total = 2 * reading.SETTLED_EVERY
    for start in range(0, total, 500):
        await turn(store, [f"message {i}" for i in range(start, start + 500)])
    monkeypatch.setattr(reading, "_parsed", 0)
    gc.collect()
    gc.unfreeze()
    try:
        history = await CheckpointStore(client, prefix=prefix).load_history(CONV)  # a worker holding nothing of it
        assert [m.text for m in history.messages] == [f"message {i}" for i in range(total)]
        scanned = {id(o) for o in gc.get_objects()}
        assert not {id(history.messages[0]), id(history.messages[-1])} & scanned, "out of the collector's sight"
    finally:
        gc.unfreeze()


async def test_retention_ttl_on_every_key_refreshed_on_activity(client, prefix) -> None:
    store = CheckpointStore(client, prefix=prefix, retention_days=1)
    inbox = Inbox(client, prefix=prefix, retention_days=1)
    await inbox.append(CONV, InboxItem(message=msg("x")))
    await turn(store, ["a"])
    keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
    assert len(keys) >= 5
    for key in keys:
        ttl = await client.ttl(key)
        assert 0 < ttl <= 86_400, key
    state_key = f"{prefix}:{{{CONV}}}:state"
    await client.expire(state_key, 100)
    await turn(store, ["b"])
    assert await client.ttl(state_key) > 86_000


async def test_inbox_dedups_and_keeps_items_until_the_turn_completes(client, prefix) -> None:
    store = CheckpointStore(client, prefix=prefix)
    inbox = Inbox(client, prefix=prefix)
    assert await inbox.append(CONV, InboxItem(event_id="E1", message=msg("one", id="1.1")))
    assert not await inbox.append(CONV, InboxItem(event_id="E1", message=msg("one", id="1.1")))
    assert not await inbox.append(CONV, InboxItem(event_id="E9", message=msg("one", id="1.1")))
    assert await inbox.append(CONV, InboxItem(event_id="E2", message=msg("two", id="1.2")))
    ttl = await client.ttl(inbox.keys(CONV).dedup("E2"))
    assert 86_000 < ttl <= 86_400, f"a dedup key lives a day: not less, not the retention ({ttl} s)"
    items = await inbox.peek(CONV)
    assert [i.message.text for i in items if i.message] == ["one", "two"]
    cp = await store.start_turn(CONV)
    await store.append(CONV, cp.id, [i.message for i in items if i.message], inbox_consumed=len(items))
    assert await inbox.size(CONV) == 2, "items stay until the turn completes"
    await inbox.append(CONV, InboxItem(event_id="E3", message=msg("three", id="1.3")))
    await store.commit(CONV, cp.id, expected_head=None)
    left = await inbox.peek(CONV)
    assert [i.message.text for i in left if i.message] == ["three"]


async def test_an_edit_is_one_change_and_a_second_edit_another(client, prefix) -> None:
    """The one dedup rule (``InboxItem.dedup_keys``): an edit is a duplicate when it is the same change of the same
    message, whatever event carries it again; a second edit of that message is a change of its own; a message is
    deleted once."""
    inbox = Inbox(client, prefix=prefix)
    edit = InboxItem(kind="edit", event_id="E4", message=msg("one, edited", id="1.1"), change="1.5")
    assert await inbox.append(CONV, edit)
    assert not await inbox.append(CONV, edit.model_copy(update={"event_id": "E5"}))
    assert await inbox.append(CONV, InboxItem(kind="edit", event_id="E6", message=msg("one, again", id="1.1"),
                                              change="1.6"))
    assert await inbox.append(CONV, InboxItem(kind="delete", event_id="E7", target_id="1.1"))
    assert not await inbox.append(CONV, InboxItem(kind="delete", event_id="E8", target_id="1.1"))
    assert [(i.kind, i.message.text if i.message else i.target_id) for i in await inbox.peek(CONV)] == \
        [("edit", "one, edited"), ("edit", "one, again"), ("delete", "1.1")]


async def test_lease_single_holder_renew_release_takeover(client, prefix) -> None:
    leases = LeaseManager(client, prefix=prefix)
    held = await leases.acquire(CONV, 30)
    assert held is not None
    assert await leases.acquire(CONV, 30) is None
    assert await leases.renew(held, 30) is not None
    stale = held.__class__(CONV, "not-the-token", 0)
    assert not await leases.release(stale)
    assert await leases.holder(CONV) == held.token
    assert await leases.release(held)
    short = await leases.acquire(CONV, 0.05)
    assert short is not None
    for _ in range(200):
        if await leases.holder(CONV) is None:
            break
        await asyncio.sleep(0.01)
    taken = await leases.acquire(CONV, 30)
    assert taken is not None and taken.token != short.token
    assert await leases.renew(short, 30) is None
    assert not await leases.release(short)
    assert await leases.holder(CONV) == taken.token


async def test_unreachable_redis_names_redis_url() -> None:
    client = connect("redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnavailableError, match="REDIS_URL=redis://127.0.0.1:1/0"):
        await ping(client, "redis://127.0.0.1:1/0")
    store = CheckpointStore(client, url="redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnavailableError, match="REDIS_URL"):
        await store.lineage(CONV)
    await client.aclose()


async def test_twenty_concurrent_writers_exactly_one_wins(store: CheckpointStore) -> None:
    base = await turn(store, ["base"])

    async def writer(n: int) -> tuple[str, bool]:
        cp = await store.start_turn(CONV, parent_id=base)
        await store.append(CONV, cp.id, [msg(f"w{n}-{i}") for i in range(3)])
        try:
            await store.commit(CONV, cp.id, expected_head=base)
            return cp.id, True
        except HeadConflictError:
            await store.supersede(CONV, cp.id)
            return cp.id, False

    results = await asyncio.gather(*(writer(n) for n in range(20)))
    winners = [cid for cid, won in results if won]
    assert len(winners) == 1
    assert (await store.require_state(CONV)).head_checkpoint_id == winners[0]
    for n, (cid, won) in enumerate(results):
        history = await store.load_history(CONV, cid)
        assert [m.text for m in history.messages][-3:] == [f"w{n}-{i}" for i in range(3)]
        assert history.checkpoint.status is (CheckpointStatus.COMPLETED if won else CheckpointStatus.SUPERSEDED)


async def test_every_conversation_with_queued_items_is_owed_until_its_holder_unmarks_it(client, prefix) -> None:
    """The sweep's registry: every append marks its conversation (a duplicate does not add it twice), the oldest
    first; unmarking takes one off, and an append after that marks it again."""
    inbox = Inbox(client, prefix=prefix)
    names = [f"slack:T1:C1:{i}.000100" for i in range(1_050)]
    for name in names:
        await inbox.append(name, InboxItem(message=msg("pending")))
    await inbox.append(names[0], InboxItem(message=msg("again")))
    owed = await inbox.pending_conversations()
    assert sorted(owed) == sorted(names) and len(owed) == len(set(owed)) and owed[-1] == names[0]
    await inbox.unmark_pending(names[1])
    assert names[1] not in await inbox.pending_conversations()
    await inbox.append(names[1], InboxItem(message=msg("one more")))
    assert (await inbox.pending_conversations())[-1] == names[1]
    assert len(await inbox.pending_conversations(limit=10)) == 10


async def test_forgetting_deletes_one_conversation_or_one_workspace_and_nothing_else(client, prefix) -> None:
    store = CheckpointStore(client, prefix=prefix)
    inbox = Inbox(client, prefix=prefix)
    leases = LeaseManager(client, prefix=prefix)
    forget = Forgetter(client, prefix=prefix)
    one, two, other = "slack:T1:C1:1.000100", "slack:T1:C2:2.000100", "slack:T2:C1:1.000100"
    for cid in (one, two, other):
        await turn(store, ["the deploy key is in the vault"], conv=cid)
        await inbox.append(cid, InboxItem(event_id=f"E-{cid}", message=msg("pending", id=f"{cid}-p")))
    assert set(await inbox.pending_conversations()) == {one, two, other}
    held = await leases.acquire(one, 30)
    with pytest.raises(InvalidTransitionError, match="lease is held"):
        await forget.conversation(one)
    keys_of_two = await forget.keys_of(two)
    assert len(keys_of_two) >= 5 and any(":dedup:" in k for k in keys_of_two)
    assert await forget.team("T1") == (len(keys_of_two), [one]), "a busy conversation waits"
    assert await forget.keys_of(two) == [] and await forget.keys_of(other)
    assert held is not None and await leases.release(held)
    deleted = await forget.conversation(one)
    assert deleted >= 5 and await forget.keys_of(one) == []
    remaining = [k async for k in client.scan_iter(match=f"{prefix}:*")]
    assert remaining and all((k.decode() if isinstance(k, bytes) else k).startswith((f"{prefix}:{{{other}}}",
                                                                                      f"{prefix}:pending",
                                                                                      f"{prefix}:activity",
                                                                                      f"{prefix}:conversations"))
                             for k in remaining)
    assert await inbox.pending_conversations() == [other]
    assert await client.zscore(f"{prefix}:activity", one) is None, "nor is it left among the active"
    assert await client.zscore(f"{prefix}:activity", other) is not None
    assert await client.zrange(f"{prefix}:conversations", 0, -1) == [other.encode()], "nor among the listed"
    assert (await store.load_history(other)).messages[0].text == "the deploy key is in the vault"


def test_a_redis_password_never_reaches_an_error_message() -> None:
    error = StoreUnavailableError("redis://default:s3cret-pw@cache.internal:6379/0",
                                  OSError("Error connecting to redis://default:s3cret-pw@cache.internal:6379"))
    assert "s3cret-pw" not in str(error) and "redis://default:***@cache.internal:6379/0" in str(error)


async def test_a_compaction_is_forked_and_made_the_head_in_one_step_or_not_at_all(client, prefix) -> None:
    store = CheckpointStore(client, prefix=prefix)
    turn = await store.start_turn(CONV)
    await store.append(CONV, turn.id, [msg("the staging database is pg-stage-7", id="1.1")])
    await store.commit(CONV, turn.id, expected_head=None)
    fork = await store.fork_compaction(CONV, forked_from=turn.id, messages=[msg("handoff", id="h1")],
                                       covered_ids=["1.1"])
    state = await store.get_state(CONV)
    assert state.head_checkpoint_id == fork.id and (await store.get(CONV, fork.id)).status is CheckpointStatus.COMPLETED
    assert [m.text for m in (await store.load_history(CONV)).messages] == ["handoff"]
    before = await store.lineage(CONV)
    with pytest.raises(HeadConflictError):  # forked from a checkpoint that is no longer the head
        await store.fork_compaction(CONV, forked_from=turn.id, messages=[msg("stale handoff", id="h2")],
                                    covered_ids=["1.1"])
    after = await store.lineage(CONV)
    assert len(after) == len(before) and not any(r.status is CheckpointStatus.RUNNING for r in after), \
        "a compaction that lost writes nothing, and none is ever left running"


def test_the_history_cache_is_bounded_by_the_memory_it_holds() -> None:
    from threadkeeper.persistence.cache import MESSAGE_BYTES, SegmentCache, message_bytes

    segment = [msg("x" * 1_000, id=f"{i}") for i in range(10)]
    cost = sum(message_bytes(m) for m in segment)
    assert cost == 10 * (MESSAGE_BYTES + 1_000)
    cache = SegmentCache(max_messages=1_000_000, max_bytes=int(2.5 * cost))
    for n in range(4):
        cache.put("c", f"cp{n}", list(segment))
    assert cache.get("c", "cp0") is None and cache.get("c", "cp1") is None, "least recently used out first"
    assert cache.get("c", "cp2") is not None and cache.get("c", "cp3") is not None
    assert cache.bytes == 2 * cost <= cache.max_bytes
    cache.put("c", "huge", [msg("y" * 100_000, id="h")] * 10)
    assert cache.get("c", "huge") is None and cache.bytes == 2 * cost, "a segment over the bound is not cached"


async def test_a_turn_opens_with_the_lease_state_and_inbox_in_one_step(client, prefix) -> None:
    """``open_turn`` takes the lease (or renews it for its holder) and reads the state, the active turn and the
    waiting items atomically; another worker gets nothing, and a lost lease cannot be renewed."""
    store, inbox = CheckpointStore(client, prefix=prefix), Inbox(client, prefix=prefix)
    head = await turn(store, ["a"])
    for i in range(3):
        await inbox.append(CONV, InboxItem(event_id=f"e{i}", message=msg(f"new {i}")))
    paused = await store.start_turn(CONV, messages=[msg("asked")], inbox_consumed=2)
    await store.pause(CONV, paused.id, resume={"reason": "timeout"})

    opening = await store.open_turn(CONV, lease_seconds=30)
    assert opening is not None and opening.state is not None
    assert opening.state.head_checkpoint_id == head and opening.active is not None
    assert opening.active.id == paused.id and opening.active.status is CheckpointStatus.AWAITING_RESUME
    assert opening.inbox_start == 2  # the two items the paused turn took are not offered again
    items = await inbox.peek(CONV, start=opening.inbox_start, raw=opening.inbox_raw)
    assert [i.message.text for i in items if i.message] == ["new 2"]
    assert await LeaseManager(client, prefix=prefix).holder(CONV) == opening.lease.token

    assert await store.open_turn(CONV, lease_seconds=30) is None  # another worker
    again = await store.open_turn(CONV, lease_seconds=30, lease=opening.lease)
    assert again is not None and again.lease.token == opening.lease.token
    await LeaseManager(client, prefix=prefix).release(opening.lease)
    assert await store.open_turn(CONV, lease_seconds=30, lease=opening.lease) is None  # lost: not renewed
    fresh = await store.open_turn("slack:T1:C1:1700000000.000999", lease_seconds=30)
    assert fresh is not None and fresh.state is None and fresh.active is None and fresh.inbox_raw == []


async def test_a_history_is_extended_by_its_new_checkpoints_only(store: CheckpointStore, client, prefix) -> None:
    """Before a turn the store reads only the checkpoints another worker added since the history it holds (none
    that it committed itself), and the history's token sums (runtime context left out) are extended, not
    recounted: both equal a reading from scratch."""
    from threadkeeper.services.context import visible

    head = None
    for i in range(30):
        cp = await store.start_turn(CONV, messages=[msg(f"q{i} " * (i % 7 + 1)),
                                                    msg(f"context {i}", runtime=i % 3 == 0),
                                                    msg(f"a{i}", role="assistant")])
        await store.commit(CONV, cp.id, expected_head=head)
        head = cp.id
    await store.load_history(CONV)
    read: list[int] = []
    run = store._run

    async def counted(name, keys, args):  # type: ignore[no-untyped-def]
        out = await run(name, keys, args)
        if name == "LOAD":
            read.append(len(out))
        return out

    store._run = counted  # type: ignore[method-assign]
    other = CheckpointStore(client, prefix=prefix)
    for i in range(3):
        writer = other
        cp = await writer.start_turn(CONV, messages=[msg(f"later {i}"), msg(f"ctx {i}", runtime=True)])
        await writer.commit(CONV, cp.id, expected_head=head)
        head = cp.id
        history = await store.load_history(CONV)
        fresh = await CheckpointStore(client, prefix=prefix, cache_messages=0).load_history(CONV)
        assert [m.id for m in history.messages] == [m.id for m in fresh.messages] and history.chain == fresh.chain
        assert history.visible_tokens() == sum(m.tokens for m in visible(fresh.messages))
        for upto in (0, 5, 45, len(fresh.messages) - 1):
            assert history.visible_tokens(upto) == sum(m.tokens for m in visible(fresh.messages[:upto]))
            expected = next((m for m in reversed(fresh.messages[:upto]) if m.flags.runtime), None)
            assert history.last_runtime(upto) == expected
    # Each load read one new checkpoint: stop, next, 6 record fields, the line of the one checkpoint, its messages.
    assert read == [2 + 6 + 1 + 1] * 3
    cp = await store.start_turn(CONV, messages=[msg("its own"), msg("ctx", runtime=True)])
    await store.commit(CONV, cp.id, expected_head=head)
    history = await store.load_history(CONV)
    assert read == [2 + 6 + 1 + 1] * 3, "what it committed itself is not read back"
    fresh = await CheckpointStore(client, prefix=prefix, cache_messages=0).load_history(CONV)
    assert [m.model_dump() for m in history.messages] == [m.model_dump() for m in fresh.messages]
    assert history.chain == fresh.chain and history.checkpoint == fresh.checkpoint
    assert history.visible_tokens() == sum(m.tokens for m in visible(fresh.messages))


async def test_a_script_refusal_raises_the_error_of_its_kind_with_its_words(store: CheckpointStore) -> None:
    """Scripts refuse with a kind first (``NOTFOUND``, ``TRANSITION``); the store maps the kind, not the wording,
    and the message keeps only the words."""
    with pytest.raises(NotFoundError, match=r"^checkpoint cp_none does not exist$"):
        await store.append(CONV, "cp_none", [msg("x")])
    done = await turn(store, ["a"])
    with pytest.raises(InvalidTransitionError, match=r"^checkpoint \S+ is completed; only a running checkpoint"):
        await store.append(CONV, done, [msg("y")])


async def test_a_long_history_is_read_in_bounded_calls_and_comes_back_whole(store: CheckpointStore, client,
                                                                            prefix, monkeypatch) -> None:
    """A history longer than one call's limits (a compaction of 1,200 messages, then 700 turns) is walked in
    several calls and its messages read in pieces, the compaction's alone in ranges: every message comes back,
    in order, and no call returns more than ``MESSAGES_PER_CALL`` messages."""
    from threadkeeper.persistence import reading as module
    from threadkeeper.persistence.reading import MESSAGES_PER_CALL

    monkeypatch.setattr(module, "WALK_FAST_PER_CALL", 100)  # the rest of the chain walked in several calls
    root = await turn(store, ["start"])
    fork = await store.fork_compaction(CONV, forked_from=root, covered_ids=[],
                                       messages=[msg(f"kept {i}", id=f"k{i}") for i in range(1_200)])
    head, expected = fork.id, [f"k{i}" for i in range(1_200)]
    for i in range(700):
        cp = await store.start_turn(CONV, parent_id=head, from_head=False,
                                    messages=[msg(f"q{i}", id=f"q{i}"), msg(f"a{i}", role="assistant", id=f"a{i}")])
        await store.commit(CONV, cp.id, expected_head=head)
        head = cp.id
        expected += [f"q{i}", f"a{i}"]
    sizes: list[int] = []
    walks: list[str] = []
    cold = CheckpointStore(client, prefix=prefix, cache_messages=0)
    run = cold._run

    async def counted(name, keys, args):  # type: ignore[no-untyped-def]
        out = await run(name, keys, args)
        walks.append(name)
        if name in ("LOAD", "SEGMENTS", "SEGMENT"):
            raw = out[9] if name == "LOAD" else out
            sizes.append(len(json.loads(raw)))
        return out

    cold._run = counted  # type: ignore[method-assign]
    history = await cold.load_history(CONV)
    assert [m.id for m in history.messages] == expected and history.chain[0] == fork.id
    assert len(sizes) > 4 and max(sizes) <= MESSAGES_PER_CALL and walks.count("WALK") >= 4
    assert history.visible_tokens() == sum(m.tokens for m in history.messages)


async def test_a_writer_whose_lease_another_worker_holds_is_refused_everything(client, prefix) -> None:
    """Fencing: a worker that stalled past its lease, and whose lease another worker took, can neither start, add
    to, fail, commit nor fork anything, nor move the head; what the new holder does stands. A lease that lapsed
    with nobody taking it still lets its writer finish, and a writer that opened no turn (orchestration) is not
    fenced."""
    from threadkeeper.persistence import LeaseLostError

    stalled, holder = CheckpointStore(client, prefix=prefix), CheckpointStore(client, prefix=prefix)
    first = await turn(stalled, ["a"])
    assert await stalled.open_turn(CONV, lease_seconds=30) is not None
    running = await stalled.start_turn(CONV, messages=[msg("q")])
    await client.delete(f"{prefix}:{{{CONV}}}:lease")  # the lease lapsed: nobody holds it
    await stalled.append(CONV, running.id, [msg("still its writer's")])
    assert await holder.open_turn(CONV, lease_seconds=30) is not None  # another worker takes the conversation
    writes = {
        "start": stalled.start_turn(CONV, messages=[msg("late")]),
        "append": stalled.append(CONV, running.id, [msg("late")]),
        "commit": stalled.commit(CONV, running.id, expected_head=first),
        "fork": stalled.fork_compaction(CONV, forked_from=first, messages=[msg("summary")], covered_ids=[]),
        "fail": stalled.fail(CONV, running.id, error="late"),
        "head": stalled.cas_head(CONV, expected=first, new=first),
    }
    for name, write in writes.items():
        with pytest.raises(LeaseLostError):
            await write
    state = await holder.require_state(CONV)
    assert state.head_checkpoint_id == first and (await holder.get(CONV, running.id)).message_count == 2
    await holder.fail(CONV, running.id, error="abandoned")  # the holder's writes stand
    second = await turn(holder, ["b"])
    assert (await holder.require_state(CONV)).head_checkpoint_id == second
    orchestration = CheckpointStore(client, prefix=prefix)
    await orchestration.fork_compaction(CONV, forked_from=second, messages=[msg("summary")], covered_ids=[])
    stalled.let_go(CONV)  # done with its lease: no longer fenced either
    assert await turn(stalled, ["c"])


async def _epochs_one_by_one(store: CheckpointStore, history, roots: set[str], forks: set[str]):  # type: ignore[no-untyped-def]
    """The earlier epochs read as the definition says: each epoch's first checkpoint, its fork, that fork's history."""
    out, current = [], history
    while current.chain and current.chain[0] not in roots:
        root = await store.get(CONV, current.chain[0])
        roots.add(root.id)
        fork = root.meta.forked_from if root.kind is CheckpointKind.COMPACTION else None
        if not fork or fork in forks:
            break
        current = await store.load_history(CONV, fork)
        forks.add(fork)
        out.append(current)
    return out


async def test_earlier_epochs_are_assembled_with_the_event_loop_served_between_them(store: CheckpointStore, client,
                                                                                   prefix) -> None:
    """A long thread's earlier epochs (hundreds, at 100,000 messages) are put together one at a time, the event loop
    serving other conversations between them, not all in one step that holds it."""
    head = await turn(store, ["first"])
    for epoch in range(6):
        cp = await store.start_turn(CONV, parent_id=head, from_head=False, messages=[msg(f"e{epoch}", id=f"e{epoch}")])
        await store.commit(CONV, cp.id, expected_head=head)
        fork = await store.fork_compaction(CONV, forked_from=cp.id, covered_ids=[],
                                           messages=[msg(f"handoff {epoch}", id=f"h{epoch}")])
        head = fork.id
    history = await store.load_history(CONV)
    cold = CheckpointStore(client, prefix=prefix, cache_messages=0)
    steps = 0
    seen: list[int] = []
    parse = cold._checkpoint

    def noted(keys, checkpoint_id, record):  # type: ignore[no-untyped-def]
        seen.append(steps)  # (the loop's steps so far, as each epoch's history is put together)
        return parse(keys, checkpoint_id, record)

    cold._checkpoint = noted  # type: ignore[method-assign]

    async def ticking() -> None:
        nonlocal steps
        while True:
            steps += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(ticking())
    try:
        got = await cold.earlier_epochs(CONV, history)
    finally:
        ticker.cancel()
    assert len(got) == len(seen) == 6
    assert len(set(seen)) == 6, seen


async def test_every_earlier_epoch_is_read_in_a_few_bounded_calls(store: CheckpointStore, client, prefix,
                                                                  monkeypatch) -> None:
    """Recall's first read of a long thread: the epochs before the head's (a compaction right after another, a turn
    with no messages, an epoch longer than one call looks at) come back as reading each epoch's history one by one
    gives them, in a handful of calls that each look at a bounded number of checkpoints, not a few per epoch; and a
    caller that holds some epochs reads only the newer ones."""
    from threadkeeper.persistence import reading as module

    monkeypatch.setattr(module, "EPOCHS_PER_CALL", 7)
    head = await turn(store, ["first"])
    for epoch in range(12):
        turns = 9 if epoch == 4 else 0 if epoch == 7 else 2
        for t in range(turns):
            cp = await store.start_turn(CONV, parent_id=head, from_head=False,
                                        messages=[] if t == 1 else [msg(f"e{epoch} t{t}", id=f"e{epoch}t{t}")])
            await store.commit(CONV, cp.id, expected_head=head)
            head = cp.id
        fork = await store.fork_compaction(CONV, forked_from=head, covered_ids=[],
                                           messages=[msg(f"handoff {epoch}", id=f"h{epoch}")])
        head = fork.id
    cp = await store.start_turn(CONV, parent_id=head, from_head=False, messages=[msg("now")])
    await store.commit(CONV, cp.id, expected_head=head)
    reference = CheckpointStore(client, prefix=prefix)
    history = await reference.load_history(CONV)
    expected = await _epochs_one_by_one(reference, history, set(), set())
    assert len(expected) == 12
    cold = CheckpointStore(client, prefix=prefix, cache_messages=0)
    calls: list[str] = []
    run = cold._run

    async def counted(name, keys, args):  # type: ignore[no-untyped-def]
        calls.append(name)
        return await run(name, keys, args)

    cold._run = counted  # type: ignore[method-assign]
    roots: set[str] = set()
    forks: set[str] = set()
    got = await cold.earlier_epochs(CONV, history, roots=roots, forks=forks)
    assert [(e.checkpoint.id, e.chain, [m.id for m in e.messages]) for e in got] == \
        [(e.checkpoint.id, e.chain, [m.id for m in e.messages]) for e in expected]
    assert [e.checkpoint.model_dump() for e in got] == [e.checkpoint.model_dump() for e in expected]
    checkpoints = len(await cold.lineage(CONV))
    assert calls.count("EPOCHS") <= checkpoints // 7 + 2 and set(calls) <= {"EPOCHS", "SEGMENTS"}
    assert calls.count("SEGMENTS") == 1, "every epoch's messages in one piece (they are few)"
    held_roots, held_forks = set(roots), set(forks)
    assert len(held_forks) == 12
    # a caller that holds all but the newest three epochs
    old = sorted(got[3:], key=lambda e: e.checkpoint.meta.created_at)
    part_roots = {r for r in roots if r not in {got[0].chain[0], got[1].chain[0], got[2].chain[0], history.chain[0]}}
    newer = await cold.earlier_epochs(CONV, history, roots=part_roots, forks={e.checkpoint.id for e in old})
    assert [e.checkpoint.id for e in newer] == [e.checkpoint.id for e in got[:3]]
    assert await cold.earlier_epochs(CONV, history, roots=held_roots, forks=held_forks) == []


async def test_an_earlier_epochs_messages_are_read_by_place_without_the_rest_of_it(store: CheckpointStore, client,
                                                                                    prefix, monkeypatch) -> None:
    """Recall reads the messages it shows of an earlier epoch by where its chain says they are (a checkpoint, an
    offset among the messages it adds), in the order asked, in commands of a bounded size; one that is missing is a
    corrupt record, not a shorter answer."""
    from threadkeeper.persistence import store as module

    monkeypatch.setattr(module, "MESSAGES_PER_CALL", 2)
    head = await turn(store, ["a0", "a1", "a2"])
    cp = await store.start_turn(CONV, parent_id=head, from_head=False, messages=[msg("b0", id="b0"), msg("b1", id="b1")])
    await store.commit(CONV, cp.id, expected_head=head)
    fork = await store.fork_compaction(CONV, forked_from=cp.id, covered_ids=[], messages=[msg("handoff", id="h")])
    history = await store.load_history(CONV, fork.id)
    cold = CheckpointStore(client, prefix=prefix, cache_messages=0)
    [epoch] = await cold.epoch_chains(CONV, history)
    assert epoch.id == cp.id and [n for _, n in epoch.chain] == [3, 2]
    (first, _), (second, _) = epoch.chain
    whole = [m.id for m in (await cold.epoch_messages(CONV, [epoch]))[0].messages]
    got = await cold.messages_in_place(CONV, [(second, 1), (first, 0), (first, 2)])
    assert [m.id for m in got] == ["b1", whole[0], whole[2]]
    with pytest.raises(CorruptRecordError):
        await cold.messages_in_place(CONV, [(first, 0), (second, 5)])


async def test_what_recall_derived_from_an_epoch_is_written_once_kept_and_forgotten_with_the_conversation(
        client, prefix) -> None:
    from threadkeeper.persistence import ConversationKeys, EpochIndexStore

    store = CheckpointStore(client, prefix=prefix, retention_days=1)
    await turn(store, ["a"])
    epochs = EpochIndexStore(client, prefix=prefix, retention_days=1)
    await epochs.put(CONV, {"cp1": b"one", "cp2": b"two"})
    await epochs.put(CONV, {"cp1": b"another"})
    assert await epochs.get(CONV, ["cp1", "cp2", "cp3"]) == {"cp1": b"one", "cp2": b"two"}, "written once"
    await epochs.put(CONV, {}, unusable={"cp2": b"derived again"})
    assert await epochs.get(CONV, ["cp2"]) == {"cp2": b"derived again"}, "what could not be used is replaced"
    await epochs.put(CONV, {"cp2:p": b"header", "cp2:p:0": b"bucket"})
    await epochs.drop(CONV, ["cp2:p", "cp2:p:0"])
    assert await epochs.get(CONV, ["cp1", "cp2", "cp2:p", "cp2:p:0"]) == {"cp1": b"one", "cp2": b"derived again"}, \
        "what a reader cannot use or make removed, nothing else"
    key = ConversationKeys(prefix, CONV).recall
    assert key.startswith(ConversationKeys(prefix, CONV).base + ":"), "in the conversation's hash slot"
    assert 0 < await client.ttl(key) <= 86_400, "kept as long as the conversation"
    forget = Forgetter(client, prefix=prefix)
    assert key in await forget.keys_of(CONV)
    await forget.conversation(CONV)
    assert await epochs.get(CONV, ["cp1", "cp2"]) == {}


def sent_twice(store: CheckpointStore) -> None:
    """Every script ``store`` runs from now on runs twice, and the caller hears the second copy's answer: what Redis
    does with a command a client sent again after Redis took too long to answer (a stall), having run both."""
    run, run_then = store._run, store._run_then

    async def twice(name, keys, args):  # type: ignore[no-untyped-def]
        await run(name, keys, args)
        return await run(name, keys, args)

    async def twice_then(name, keys, args, then):  # type: ignore[no-untyped-def]
        await run_then(name, keys, args, then)
        return await run_then(name, keys, args, then)

    store._run, store._run_then = twice, twice_then  # type: ignore[method-assign]


async def test_every_write_of_a_turn_sent_twice_is_done_once_and_answered_as_the_first(client, prefix) -> None:
    """A command Redis ran, whose answer never reached the client, is sent again and run again: taking a lease,
    starting, adding to, pausing, resuming, committing and forking a checkpoint each recognise their own earlier copy. The
    messages are appended once, the inbox items they came from counted once (and trimmed once: the item after them
    stays), and the writer is told it succeeded, not that another worker holds the lease or moved the head."""
    store, inbox = CheckpointStore(client, prefix=prefix), Inbox(client, prefix=prefix)
    first = await turn(store, ["a"])
    for i in range(3):
        await inbox.append(CONV, InboxItem(event_id=f"e{i}", message=msg(f"new {i}")))
    sent_twice(store)
    opening = await store.open_turn(CONV, lease_seconds=30)
    assert opening is not None, "its own lease, taken by the first copy"
    running = await store.start_turn(CONV, parent_id=first, from_head=False, messages=[msg("new 0")],
                                     inbox_consumed=1)
    await store.pause(CONV, running.id, resume={"reason": "timeout"})
    assert (await store.get(CONV, running.id)).status is CheckpointStatus.AWAITING_RESUME
    await store.resume(CONV, running.id)
    assert await store.append(CONV, running.id, [msg("new 1")], inbox_consumed=1) == 2
    stored = await store.get(CONV, running.id)
    assert (stored.message_count, stored.inbox_consumed) == (2, 2)
    done = await store.commit(CONV, running.id, expected_head=first, messages=[msg("answer", role="assistant")])
    assert done.inbox_left == 1, "the two items taken are trimmed once: the third waits"
    history = await store.load_history(CONV)
    assert [m.text for m in history.messages] == ["a", "new 0", "new 1", "answer"]
    fork = await store.fork_compaction(CONV, forked_from=running.id, messages=[msg("summary")], covered_ids=[])
    state = await store.require_state(CONV)
    assert state.head_checkpoint_id == fork.id and state.version == 3
    assert [r.kind for r in await store.lineage(CONV)].count(CheckpointKind.COMPACTION) == 1
    assert await store.claim_preparation(CONV, 30) is not None, "a job's lease too: its own, not another's"
