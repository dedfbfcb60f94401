"""Real worker processes (``threadkeeper serve --http``) on the real Redis, against the loopback Slack fake and
a slow loopback OpenAI-compatible model: several workers with turns longer than the lease, kill -9 mid-turn
and between commit and post, SIGTERM mid-turn. Each test counts what matters: every acknowledged message in
the history, every turn answered exactly once, no ``running`` checkpoint and no lease left behind."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import REDIS_URL
from fakes import free_port, until
from model_server import ModelServer, Reply
from prestarted import Forked, spawn
from slack_fake import FakeSlack, event_body, sign

from threadkeeper.bot.readback import READ_LAG_SECONDS
from threadkeeper.bot.streaming import DRAFT, STREAM_BUFFER
from threadkeeper.persistence import CheckpointStatus
from threadkeeper.root import build_pipeline
from threadkeeper.services import measure
from threadkeeper.services.app import POSTED
from threadkeeper.settings import Settings
from threadkeeper.stores import build_stores

pytestmark = pytest.mark.slow(30)  # worker processes start, are killed and replaced: 10 to 60 s a test

SECRET = "process-test-secret"
CHANNEL = "C500"
LEASE = 5.0


class Worker:
    def __init__(self, proc: Forked, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    async def post(self, body: dict) -> int:
        raw = json.dumps(body)
        async with aiohttp.ClientSession() as http, http.post(f"http://127.0.0.1:{self.port}/slack/events",
                                                             data=raw, headers=sign(SECRET, raw)) as response:
            return response.status

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    async def stop(self) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return int(self.proc.returncode or 0)


class Fleet:
    def __init__(self, slack: FakeSlack, model: ModelServer, prefix: str, tmp: Path) -> None:
        self.slack, self.model, self.prefix, self.tmp = slack, model, prefix, tmp
        self.workers: list[Worker] = []
        self.window = 16_000
        self.lease = LEASE
        self.use_redis(REDIS_URL)

    def use_redis(self, url: str) -> None:
        """Workers started from now on, and this fleet's own reads, use the Redis at ``url``."""
        self.redis_url = url
        settings = Settings(_env_file=None, redis_url=url, threadkeeper_key_prefix=self.prefix,  # type: ignore[call-arg]
                            ai_model="openai/gpt-4o")
        self.stores = build_stores(settings)
        self.pipeline = build_pipeline(settings, self.stores)

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS", "SLACK", "AI_", "THREADKEEPER",
                                                                         "OPENAI", "OLLAMA"))}
        return {**keep, "REDIS_URL": self.redis_url, "THREADKEEPER_KEY_PREFIX": self.prefix,
                "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SECRET,
                "SLACK_API_BASE_URL": self.slack.base_url, "AI_MODEL": "openai/gpt-4o",
                "AI_MODEL_CONTEXT_WINDOW_TOKENS": str(self.window), "OPENAI_API_KEY": "sk-loopback-test",
                "OPENAI_BASE_URL": f"{self.model.url}/v1", "AI_RETRY_ATTEMPTS": "1", "AI_TIMEOUT_SECONDS": "60",
                "THREADKEEPER_LEASE_SECONDS": str(self.lease), "THREADKEEPER_SWEEP_SECONDS": "1",
                "THREADKEEPER_SHUTDOWN_SECONDS": "0.5", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    async def start(self, n: int) -> list[Worker]:
        started = []
        for i in range(n):
            port = free_port()
            log = self.tmp / f"worker-{len(self.workers)}.log"
            log.touch()  # there to read from the start, whatever the worker has written yet
            # ``threadkeeper serve`` forked from an interpreter that has imported the stack (tests/prestarted.py)
            proc = await asyncio.to_thread(spawn, "serve", "--http", "--host", "127.0.0.1", "--port", str(port),
                                           env=self.env(), cwd=self.tmp, stderr=log)
            worker = Worker(proc, port, log)
            self.workers.append(worker)
            started.append(worker)
        # a worker connects, builds its pipeline and preflights Slack before it listens: seconds on a loaded machine
        deadline = time.monotonic() + 180
        async with aiohttp.ClientSession() as http:
            for worker in started:
                while True:
                    assert worker.proc.returncode is None, worker.log.read_text()[-2000:]
                    try:
                        async with http.get(f"http://127.0.0.1:{worker.port}/healthz") as response:
                            if response.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    assert time.monotonic() < deadline, worker.log.read_text()[-2000:]
                    await asyncio.sleep(0.2)
        return started

    def replies(self, root: str) -> list[str]:
        return [m["text"] for m in self.slack.bot_messages(CHANNEL, root) if not str(m["text"]).startswith("_")]

    async def until(self, done: Callable[[], bool | Awaitable[bool]], seconds: float, why: str) -> None:
        await until(done, seconds, lambda: f"{why}; worker logs:\n" + "\n".join(
            w.log.read_text()[-1500:] for w in self.workers), every=0.1)

    async def settled(self, root: str, seconds: float = 15.0) -> list[CheckpointStatus]:
        """The statuses of a conversation's checkpoints, once nothing runs and no lease is held: waited for (a
        worker releases its lease after it has posted the reply, settled the registry and looked at the inbox once
        more), never assumed at once."""
        cid = f"slack:T1:{CHANNEL}:{root}"

        async def quiet() -> bool:
            rows = await self.pipeline.checkpoints.lineage(cid)
            return await self.stores.leases.holder(cid) is None and \
                not any(r.status is CheckpointStatus.RUNNING for r in rows)

        await self.until(quiet, seconds, "no lease left behind and no running checkpoint left")
        return [r.status for r in await self.pipeline.checkpoints.lineage(cid)]

    async def history_texts(self, root: str) -> list[str]:
        history = await self.pipeline.checkpoints.load_history(f"slack:T1:{CHANNEL}:{root}")
        return [m.text for m in history.messages if not m.flags.runtime]


def mention(ts: str, text: str, thread_ts: str | None = None) -> dict:
    event = {"type": "app_mention", "user": "U1", "text": f"<@UBOT> {text}", "ts": ts, "channel": CHANNEL,
             "event_ts": ts}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


@pytest.fixture
async def fleet(server, prefix, redis_client, tmp_path) -> AsyncIterator[Fleet]:
    slack = await FakeSlack().start()
    f = Fleet(slack, server, prefix, tmp_path)
    try:
        yield f
    finally:
        for event in slack.stalls.values():
            event.set()
        await asyncio.gather(*(w.stop() for w in f.workers))
        await f.stores.client.aclose()
        await slack.close()


async def test_three_workers_answer_every_turn_exactly_once_when_turns_outlast_the_lease(fleet: Fleet) -> None:
    workers = await fleet.start(3)
    fleet.model.default = Reply(text="Answered.", delay=LEASE + 2)  # every turn outlasts the lease
    roots = [f"1700030{i}00.000100" for i in range(3)]
    for i, root in enumerate(roots):
        assert await workers[i].post(event_body(mention(root, f"question {i}"), event_id=f"Ev-p{i}")) == 200
    await fleet.until(lambda: any("question 0" in json.dumps(r["messages"]) for r in fleet.model.requests), 30,
                      "thread 0's turn is running")  # a follow-up arrives at another worker meanwhile
    follow_up = "1700030000.000200"
    assert await workers[1].post(event_body(mention(follow_up, "and a follow-up", roots[0]), event_id="Ev-p9")) == 200
    await fleet.until(lambda: [len(fleet.replies(r)) for r in roots] == [2, 1, 1], 45, "every turn answered")
    await asyncio.sleep(LEASE + 1.5)  # long enough for any wrongful takeover to show
    assert [len(fleet.replies(r)) for r in roots] == [2, 1, 1], "each turn answered exactly once"
    assert len(fleet.model.requests) == 4, "no model call was wasted on a turn another worker also ran"
    for root in roots:
        assert CheckpointStatus.FAILED not in await fleet.settled(root)
    texts = await fleet.history_texts(roots[0])
    assert texts.count("question 0") == 1 and texts.count("and a follow-up") == 1 and texts.count("Answered.") == 2


async def _mid_turn(fleet: Fleet, root: str, question: str, answer: str) -> Worker:
    """Two workers; a mention to the first, whose model call then hangs; the calls after it answer ``answer``.
    Returns the first worker once its turn is waiting on the model."""
    a, _ = await fleet.start(2)
    fleet.model.push(Reply(text="never delivered", delay=12))
    fleet.model.default = Reply(text=answer)
    assert await a.post(event_body(mention(root, question), event_id=f"Ev-{root}")) == 200
    await fleet.until(lambda: len(fleet.model.requests) == 1, 20, "the turn reached the model")
    return a


async def test_a_worker_killed_mid_turn_is_replaced_and_the_message_answered_once(fleet: Fleet) -> None:
    root = "1700031000.000100"
    a = await _mid_turn(fleet, root, "what is the status of PAY-5512?", "Answered by the survivor.")
    a.kill()
    killed = time.monotonic()
    await fleet.until(lambda: fleet.replies(root) == ["Answered by the survivor."], 20, "the survivor answered")
    assert time.monotonic() - killed < LEASE + 6, "taken over once the lease expired"
    await asyncio.sleep(2)
    assert fleet.replies(root) == ["Answered by the survivor."], "answered once"
    statuses = await fleet.settled(root)
    assert statuses.count(CheckpointStatus.FAILED) == 1, "the dead worker's turn is failed on takeover"
    texts = await fleet.history_texts(root)
    assert texts.count("what is the status of PAY-5512?") == 1 and texts[-1] == "Answered by the survivor."


async def test_a_worker_killed_between_commit_and_post_has_its_reply_posted_once(fleet: Fleet) -> None:
    a, b = await fleet.start(2)
    fleet.model.default = Reply(text="The committed answer.")
    fleet.slack.stalls["chat.postMessage"] = stalled = asyncio.Event()
    root = "1700032000.000100"
    assert await a.post(event_body(mention(root, "summarize the incident"), event_id="Ev-c1")) == 200
    await fleet.until(lambda: bool(fleet.slack.calls_to("chat.postMessage")), 20, "the reply reached Slack")
    a.kill()  # the turn is committed; its post never completes
    await a.proc.wait()
    stalled.set()
    await fleet.until(lambda: fleet.replies(root) == ["The committed answer."], LEASE + 10, "the reply was posted")
    await asyncio.sleep(2.5)
    assert fleet.replies(root) == ["The committed answer."], "posted exactly once"
    assert len(fleet.model.requests) == 1, "the committed turn is not run again"
    assert CheckpointStatus.FAILED not in await fleet.settled(root)


STREAMED = " ".join(f"step{i} of the rollout plan" for i in range(24))
"""A reply long enough to be streamed (several times ``STREAM_BUFFER``)."""


@pytest.mark.parametrize(("method", "read_lag"), [("chat.startStream", 0.0),
                                                  ("chat.startStream", READ_LAG_SECONDS - 1),
                                                  ("chat.postMessage", 0.0)],
                         ids=["streamed-reads-current", "streamed-reads-lag", "posted-then-updated-reads-current"])
async def test_a_stream_begun_by_a_worker_killed_before_it_heard_slack_is_replaced_by_one_whole_reply(
        fleet: Fleet, method: str, read_lag: float) -> None:
    """Slack began the reply's stream (chat.startStream was accepted; where Slack cannot stream, the draft's
    chat.postMessage) and the worker was killed before Slack's answer reached it, so it never learned the
    message's ts. The worker that takes the thread over finds that half-written message in the thread, also when
    Slack's reads show it only seconds later, and replaces it: one whole reply, nothing left streaming."""
    assert len(STREAMED) > 4 * STREAM_BUFFER
    streamed = method == "chat.startStream"
    a, _ = await fleet.start(2)
    fleet.model.default = Reply(text=STREAMED, chunk_delay=0.01)
    fleet.slack.read_lag = read_lag
    fleet.slack.refuse_streaming = not streamed
    fleet.slack.holds[method] = answered = asyncio.Event()
    root = f"17000320{int(read_lag):02d}.00010{int(streamed)}"
    cid = f"slack:T1:{CHANNEL}:{root}"
    assert await a.post(event_body(mention(root, "the rollout plan, please"), event_id=f"Ev-k{root}")) == 200
    await fleet.until(lambda: bool(fleet.slack.bot_messages(CHANNEL, root)), 20, "Slack began the reply")
    a.kill()  # its call is done in Slack; the answer is still on its way
    await a.proc.wait()
    [stranded] = fleet.slack.bot_messages(CHANNEL, root)
    assert stranded["streaming"] is streamed and stranded["ts"] not in str(await fleet.stores.notes.flag(cid, DRAFT))
    answered.set()
    await fleet.until(lambda: fleet.replies(root) == [STREAMED], LEASE + READ_LAG_SECONDS + 20,
                      "the survivor replaced the half-written reply with its whole reply")
    assert CheckpointStatus.FAILED in await fleet.settled(root), "the dead worker's turn, failed on takeover"
    [reply] = fleet.slack.bot_messages(CHANNEL, root)
    assert reply["text"] == STREAMED and reply["streaming"] is False and reply["metadata"]["event_payload"]["part"] == 0
    assert fleet.slack.deleted == [stranded["ts"]], "the half-written message deleted, once"
    if streamed:
        assert fleet.slack.calls_to("chat.stopStream")[0]["ts"] == stranded["ts"], "stopped before it was deleted"
    assert not await fleet.stores.notes.flag(cid, DRAFT)
    assert (await fleet.history_texts(root)).count(STREAMED) == 1


async def test_sigterm_mid_turn_hands_the_turn_to_another_worker_within_seconds(fleet: Fleet) -> None:
    root = "1700033000.000100"
    a = await _mid_turn(fleet, root, "deploy status?", "Answered after the deploy.")
    cid = f"slack:T1:{CHANNEL}:{root}"
    held = await fleet.stores.leases.holder(cid)
    a.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(a.proc.wait(), 10) == 0, "a clean exit"
    # released on the way out, not left to expire: whoever holds it now is another worker
    assert held is not None and await fleet.stores.leases.holder(cid) != held, "the lease was released at exit"
    await fleet.until(lambda: fleet.replies(root) == ["Answered after the deploy."], 10, "the other worker answered")
    statuses = await fleet.settled(root)
    assert CheckpointStatus.FAILED not in statuses and CheckpointStatus.SUPERSEDED in statuses
    assert (await fleet.history_texts(root)).count("deploy status?") == 1


async def test_a_worker_killed_mid_compaction_leaves_nothing_running_and_the_turn_is_answered(
        fleet: Fleet, prefix: str) -> None:
    root = "1700034000.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    seeding = build_pipeline(Settings(_env_file=None, redis_url=REDIS_URL, threadkeeper_key_prefix=prefix,  # type: ignore[call-arg]
                                      ai_model="offline", ai_model_context_window_tokens=100_000), fleet.stores)
    for i in range(80):  # a long thread recorded earlier: the next turn at a 4k window compacts first
        await seeding.submit(cid, f"update {i}: the rollout of service-{i} is reviewed with its owner, dashboards, "
                                  "alerts and runbooks checked one by one", author="Ben", id=f"1700034000.{i + 200:06d}",
                             reply_expected=False)
    await seeding.run(cid)
    await fleet.stores.notes.set_flag(cid, "subscribed", "1")
    fleet.model.push(Reply(text="- [#1] never used", delay=12))  # the summarizer, killed while it writes
    fleet.model.default = Reply(text="Answered after the compaction.")
    fleet.window = 4096
    a, b = await fleet.start(2)
    assert await a.post(event_body(mention("1700034100.000100", "where are we?", root), event_id="Ev-m1")) == 200
    await fleet.until(lambda: len(fleet.model.requests) == 1, 20, "the compaction asked the summarizer")
    assert "handoff notes" in fleet.model.requests[0]["messages"][0]["content"]
    a.kill()
    await fleet.until(lambda: fleet.replies(root) == ["Answered after the compaction."], LEASE + 15,
                      "the survivor compacted and answered")
    statuses = await fleet.settled(root)
    rows = await fleet.pipeline.checkpoints.lineage(cid)
    assert any(r.kind.value == "compaction" and r.status is CheckpointStatus.COMPLETED for r in rows)
    assert statuses.count(CheckpointStatus.FAILED) <= 1
    assert (await fleet.history_texts(root)).count("where are we?") == 1


