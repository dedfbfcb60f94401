"""Redis stalled (its process stopped with SIGSTOP) or restarted (with its append-only file, as a deploy keeps it)
while a compaction is under way: the one a turn makes before it answers, with the summarizer's call held, and the
one a committed turn plans ahead in the background. Two workers share the conversation under a short lease, the
client's commands time out (and are sent again) while Redis does not answer, and people's messages keep arriving
throughout. Every message whose arrival was acknowledged is in the history exactly once (read along the lineage,
through every epoch), no checkpoint completed before the outage is rewritten, and the head descends from the one
before it."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import litellm
import pytest
import redis
from fakes import Paused, Step, free_port, pipeline, scripted, until
from test_compaction_ahead import CountingSummarizer

from threadkeeper.persistence import CheckpointKind, CheckpointStatus, connect, scripts
from threadkeeper.services import measure
from threadkeeper.services.models._litellm import register_provider

pytestmark = pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server")

CONV = "slack:T1:C77:1700070000.000100"
LEASE = 2.0
"""The workers' lease, short: an outage may outlive it."""
COMMAND_SECONDS = 0.4
"""How long a command waits for Redis before it is sent again (on a new connection) or fails."""
OUTAGES = {"stall": 1.2, "stall-past-the-lease": LEASE + 1.0, "restart": 1.5}
"""How long Redis is away. Each is longer than a command's wait, so a command sent meanwhile is sent again on a new
connection, and a stalled Redis runs both copies when it goes on. A stall shorter than the lease leaves the
conversation to the worker that held it; a longer one lets the other worker take it over."""


