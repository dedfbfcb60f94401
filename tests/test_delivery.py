"""Exactly-once delivery with several workers on the real Redis, against the loopback Slack fake made slow on
``chat.postMessage`` and dropping the connection after accepting some posts: no reply twice, none lost."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from fakes import Step, counted_commands, scripted, until
from slack_fake import BOT_USER, FakeSlack, event_body
from test_slack_bot import CHANNEL, make_harness, mention

from threadkeeper.persistence import CheckpointKind, CheckpointStatus


@pytest.fixture
def model():
    m = scripted()
    m.default = Step(text="Here is what I found.", delay=0.1)
    return m


def replies_in(slack: FakeSlack, root: str) -> list[dict]:
    """The bot's replies in a thread as Slack now shows them (status messages left out)."""
    return [m for m in slack.bot_messages(CHANNEL, root) if not str(m.get("text", "")).startswith("_")]


async def check_exactly_once(slack: FakeSlack, pipeline, roots: list[str]) -> tuple[int, int, int]:
    """Every turn that answered has its reply in Slack exactly once, and every reply in Slack is one turn's.
    Returns (turns answered, duplicates, lost)."""
    answered = duplicates = lost = 0
    for root in roots:
        cid = f"slack:T1:{CHANNEL}:{root}"
        rows = await pipeline.checkpoints.lineage(cid)
        turns = {r.id for r in rows if r.kind is CheckpointKind.TURN and r.status is CheckpointStatus.COMPLETED}
        shown = Counter((m.get("metadata") or {}).get("event_payload", {}).get("checkpoint")
                        for m in replies_in(slack, root))
        answered += len(turns)
        duplicates += sum(n - 1 for n in shown.values() if n > 1)
        lost += len(turns - set(shown))
        assert None not in shown, f"a reply in {root} belongs to no turn: {replies_in(slack, root)}"
    return answered, duplicates, lost


async def test_three_workers_post_each_reply_once_with_a_slow_slack_that_drops_posts(model, prefix,
                                                                                    redis_client) -> None:
    """Each thread gets a mention at one worker and, while that reply is still being posted (Slack takes 0.4 s
    per post), a follow-up at another worker; every third post is accepted by Slack and its connection dropped.
    The worker that receives the follow-up must not deliver the reply the first one is posting, and a post whose
    answer was lost is read back, not sent again."""
    slack = await FakeSlack().start()
    slack.delays["chat.postMessage"] = 0.4
    slack.drop_every = 3
    fleet = [await make_harness(prefix, redis_client, slack=slack) for _ in range(3)]
    workers = [h for h, _ in fleet]
    roots = [f"17000700{i:02d}.000100" for i in range(12)]
    in_flight = 0

    async def thread(i: int, root: str) -> None:
        nonlocal in_flight
        assert await workers[i % 3].post(event_body(mention(root, f"question {i}"), event_id=f"Ev-q{i}")) == 200
        await until(lambda: any(c.get("thread_ts") == root for c in slack.calls_to("chat.postMessage")), 10,
                    "the first reply is being posted")
        in_flight += not replies_in(slack, root)  # Slack has not shown the first reply yet
        follow = event_body(mention(f"17000700{i:02d}.000200", f"and a follow-up {i}", thread_ts=root),
                            event_id=f"Ev-f{i}")
        assert await workers[(i + 1) % 3].post(follow) == 200

    async def sweeping() -> None:
        while True:
            await asyncio.sleep(0.3)
            for w in workers:
                await w.bot.worker.sweep()

    sweeper = asyncio.create_task(sweeping())
    try:
        await asyncio.gather(*(thread(i, root) for i, root in enumerate(roots)))
        pending = workers[0].pipeline.inbox.pending_conversations
        deadline = time.monotonic() + 30
        while await pending() or any(not t.done() for w in workers for t in w.bot.worker.tasks.values()):
            assert time.monotonic() < deadline, f"still owed: {await pending()}"
            await asyncio.sleep(0.1)
    finally:
        sweeper.cancel()
        for h, http in fleet:
            await h.settle()
            await http.close()
        await slack.close()
    answered, duplicates, lost = await check_exactly_once(slack, workers[0].pipeline, roots)
    print(f"threads {len(roots)}, turns answered {answered}, posts {len(slack.calls_to('chat.postMessage'))}, "
          f"dropped {len(slack.dropped)}, follow-ups during a post {in_flight}, duplicates {duplicates}, lost {lost}")
    assert slack.dropped, "some posts lost their answer"
    assert in_flight >= len(roots) // 2, "follow-ups arrived while the first reply was being posted"
    assert duplicates == 0 and lost == 0
    assert answered >= len(roots)
    for i, root in enumerate(roots):
        texts = [m.text for m in (await workers[0].pipeline.checkpoints.load_history(
            f"slack:T1:{CHANNEL}:{root}")).messages if m.role == "user"]
        assert f"question {i}" in texts and f"and a follow-up {i}" in texts, "every message recorded"
        assert all(m.get("user") == BOT_USER for m in replies_in(slack, root))