class OwnRedis:
    """A redis-server this test starts on a free loopback port (and restarts, and stops)."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.port, self.dir, self.args = free_port(), tmp / "redis", args
        self.dir.mkdir(exist_ok=True)
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), *self.args,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        for _ in range(100):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()  # SIGTERM: Redis writes what it persists, then exits
            await self.process.wait()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server to start its own")
@pytest.mark.parametrize("persistence", ["aof", "none"])
async def test_a_redis_restart_costs_no_turn(fleet: Fleet, tmp_path: Path, persistence: str) -> None:
    """With the append-only file, everything acknowledged survives a restart of Redis; without persistence the
    worker said so at start-up (and in /healthz) and keeps working after it. Either way the pooled
    connections Redis dropped are replaced without a failed request or a lost turn."""
    args = ("--appendonly", "yes", "--appendfsync", "always") if persistence == "aof" else \
        ("--appendonly", "no", "--save", "")
    redis = OwnRedis(tmp_path, *args)
    await redis.start()
    try:
        fleet.use_redis(redis.url)
        fleet.model.default = Reply(text="Noted.")
        [worker] = await fleet.start(1)
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{worker.port}/healthz") as health:
            assert (await health.json())["durability"] == persistence
        if persistence == "none":
            assert "keeps nothing across a restart" in worker.log.read_text()
        root = "1700035000.000100"
        assert await worker.post(event_body(mention(root, "first: the vault code is 4471"), event_id="Ev-r1")) == 200
        await fleet.until(lambda: len(fleet.replies(root)) == 1, 20, "the first mention answered")
        await redis.stop()
        await redis.start()
        status = await worker.post(event_body(mention("1700035000.000200", "second: what is the vault code?", root),
                                              event_id="Ev-r2"))
        assert status == 200, "acknowledged on the first try after the restart"
        await fleet.until(lambda: len(fleet.replies(root)) == 2, 20, "the second mention answered")
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{worker.port}/healthz") as health:
            assert health.status == 200
        texts = await fleet.history_texts(root)
        if persistence == "aof":
            assert texts == ["first: the vault code is 4471", "Noted.", "second: what is the vault code?", "Noted."]
        else:
            assert texts == ["second: what is the vault code?", "Noted."], "what Redis kept: nothing from before"
        await worker.stop()
    finally:
        await fleet.stores.client.aclose()
        await redis.stop()


FLEET_THREADS = int(os.environ.get("THREADKEEPER_FLEET_THREADS") or 0)
"""Threads of each exactly-once fleet test: a few in the suite (``IN_SUITE``), the full size on request (it takes
a minute or more): ``THREADKEEPER_FLEET_THREADS=100 pytest tests/test_processes.py -k exactly_once_with``. The
variant where Slack only drops posts runs only on request: the suite runs it in one process
(``test_delivery.py``: three workers in one process on the real Redis)."""
IN_SUITE = 6


@pytest.mark.parametrize("variant", ["drops", "late-reads", "kill-mid-stream"])
async def test_three_workers_answer_every_thread_exactly_once_with_a_slow_slack_that_drops_posts(
        fleet: Fleet, variant: str) -> None:
    """Three worker processes, a model taking 1 s. Each thread gets a mention at one worker and, while its reply
    is being posted, a follow-up at another. ``drops``: Slack takes 1 s per post, drops the connection after
    accepting every fourth post and answers every seventh 500 without posting it. ``late-reads``: the same, and
    a post shows in Slack's reads only 4 s after it was made, so a post whose answer was lost is not there yet
    when the thread is first read back. ``kill-mid-stream``: replies are streamed, and a worker is killed
    (``kill -9``) once Slack began one of its streams and before the answer (with the stream's ts) reached it
    (one more for every 40 threads), a new one started in its place. Every turn's reply is in Slack exactly once
    (by the turn's metadata marker), none is left streaming, every message is in the history once, and nothing
    is left running, leased or owed."""
    if variant == "drops" and not FLEET_THREADS:
        pytest.skip("on request: set THREADKEEPER_FLEET_THREADS (100 for the full run); test_delivery.py runs it "
                    "in one process")
    threads = FLEET_THREADS or IN_SUITE
    # Each worker runs about a third of the threads at once, and on a loaded machine its event loop falls behind
    # in proportion (every streamed chunk is parsed on it): the lease, renewed every third of it, must outlast
    # that lag, or leases are lost and turns run again elsewhere. 5 s up to 25 threads, then in proportion.
    fleet.lease = LEASE * max(1.0, threads / 25)
    workers = await fleet.start(3)
    streamed = variant == "kill-mid-stream"
    answer = STREAMED if streamed else "Answered."
    fleet.model.default = Reply(text=answer, delay=1.0, chunk_delay=0.03 if streamed else 0.0)
    if not streamed:
        fleet.slack.delays["chat.postMessage"] = 1.0
        fleet.slack.drop_every = 4
        fleet.slack.fail_every = 7  # answered 500, nothing posted (the 28th, both: the 500)
    if variant == "late-reads":
        fleet.slack.read_lag = 4.0
    if streamed:  # a stream begins at once; its ts reaches the worker a second later
        fleet.slack.answer_delays["chat.startStream"] = 1.0
    roots = [f"17000400{i:02d}.000100" if i < 100 else f"1700041{i:03d}.000100" for i in range(threads)]
    during_post = 0
    started = time.monotonic()

    async def post(i: int, body: dict) -> None:
        """To the i-th worker alive (the next one, when it was killed meanwhile), sent again as Slack does when a
        worker answers 503 (its Redis did not answer within the ack's time: on a loaded machine a worker's event
        loop can fall seconds behind), after a pause that grows as Slack's does, until the ack."""
        deadline = time.monotonic() + 120
        for k in itertools.count(i):
            worker = workers[k % len(workers)]
            if worker.proc.returncode is None:
                try:
                    if await worker.post(body) == 200:
                        return
                except aiohttp.ClientError:
                    pass  # killed while it was asked
            assert time.monotonic() < deadline, "no worker acknowledged the event"
            await asyncio.sleep(min(5.0, 0.25 * (k - i + 1)))

    def begun(root: str) -> bool:
        """Slack began the reply: a stream, the reply posted whole, or a draft posted to be updated as it grows (a
        worker that runs a turn another worker acknowledged does not know whom to stream to)."""
        return any(c.get("thread_ts") == root and (name == "chat.startStream" or
                                                   answer.startswith(str(c.get("text") or "_")))
                   for name, c in fleet.slack.calls if name in ("chat.postMessage", "chat.startStream"))

    async def thread(i: int, root: str) -> None:
        nonlocal during_post
        await post(i, event_body(mention(root, f"question {i}"), event_id=f"Ev-x{i}"))
        try:
            await fleet.until(lambda: begun(root), 60 + (threads if streamed else 0), "a reply is being posted")
        except AssertionError:
            cid = f"slack:T1:{CHANNEL}:{root}"
            rows = await fleet.pipeline.checkpoints.lineage(cid)
            raise AssertionError(
                f"no reply begun in {root}: lease {await fleet.stores.leases.holder(cid)}, owed "
                f"{cid in await fleet.stores.inbox.pending_conversations()}, draft "
                f"{await fleet.stores.notes.flag(cid, DRAFT)!r}, checkpoints {[r.status.value for r in rows]}, calls "
                f"{[(n, c.get('ts')) for n, c in fleet.slack.calls if root in (c.get('thread_ts'), c.get('ts'))]}, "
                f"workers alive {[w.proc.returncode is None for w in workers]}, delivered "
                f"{await fleet.stores.notes.flag(cid, POSTED)!r} of {[r.id for r in rows]}") from None
        during_post += not fleet.replies(root)
        await post(i + 1, event_body(mention(root.replace(".000100", ".000200"), f"follow-up {i}", root),
                                     event_id=f"Ev-y{i}"))

    async def killing() -> int:
        """Kill a worker while Slack streams a reply it writes, start another in its place; again every 40
        threads. Returns how many were killed."""
        kills = 0
        for n in range(max(1, threads // 40)):
            victim = workers[n % 3]
            mine = roots[n % 3::3]
            await fleet.until(lambda: any(c.get("thread_ts") in mine for c in fleet.slack.calls_to("chat.startStream")),
                              60, "a stream of the worker to kill began")
            await asyncio.sleep(0.3)  # Slack began it; the worker has not heard its ts yet
            victim.kill()
            await victim.proc.wait()
            kills += 1
            [workers[n % 3]] = await fleet.start(1)
        return kills

    killer = asyncio.create_task(killing()) if streamed else None
    await asyncio.gather(*(thread(i, root) for i, root in enumerate(roots)))
    kills = await killer if killer is not None else 0
    owed = fleet.stores.inbox.pending_conversations
    deadline = time.monotonic() + 90 + (threads if streamed else 0)
    while await owed():
        assert time.monotonic() < deadline, f"still owed: {await owed()}"
        await asyncio.sleep(0.2)
    elapsed = time.monotonic() - started
    await asyncio.sleep(fleet.lease + 1.5)  # long enough for a wrongful takeover or a late second post to show
    duplicates = lost = answered = streaming = 0
    for i, root in enumerate(roots):
        cid = f"slack:T1:{CHANNEL}:{root}"
        await fleet.settled(root, 30)
        rows = await fleet.pipeline.checkpoints.lineage(cid)
        turns = {r.id for r in rows if r.kind.value == "turn" and r.status is CheckpointStatus.COMPLETED}
        messages = [m for m in fleet.slack.bot_messages(CHANNEL, root) if not str(m["text"]).startswith("_")]
        shown = [(m.get("metadata") or {}).get("event_payload", {}).get("checkpoint") for m in messages]
        streaming += sum(bool(m.get("streaming")) for m in messages)
        answered += len(turns)
        duplicates += len(shown) - len(set(shown))
        lost += len(turns - set(shown))
        assert None not in shown and set(shown) <= turns, f"every reply in Slack is one turn's: {messages}"
        texts = await fleet.history_texts(root)
        assert texts.count(f"question {i}") == 1 and texts.count(f"follow-up {i}") == 1, "every message kept once"
    print(f"{variant}, threads {len(roots)}: turns answered {answered}, posts "
          f"{len(fleet.slack.calls_to('chat.postMessage'))}, streams {len(fleet.slack.calls_to('chat.startStream'))}, "
          f"dropped {len(fleet.slack.dropped)}, answered 500 {fleet.slack.failed}, workers killed {kills}, half-written replies deleted "
          f"{len(fleet.slack.deleted)}, follow-ups during a post {during_post}, duplicates {duplicates}, lost {lost}, "
          f"left streaming {streaming}, all answered in {elapsed:.1f} s (lease {fleet.lease:g} s, load average "
          f"{os.getloadavg()[0]:.1f})")
    assert duplicates == 0 and lost == 0 and streaming == 0
    assert answered >= len(roots)
    if streamed:
        assert kills >= 1 and fleet.slack.deleted, "a worker was killed mid-stream, its stream replaced"
    else:
        assert fleet.slack.dropped and fleet.slack.failed and during_post >= len(roots) // 2


async def test_a_mention_in_a_busy_followed_thread_is_answered_within_the_model_latency_plus_a_second(
        fleet: Fleet) -> None:
    """Three workers, a model (and router) taking 3 s a call. After the thread's first answer, eight plain
    messages arrive at all three workers (each needs the router), then a mention: it is answered within 3 s + 1 s
    of arriving, whatever the routing of the messages before it is doing."""
    workers = await fleet.start(3)
    latency = 3.0
    fleet.model.default = Reply(text="Answered.", delay=latency)
    root = "1700035000.000100"
    assert await workers[0].post(event_body(mention(root, "we start the migration now"), event_id="Ev-r0")) == 200
    await fleet.until(lambda: len(fleet.replies(root)) == 1, 30, "the first mention answered")
    for i in range(8):
        event = {"type": "message", "user": "U2", "text": f"step {i} of the migration is done", "channel": CHANNEL,
                 "ts": f"1700035001.{i:06d}", "thread_ts": root, "channel_type": "channel"}
        assert await workers[i % 3].post(event_body(event, event_id=f"Ev-r{i + 1}")) == 200
    await asyncio.sleep(0.5)  # their routing is under way
    asked = time.monotonic()
    assert await workers[2].post(event_body(mention("1700035002.000100", "is it finished?", root),
                                            event_id="Ev-r9")) == 200
    await fleet.until(lambda: len(fleet.replies(root)) == 2, 30, "the mention answered")
    waited = time.monotonic() - asked
    print(f"mention answered {waited:.2f} s after it arrived (model {latency} s)")
    assert waited <= latency + 1.0, waited
    deadline = time.monotonic() + 30
    while await fleet.stores.inbox.pending_conversations():
        assert time.monotonic() < deadline, "drained"
        await asyncio.sleep(0.2)
    texts = await fleet.history_texts(root)
    assert all(texts.count(f"step {i} of the migration is done") == 1 for i in range(8))
    assert len(fleet.replies(root)) == 2


async def _thread_near_the_trigger(fleet: Fleet, prefix: str, cid: str, *, past: str) -> Any:
    """A long thread recorded earlier, whose history sits past the workers' (4k window) preparation threshold
    (``past="prepare"``, short of the trigger) or their trigger (``past="trigger"``); returns the workers' budget."""
    fleet.window = 4096
    budget = build_pipeline(Settings(_env_file=None, redis_url=REDIS_URL, threadkeeper_key_prefix=prefix,  # type: ignore[call-arg]
                                     ai_model="openai/gpt-4o", ai_model_context_window_tokens=4096),
                            fleet.stores).budget
    seeding = build_pipeline(Settings(_env_file=None, redis_url=REDIS_URL, threadkeeper_key_prefix=prefix,  # type: ignore[call-arg]
                                      ai_model="offline", ai_model_context_window_tokens=100_000), fleet.stores)
    goal = budget.prepare_tokens if past == "prepare" else budget.trigger_tokens
    for i in range(200):
        await seeding.submit(cid, f"update {i}: service-{i} is reviewed with its owner, dashboards checked",
                             author="Ben", id=f"{cid.rsplit(':', 1)[1][:10]}.{i + 200:06d}", reply_expected=False)
        await seeding.run(cid)
        history = await fleet.pipeline.checkpoints.load_history(cid)
        if measure(history, fixed_prompt_tokens=budget.fixed_prompt_tokens) >= goal:
            break
    await fleet.stores.notes.set_flag(cid, "subscribed", "1")
    return budget


async def _nothing_orphaned(fleet: Fleet, prefix: str, cid: str) -> None:
    """The lineage is whole (every parent and fork there, the head and its epoch completed), nothing runs, no
    handoff planned ahead is left, and every key of the conversation expires."""
    checkpoints = fleet.pipeline.checkpoints
    state = await checkpoints.require_state(cid)
    rows = {r.id: r for r in await checkpoints.lineage(cid)}
    assert state.head_checkpoint_id in rows and not any(r.status is CheckpointStatus.RUNNING for r in rows.values())
    for row in rows.values():
        assert row.parent is None or row.parent in rows
        assert row.forked_from is None or rows[row.forked_from].status is CheckpointStatus.COMPLETED
    at: str | None = state.head_checkpoint_id
    while at is not None:
        assert rows[at].status is CheckpointStatus.COMPLETED, "the head's lineage holds completed checkpoints only"
        at = rows[at].parent if rows[at].kind.value == "turn" else None
    await checkpoints.load_history(cid)
    assert await checkpoints.prepared(cid) is None
    keys = [k async for k in fleet.stores.client.scan_iter(match=f"{prefix}:{{{cid}}}:*")]
    lives = {k: await fleet.stores.client.pttl(k) for k in keys}
    assert keys and all(ms > 0 for ms in lives.values()), f"every key of the thread expires: {lives}"


def _summarizing(request: dict) -> bool:
    return "handoff notes" in request["messages"][0]["content"]


async def test_a_worker_killed_while_it_plans_a_handoff_ahead_leaves_nothing_behind(fleet: Fleet, prefix: str) -> None:
    root = "1700035000.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    budget = await _thread_near_the_trigger(fleet, prefix, cid, past="prepare")
    # the provider counts about what the history holds (the loopback model's default would halve every measure)
    counted = budget.trigger_tokens + budget.fixed_prompt_tokens
    fleet.model.push(Reply(text="First answer.", prompt_tokens=counted), Reply(text="- [#1] never kept", delay=12))
    fleet.model.default = Reply(text="Answered after the crash.", prompt_tokens=counted)
    a, b = await fleet.start(2)
    assert await a.post(event_body(mention("1700035100.000100", "where are we?", root), event_id="Ev-p1")) == 200
    await fleet.until(lambda: len(fleet.model.requests) == 2, 20, "the answer, then the summarizer planning ahead")
    assert not _summarizing(fleet.model.requests[0]) and _summarizing(fleet.model.requests[1])
    assert fleet.replies(root) == ["First answer."], "the reply did not wait for the plan"
    a.kill()
    assert await b.post(event_body(mention("1700035200.000100", "and now?", root), event_id="Ev-p2")) == 200
    await fleet.until(lambda: fleet.replies(root) == ["First answer.", "Answered after the crash."], LEASE + 15,
                      "the next turn answered")
    await fleet.settled(root)
    await _nothing_orphaned(fleet, prefix, cid)
    assert await fleet.stores.client.pttl(fleet.pipeline.checkpoints.keys(cid).preparing) <= 30_000, \
        "the killed worker's planning lease expires"
    texts = await fleet.history_texts(root)
    assert texts.count("where are we?") == 1 and texts.count("and now?") == 1


async def test_a_worker_killed_after_adopting_a_planned_handoff_leaves_the_new_head_and_the_turn_answered(
        fleet: Fleet, prefix: str) -> None:
    root = "1700036000.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    budget = await _thread_near_the_trigger(fleet, prefix, cid, past="trigger")
    planner = build_pipeline(Settings(_env_file=None, redis_url=REDIS_URL, threadkeeper_key_prefix=prefix,  # type: ignore[call-arg]
                                      ai_model="offline", ai_model_context_window_tokens=4096), fleet.stores)
    head = (await fleet.pipeline.checkpoints.require_state(cid)).head_checkpoint_id
    assert head is not None
    planner.compactor.prepare_after(cid, head, replace(budget, prepare_tokens=1))  # planned now, whatever the size
    await planner.settle()
    planned = await fleet.pipeline.checkpoints.prepared(cid)
    assert planned is not None and planned.from_checkpoint_id == head
    fleet.model.push(Reply(text="never posted", delay=12))  # the turn after its compaction, killed mid-answer
    fleet.model.default = Reply(text="Answered after the crash.")
    a, b = await fleet.start(2)
    assert await a.post(event_body(mention("1700036100.000100", "where are we?", root), event_id="Ev-a1")) == 200
    await fleet.until(lambda: len(fleet.model.requests) == 1, 20, "the turn compacted and asked the model")
    a.kill()
    await fleet.until(lambda: fleet.replies(root) == ["Answered after the crash."], LEASE + 15,
                      "the survivor answered from the adopted head")
    await fleet.settled(root)
    await _nothing_orphaned(fleet, prefix, cid)
    assert not any(_summarizing(r) for r in fleet.model.requests), "the adopted compaction asked no summarizer"
    forks = [r for r in await fleet.pipeline.checkpoints.lineage(cid) if r.kind.value == "compaction"]
    assert len(forks) == 1 and forks[0].forked_from == head
    fork = await fleet.pipeline.checkpoints.get(cid, forks[0].id)
    assert fork.meta.info["prepared_from"] == head
    assert (await fleet.history_texts(root)).count("where are we?") == 1