class OwnRedis:
    """A redis-server of this test's own on a free loopback port, keeping an append-only file in its own
    directory: stopped (SIGSTOP) and resumed, restarted on the same port and file, and stopped by its process id."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="threadkeeper-outage-"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        redis_server = shutil.which("redis-server")
        assert redis_server is not None
        self.process = subprocess.Popen(
            [redis_server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=2)
        deadline = time.monotonic() + 10
        try:
            while True:
                assert self.process.poll() is None, "redis-server exited at start"
                try:
                    pid = int(probe.info("server")["process_id"])
                    break
                except (redis.RedisError, OSError):
                    assert time.monotonic() < deadline, "redis-server did not start"
                    time.sleep(0.02)
        finally:
            probe.close()
        assert pid == self.process.pid, "the server answering on the port is this test's own"

    def stall(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (resumed first, if stalled): Redis writes its append-only file out and exits."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def own_redis() -> Any:
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.remove()


def update(i: int) -> str:
    return (f"status update {i}: the rollout of service-{i} went fine and its dashboards look calm, the owners "
            f"checked alerts and runbooks, and nothing else needs doing before the weekly review on Thursday")


class Outage:
    """Two workers (pipelines of their own over one client each) on the conversation, a summarizer whose calls can
    be held, people's messages arriving while it runs, and the record of what was acknowledged."""

    def __init__(self, prefix: str, server: OwnRedis, name: str, *, ahead: bool, **settings: Any) -> None:
        self.server = server
        self.model = scripted()
        self.model.default = Step(text="noted")
        self.summarizer = CountingSummarizer()
        register_provider(name, self.summarizer)
        self.clients = [connect(server.url, timeout_seconds=COMMAND_SECONDS) for _ in range(2)]
        self.workers = []
        for client in self.clients:
            p, _ = pipeline(prefix, client, context_window=4096,
                            settings={"ai_fast_model": f"{name}/test", "ai_fast_model_context_window_tokens": 4096,
                                      "threadkeeper_prepare_compaction": ahead, **settings})
            self.workers.append(p)
        self.acknowledged: list[str] = []
        self.sent: list[str] = []
        self.errors: list[str] = []
        self.results: list[Any] = []
        self._arriving = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def seed(self, until_compacting: bool) -> None:
        """Recorded messages (no reply asked) until the next message would make a turn compact first
        (``until_compacting``) or a turn's commit would have the next handoff planned ahead."""
        a = self.workers[0]
        budget = a.budget
        planning = a.executor.config.prepare_compaction
        a.executor.config.prepare_compaction = False  # the seed plans nothing ahead
        try:
            await self._seed(a, budget, until_compacting)
        finally:
            a.executor.config.prepare_compaction = planning

    async def _seed(self, a: Any, budget: Any, until_compacting: bool) -> None:
        for i in range(400):
            assert await a.submit(CONV, update(i), author="ben", id=f"1700070000.{i + 1000:06d}",
                                  reply_expected=False)
            self.acknowledged.append(f"1700070000.{i + 1000:06d}")
            if i % 5 < 4 and i < 30:
                continue
            await a.run(CONV)
            history = await a.checkpoints.load_history(CONV)
            incoming = [a.message(update(9999), author="ben")]
            if until_compacting and a.compactor.should_compact(history, incoming, budget):
                return
            # past where the next answered turn (a message and a short reply) has the next handoff planned ahead
            if not until_compacting and \
                    measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens) >= budget.trigger_tokens - 160:
                return
        raise AssertionError("the thread never reached the threshold")

    async def arrive(self, n: int = 1) -> None:
        """``n`` people's messages, each to one worker in turn; an acknowledged one is recorded as such."""
        for _ in range(n):
            k = self._arriving
            self._arriving += 1
            mid = f"1700070001.{k:06d}"
            self.sent.append(mid)
            try:
                await self.workers[k % 2].submit(CONV, update(k), author="alice", id=mid)
                self.acknowledged.append(mid)  # (a copy Redis already held is acknowledged as well)
            except Exception as exc:  # noqa: BLE001 - not acknowledged: Slack would send it again
                self.errors.append(f"arrive {mid}: {type(exc).__name__}")

    async def loaded(self) -> None:
        """Every script of the stores loaded in Redis, as in a Redis that has served a while: a copy of a script a
        client sends again then runs again (the first use of a script is refused with NOSCRIPT, and sent once
        more after it is loaded)."""
        for name in dir(scripts):
            if name.isupper() and isinstance(getattr(scripts, name), str) and not name.startswith("_"):
                await self.clients[0].script_load(getattr(scripts, name))

    def start(self, *which: int) -> None:
        """Worker loops (as the sweep runs them): each runs the conversation's turns whenever it owes work, under
        the short lease from now on (the turns seeding the thread, and a first call's warm-up, under the usual one)."""
        for w in which:
            self.workers[w].executor.config.lease_seconds = LEASE
            self._tasks.append(asyncio.create_task(self._work(self.workers[w])))

    async def _work(self, p: Any) -> None:
        while not self._stop.is_set():
            try:
                if await p.pending(CONV) or CONV in await p.inbox.pending_conversations():
                    self.results.extend(await p.run(CONV))
            except Exception as exc:  # noqa: BLE001 - the store unavailable, a lease lost: the sweep tries again
                self.errors.append(f"run: {type(exc).__name__}: {exc}"[:200])
            await asyncio.sleep(0.05)

    async def drained(self) -> bool:
        """Nothing waits (but what a paused turn holds), nothing runs, nobody holds the lease."""
        p = self.workers[0]
        try:
            rows = await p.checkpoints.lineage(CONV)
            return await p.pending(CONV) == 0 and await p.executor.leases.holder(CONV) is None and \
                not any(r.status is CheckpointStatus.RUNNING for r in rows) and \
                CONV not in await p.inbox.pending_conversations()
        except Exception:  # noqa: BLE001 - Redis is still coming back
            return False

    async def close(self) -> None:
        self._stop.set()
        self.summarizer.gate.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for p in self.workers:
            await p.settle()
        for client in self.clients:
            await client.aclose()


async def stored(p: Any) -> list[Any]:
    """The messages the history holds, along the lineage: from the head through every epoch (an epoch's own
    messages, after the copies its compaction kept), each as often as it is stored."""
    found: list[Any] = []
    at = (await p.checkpoints.require_state(CONV)).head_checkpoint_id
    while at is not None:
        history = await p.checkpoints.load_history(CONV, at)
        root = await p.checkpoints.get(CONV, history.chain[0])
        own = history.messages[root.message_count:] if root.kind is CheckpointKind.COMPACTION else history.messages
        found.extend(m for m in own if not m.flags.handoff)
        at = root.meta.forked_from if root.kind is CheckpointKind.COMPACTION else None
    return found