async def test_an_idle_fleet_sweeps_10000_answered_conversations_with_a_handful_of_commands(model, prefix,
                                                                                           redis_client) -> None:
    """The sweep reads the registry of conversations owing work, not every conversation active today: three
    idle workers over 10,000 answered conversations send at most 100 Redis commands per sweep (one each)."""
    slack = await FakeSlack().start()
    fleet = [await make_harness(prefix, redis_client, slack=slack) for _ in range(3)]
    workers = [h for h, _ in fleet]
    try:
        for i in range(3):  # answered through the bot: each leaves the registry once drained
            assert await workers[i].post(event_body(mention(f"17000800{i:02d}.000100", f"hello {i}"),
                                                    event_id=f"Ev-i{i}")) == 200
        for w in workers:
            await w.settle()
        assert await workers[0].pipeline.inbox.pending_conversations() == []
        inbox = workers[0].pipeline.inbox
        now = time.time()
        pipe = redis_client.pipeline(transaction=False)
        for i in range(10_000):  # answered earlier today: their state and notes, nothing queued or owed
            cid = f"slack:T1:C{i % 50}:17000{i:05d}.000100"
            pipe.hset(inbox.keys(cid).state, mapping={"head": f"cp-{i}", "version": 3, "created_at": now - i,
                                                      "updated_at": now - i})
            pipe.hset(inbox.keys(cid).notes, mapping={"posted": f"cp-{i}", "subscribed": "1"})
        await pipe.execute()
        with counted_commands(redis_client) as sent:
            kicked = [await w.bot.worker.sweep() for w in workers]
            for w in workers:
                await w.settle()
        print(f"one sweep of 3 idle workers over 10,003 answered conversations: {len(sent)} Redis commands")
        assert kicked == [0, 0, 0] and len(sent) <= 100, sent[:20]
    finally:
        for h, http in fleet:
            await http.close()
        await slack.close()
        await redis_client.delete(*[k async for k in redis_client.scan_iter(match=f"{prefix}:*", count=5000)])


async def test_a_post_slack_may_have_made_is_never_sent_again_on_a_guess(model, prefix, redis_client) -> None:
    """A post whose answer was lost while the thread cannot be read back stays owed (not posted again); the sweep
    later finds it in Slack by its marker and posts nothing. A post Slack refused with a 5xx (and does not show)
    is retried after each read-back, and once Slack works again the sweep posts it, once."""
    h, http = await make_harness(prefix, redis_client)
    slack = h.slack
    inbox = h.pipeline.inbox
    try:
        root = "1700009200.000100"
        cid = f"slack:T1:{CHANNEL}:{root}"
        slack.drop_posts = 1
        slack.failures["conversations.replies"] = 3  # the client's two retries included
        assert await h.post(event_body(mention(root, "first"), event_id="Ev-g1")) == 200
        await h.settle()
        assert len(replies_in(slack, root)) == 1 and len(slack.calls_to("chat.postMessage")) == 1
        assert await inbox.pending_conversations() == [cid], "owed until Slack can be read"
        assert await h.bot.worker.sweep() == 1
        await h.settle()
        assert len(replies_in(slack, root)) == 1 and len(slack.calls_to("chat.postMessage")) == 1, \
            "found by its marker: not posted again"
        assert await inbox.pending_conversations() == []

        root = "1700009300.000100"
        cid = f"slack:T1:{CHANNEL}:{root}"
        slack.failures["chat.postMessage"] = 3
        assert await h.post(event_body(mention(root, "second"), event_id="Ev-g2")) == 200
        await h.settle()
        assert replies_in(slack, root) == [] and await inbox.pending_conversations() == [cid]
        assert len(slack.calls_to("chat.postMessage")) == 4, "three attempts, each after reading the thread back"
        await h.bot.worker.sweep()
        await h.settle()
        assert [m["text"] for m in replies_in(slack, root)] == ["Here is what I found."]
        assert await inbox.pending_conversations() == []
        text = await (await h.http.get("/metrics")).text()
        assert "threadkeeper_replies_recovered_total 1.0" in text
    finally:
        await h.settle()
        await http.close()
        await slack.close()


async def test_a_post_whose_answer_was_lost_is_not_posted_again_while_slacks_reads_lag(model, prefix,
                                                                                      redis_client) -> None:
    """Slack accepted a post and the answer was lost, and its reads lag its writes by a few seconds: the bot
    looks for the post until Slack's reads catch up instead of posting again, so every reply is posted once; a
    worker taking the conversation over moments later looks for it just as long."""
    h, http = await make_harness(prefix, redis_client)
    slack = h.slack
    slack.read_lag = 2.0
    try:
        roots = [f"17000095{i:02d}.000100" for i in range(3)]
        slack.drop_every = 2  # every second post is made, its answer lost
        for i, root in enumerate(roots):
            assert await h.post(event_body(mention(root, f"question {i}"), event_id=f"Ev-lag{i}")) == 200
        await h.settle()
        await asyncio.sleep(slack.read_lag + 0.5)
        assert [len(replies_in(slack, r)) for r in roots] == [1, 1, 1], "each reply posted once"
        assert slack.dropped, "an answer was lost"
        assert await h.pipeline.inbox.pending_conversations() == []
    finally:
        await http.close()
        await slack.close()