async def completed(p: Any) -> dict[str, tuple[str, int, str | None, str | None, list[str]]]:
    """Every completed checkpoint: its kind, its own message count, its parent, its fork, its history's ids."""
    out = {}
    for row in await p.checkpoints.lineage(CONV):
        if row.status is CheckpointStatus.COMPLETED:
            cp = await p.checkpoints.get(CONV, row.id)
            history = await p.checkpoints.load_history(CONV, row.id)
            out[row.id] = (row.kind.value, cp.message_count, row.parent, row.forked_from,
                           [m.id for m in history.messages])
    return out


async def descends(p: Any, head: str, ancestor: str) -> bool:
    """Whether ``head`` descends from ``ancestor`` along turns' parents and compactions' forks."""
    rows = {r.id: r for r in await p.checkpoints.lineage(CONV)}
    at: str | None = head
    while at is not None:
        if at == ancestor:
            return True
        row = rows[at]
        at = row.forked_from if row.kind is CheckpointKind.COMPACTION else row.parent
    return False


@pytest.fixture
async def outage(prefix: str, own_redis: OwnRedis) -> AsyncIterator[Any]:
    """Makes the test's :class:`Outage` on its own Redis, and stops its workers afterwards."""
    made: list[Outage] = []

    def make(name: str, *, ahead: bool, **settings: Any) -> Outage:
        made.append(Outage(prefix, own_redis, name, ahead=ahead, **settings))
        return made[-1]

    try:
        yield make
    finally:
        for o in made:
            await o.close()


async def _interrupt(o: Outage, kind: str, release: Callable[[], None]) -> None:
    """Stall Redis, or stop it and start it again, for as long as :data:`OUTAGES` says; what was held is let go
    (``release``) as it begins, so what it writes next is sent while Redis does not answer."""
    await o.loaded()
    if kind.startswith("stall"):
        o.server.stall()
    else:
        o.server.stop()
    try:
        release()
        arriving = asyncio.create_task(o.arrive(2))  # while Redis is away: refused, or acknowledged late
        await asyncio.sleep(OUTAGES[kind])  # the outage's length (what the test is about), not a wait for something
    finally:
        if kind.startswith("stall"):
            o.server.resume()
        else:
            o.server.start()
    await arriving


async def _check(o: Outage, before: dict[str, Any], head_before: str, *, compacted: bool = True,
                 told: bool = True) -> None:
    """Once drained: every acknowledged message stored once along the lineage (and no message twice), the checkpoints
    completed before as they were, the head a descendant of the one before; with ``compacted``, a compaction was made
    meanwhile, and with ``told`` each one by a turn that says so (its writer heard Redis's answer, or a copy's)."""
    p = o.workers[0]
    await until(o.drained, 30, f"drained; errors: {o.errors[-5:]}")
    for q in o.workers:
        await q.settle()
    messages = await stored(p)
    every = [m.id for m in messages]
    assert len(every) == len(set(every)), f"stored twice: {sorted({i for i in every if every.count(i) > 1})}"
    ids = [m.id for m in messages if m.role == "user" and not m.flags.runtime]
    acknowledged = set(o.acknowledged)
    lost = [m for m in o.acknowledged if m not in ids]
    doubled = sorted({m for m in ids if ids.count(m) > 1})
    assert not lost and not doubled, f"lost {lost}, doubled {doubled}; errors {o.errors[-8:]}"
    assert set(ids) <= acknowledged | set(o.sent), "nothing stored that nobody sent"
    after = await completed(p)
    rewritten = [cid for cid, row in before.items() if after.get(cid) != row]
    assert not rewritten, f"checkpoints completed before the outage changed: {rewritten}"
    head = (await p.checkpoints.require_state(CONV)).head_checkpoint_id
    assert head is not None and await descends(p, head, head_before), "the head descends from the one before"
    if compacted:
        forks = {r.id for r in await p.checkpoints.lineage(CONV) if r.kind is CheckpointKind.COMPACTION and
                 r.status is CheckpointStatus.COMPLETED and r.id not in before}
        reported = {r.compaction.new_checkpoint_id for r in o.results if r.compaction is not None}
        assert forks, "a compaction was made through the outage"
        assert forks <= reported or not told, f"made, {forks}; reported, {reported}; errors {o.errors[-5:]}"


async def _held(o: Outage) -> tuple[dict[str, Any], str]:
    """The completed checkpoints and the head before the outage, with the summarizer held back from here on."""
    a = o.workers[0]
    before = await completed(a)
    head_before = (await a.checkpoints.require_state(CONV)).head_checkpoint_id
    assert head_before is not None
    o.summarizer.gate.clear()
    return before, head_before


@pytest.mark.parametrize("kind", list(OUTAGES))
async def test_an_outage_while_a_turn_compacts_stores_every_acknowledged_message_once(outage: Any, kind: str) -> None:
    """The turn's compaction waits for the summarizer when Redis goes away; the summarizer answers meanwhile, so the
    fork is sent to a Redis that does not answer (and sent again, each time a command times out)."""
    o: Outage = outage(f"outage-turn-{kind}", ahead=False)
    await o.seed(until_compacting=True)
    before, head_before = await _held(o)
    await o.arrive()
    o.start(0)
    await until(lambda: o.summarizer.waiting >= 1, 20, "the turn's compaction asked the summarizer")
    o.start(1)
    await o.arrive(2)
    await _interrupt(o, kind, o.summarizer.gate.set)
    await o.arrive(3)
    # (past a command's retries, the fork a stalled Redis runs later is made by a worker that gave up on it)
    await _check(o, before, head_before, told=kind != "stall-past-the-lease")


@pytest.mark.parametrize("kind", ["stall-past-the-lease", "restart"])
async def test_an_outage_while_a_handoff_is_planned_ahead_stores_every_acknowledged_message_once(
        outage: Any, kind: str) -> None:
    """A committed turn plans the next handoff in the background; Redis goes away while the summarizer writes it,
    and the turns after it go on to the trigger and compact, adopting that plan or planning again."""
    o: Outage = outage(f"outage-ahead-{kind}", ahead=True)
    await o.seed(until_compacting=False)
    before, head_before = await _held(o)
    await o.arrive()
    o.start(0, 1)
    await until(lambda: o.summarizer.waiting >= 1, 20, "the committed turn's job asked the summarizer")
    await o.arrive(2)
    await _interrupt(o, kind, o.summarizer.gate.set)
    for _ in range(12):  # a turn each, on to the trigger
        await o.arrive()
        await until(o.drained, 30, f"the message answered; errors: {o.errors[-5:]}")
    await _check(o, before, head_before)


@pytest.mark.parametrize("kind", ["stall", "restart"])
async def test_an_outage_while_a_paused_turn_resumes_stores_every_acknowledged_message_once(
        outage: Any, kind: str) -> None:
    """A turn the model did not answer in time waits to resume; the messages after it resume it, and Redis goes
    away as the turn adds them to its checkpoint (the inbox items it takes counted with them, and trimmed when it
    commits)."""
    o: Outage = outage(f"outage-resume-{kind}", ahead=False)
    a = o.workers[0]
    await o.arrive()
    await a.run(CONV)
    before = await completed(a)
    head_before = (await a.checkpoints.require_state(CONV)).head_checkpoint_id
    assert head_before is not None
    o.model.push(Step(error=litellm.Timeout("no answer in time", model="scripted/test", llm_provider="scripted")))
    await o.arrive()
    o.start(0)
    await until(lambda: any(r.status == "awaiting_resume" for r in o.results), 20, "the turn waits to resume")
    adding = Paused(a.checkpoints, "append")
    await o.arrive(3)
    await until(adding.reached.is_set, 20, "the turn resumes with the messages after it")
    o.start(1)
    await _interrupt(o, kind, adding.go.set)
    await o.arrive(2)
    await _check(o, before, head_before, compacted=False)
