"""Replies shown in Slack while the model writes them: litellm's real OpenAI route against a loopback model
that writes slowly, slack-sdk's ``chat_stream`` against the loopback Slack fake, post-and-update where Slack
cannot stream, a preamble before tool calls taken back, a reply a dead worker left half-written deleted, and
the feedback buttons under a finished reply counted."""

from __future__ import annotations

import asyncio
import json
import re
import time
from urllib.parse import urlencode

import pytest
from model_server import Reply
from slack_fake import BOT_USER, event_body, sign
from test_slack_bot import CHANNEL, SECRET, make_harness, mention

from threadkeeper.bot.streaming import DRAFT, STREAM_BUFFER, DraftMark

LONG = " ".join(f"step{i} of the rollout plan" for i in range(24))
"""A reply long enough to be shown before it is finished (several times ``STREAM_BUFFER``)."""


@pytest.fixture
async def h(server, prefix, redis_client):
    harness, http = await make_harness(prefix, redis_client, ai_model="openai/gpt-4o", ai_timeout_seconds=30.0)
    yield harness
    await harness.settle()
    await http.close()
    await harness.slack.close()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


async def test_a_reply_is_streamed_into_the_thread_while_the_model_writes_it(h, server) -> None:
    assert len(LONG) > 4 * STREAM_BUFFER
    root = "1700020000.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    # the model writes for about 2.5 s: long enough that a loaded machine still shows it while it is written
    server.push(Reply(text=LONG, chunk_delay=0.02, prompt_tokens=1_200, completion_tokens=150))
    assert await h.post(event_body(mention(root, "write out the rollout plan"), event_id="Ev-s1")) == 200
    await h.settle()
    started = h.slack.first_call_at("chat.startStream")
    assert started is not None and started < server.sent[-1][0], "shown before the model wrote its last word"
    [start] = h.slack.calls_to("chat.startStream")
    assert (start["thread_ts"], start["recipient_user_id"], start["recipient_team_id"]) == (root, "U1", "T1")
    # more of it shown while the model still writes (how many pieces depends on the machine's pace)
    appended = h.slack.first_call_at("chat.appendStream")
    assert appended is not None and appended < server.sent[-1][0] and not h.slack.calls_to("chat.postMessage")
    [message] = h.slack.bot_messages(CHANNEL, root)
    history = await h.pipeline.checkpoints.load_history(cid)
    assert message["text"] == history.messages[-1].text == LONG and message["streaming"] is False
    buttons = message["blocks"][-1]["elements"][0]
    assert buttons["type"] == "feedback_buttons"
    assert buttons["positive_button"]["value"] == f"good {history.checkpoint.id}"
    assert not await h.stores.notes.flag(cid, DRAFT), "a finished reply leaves no draft behind"
    metrics = await (await h.http.get("/metrics")).text()
    assert metric(metrics, 'threadkeeper_replies_total{via="stream"}') == 1
    assert metric(metrics, "threadkeeper_model_cost_usd_total") > 0, "gpt-4o's calls are priced"
    assert metric(metrics, 'threadkeeper_model_tokens_total{direction="input"}') == 1_200


async def test_where_slack_cannot_stream_the_reply_is_posted_then_updated(h, server) -> None:
    h.slack.refuse_streaming = True
    root = "1700020100.000100"
    server.push(Reply(text=LONG, chunk_delay=0.015))
    await h.post(event_body(mention(root, "the plan please"), event_id="Ev-s2"))
    await h.settle()
    [posted] = h.slack.calls_to("chat.postMessage")
    assert LONG.startswith(posted["text"]) and len(posted["text"]) < len(LONG), "posted before it was finished"
    updates = h.slack.calls_to("chat.update")
    assert len(updates) >= 2 and updates[-1]["text"] == LONG and updates[-1]["blocks"], \
        "updated as it grew, and finished with the feedback buttons"
    [message] = h.slack.bot_messages(CHANNEL, root)
    assert message["text"] == LONG


async def test_text_written_before_tool_calls_is_taken_back(h, server) -> None:
    root = "1700020200.000100"
    preamble = "Let me look through the whole thread for the rollout discussion before I answer. " * 3
    server.push(Reply(text=preamble, tool_calls=[("thread_search", '{"query": "rollout"}')],
                      finish_reason="tool_calls"),
                Reply(text=LONG))
    await h.post(event_body(mention(root, "what was decided about the rollout?"), event_id="Ev-s3"))
    await h.settle()
    assert len(server.requests) == 2 and len(h.slack.calls_to("chat.startStream")) == 2
    statuses = [c for c in h.slack.calls_to("chat.postMessage") if c["text"].startswith("_")]
    assert len(statuses) == 1 and len(h.slack.deleted) == 2, "the preamble's message is deleted (and the status)"
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == [LONG]


async def test_a_reply_a_dead_worker_left_half_written_is_deleted(h, server) -> None:
    root = "1700020300.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    server.push(Reply(text="Short answer."))
    await h.post(event_body(mention(root, "quick one"), event_id="Ev-s4"))
    await h.settle()
    client = await h.bot.workspaces.client("T1")
    stranded = await client.chat_postMessage(channel=CHANNEL, thread_ts=root, text="Half of a repl")
    await h.stores.notes.set_flag(cid, DRAFT, f"{CHANNEL} {stranded['ts']}")  # as a worker killed mid-reply
    await h.pipeline.inbox.mark_pending(cid)  # which leaves its conversation owed
    await h.bot.worker.sweep()
    await h.settle()
    assert h.slack.deleted == [stranded["ts"]] and not await h.stores.notes.flag(cid, DRAFT)
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == ["Short answer."]
    await h.bot.worker.sweep()
    await h.settle()
    assert h.slack.deleted == [stranded["ts"]], "deleted once"


async def test_feedback_buttons_are_counted(h, server) -> None:
    for n, value in enumerate(["good ck-1", "bad ck-1", "good ck-2", "nonsense"]):
        payload = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "U1"}, "api_app_id": "A1",
                   "token": "unused", "trigger_id": f"1.2.{n}", "channel": {"id": CHANNEL},
                   "container": {"type": "message", "message_ts": "1700020400.000200", "channel_id": CHANNEL},
                   "actions": [{"type": "feedback_buttons", "action_id": "reply_feedback", "block_id": "fb",
                                "value": value, "action_ts": "1700020401.000000"}]}
        raw = urlencode({"payload": json.dumps(payload)})
        response = await h.http.post("/slack/events", data=raw, headers={
            **sign(SECRET, raw, None), "Content-Type": "application/x-www-form-urlencoded"})
        assert response.status == 200
    metrics = await (await h.http.get("/metrics")).text()
    assert metric(metrics, 'threadkeeper_feedback_total{value="good"}') == 2
    assert metric(metrics, 'threadkeeper_feedback_total{value="bad"}') == 1
    assert metric(metrics, 'threadkeeper_slack_events_total{kind="feedback",outcome="malformed"}') == 1


async def test_a_status_message_shows_a_search_and_is_gone_when_the_reply_is(h, server) -> None:
    root = "1700020500.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    server.push(Reply(text="", tool_calls=[("thread_search", '{"query": "rollback"}')], finish_reason="tool_calls"),
                Reply(text="No rollback was planned."))
    await h.post(event_body(mention(root, "was a rollback planned?"), event_id="Ev-s6"))
    await h.settle()
    [status] = [c for c in h.slack.calls_to("chat.postMessage") if c["text"].startswith("_")]
    assert status["text"] == "_searching the thread…_" and status["thread_ts"] == root
    assert [c["text"] for c in h.slack.calls_to("chat.update")] == ["_thinking…_"]
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == ["No rollback was planned."], \
        "the status message is deleted once the reply is there"
    assert not await h.stores.notes.flag(cid, "status_ts")
    left = await (await h.bot.workspaces.client("T1")).chat_postMessage(channel=CHANNEL, thread_ts=root,
                                                                         text="_searching the thread…_")
    await h.stores.notes.set_flag(cid, "status_ts", left["ts"])  # a worker died while searching
    await h.pipeline.inbox.mark_pending(cid)  # which leaves its conversation owed
    await h.bot.worker.sweep()
    await h.settle()
    assert left["ts"] in h.slack.deleted and not await h.stores.notes.flag(cid, "status_ts")


async def test_a_reply_longer_than_one_message_is_streamed_then_continued(h, server) -> None:
    from threadkeeper.bot.format import split_reply

    root = "1700020600.000100"
    text = " ".join(f"point{i} of the migration runbook, checked" for i in range(160))  # about 7,000 characters
    parts = split_reply(text)
    assert len(parts) == 2
    server.push(Reply(text=text))
    await h.post(event_body(mention(root, "the whole runbook please"), event_id="Ev-s7"))
    await h.settle()
    assert len(h.slack.calls_to("chat.startStream")) == 1 and not h.slack.deleted, "streamed, never taken back"
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == parts
    assert h.slack.bot_messages(CHANNEL, root)[-1]["blocks"], "the buttons go under the last part"


async def test_a_draft_whose_first_post_lost_its_answer_is_found_and_taken_back(h, server) -> None:
    """Where Slack cannot stream, the reply's draft is posted and then updated. When Slack accepts that first
    post but the answer never arrives, the post is not sent again: the draft is found in the thread, deleted at
    the end, and the reply posted whole, once."""
    h.slack.refuse_streaming = True
    h.slack.drop_posts = 1
    root = "1700020700.000100"
    server.push(Reply(text=LONG, chunk_delay=0.01))
    assert await h.post(event_body(mention(root, "the rollout plan please"), event_id="Ev-s8")) == 200
    await h.settle()
    assert h.slack.dropped and h.slack.deleted == h.slack.dropped, "the draft Slack made is taken back"
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == [LONG]
    assert len(h.slack.calls_to("chat.postMessage")) == 2, "the draft once, the reply once"


async def _start_lost(h, server, root: str, event_id: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A mention answered with a streamed reply whose chat.startStream answer never arrives: the conversation, and
    the ts of the stream Slack began."""
    h.slack.drop_starts = 1
    server.push(Reply(text=LONG, chunk_delay=0.01))
    assert await h.post(event_body(mention(root, "the rollout plan please"), event_id=event_id)) == 200
    await h.settle()
    [begun] = h.slack.dropped
    return f"slack:T1:{CHANNEL}:{root}", begun


@pytest.mark.parametrize("read_lag", [0.0, 2.0], ids=["reads-current", "reads-lag"])
async def test_a_stream_whose_start_lost_its_answer_is_found_and_replaced(h, server, read_lag) -> None:
    """Slack begins the reply's stream but the answer to chat.startStream never arrives, so its ts is unknown.
    The stream is not started again: the bot finds the message it began in the thread (waiting for Slack's reads
    to show it), stops and deletes it, and posts the reply whole, once."""
    h.slack.read_lag = read_lag
    root = "1700020800.000100"
    cid, begun = await _start_lost(h, server, root, "Ev-s9")
    assert h.slack.deleted == [begun], "the stream Slack began is taken back"
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == [LONG]
    assert len(h.slack.calls_to("chat.startStream")) == 1 and len(h.slack.calls_to("chat.postMessage")) == 1
    assert not await h.stores.notes.flag(cid, DRAFT)


async def test_a_stream_whose_start_lost_its_answer_keeps_the_reply_owed_while_the_thread_cannot_be_read(
        h, server) -> None:
    """The stream Slack began cannot be looked for while conversations.replies fails: nothing is posted (the
    reply stays owed, the draft flag stays), and once Slack can be read the sweep deletes the stream and posts
    the reply, once."""
    h.slack.failures["conversations.replies"] = 6  # two lookups, each with the client's two retries
    root = "1700020900.000100"
    cid, begun = await _start_lost(h, server, root, "Ev-s10")
    assert [m["ts"] for m in h.slack.bot_messages(CHANNEL, root)] == [begun] and not h.slack.deleted
    assert not h.slack.calls_to("chat.postMessage"), "nothing posted beside a stream that may still show"
    assert await h.stores.notes.flag(cid, DRAFT) and await h.pipeline.inbox.pending_conversations() == [cid]
    assert await h.bot.worker.sweep() == 1
    await h.settle()
    assert h.slack.deleted == [begun]
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == [LONG]
    assert len(h.slack.calls_to("chat.postMessage")) == 1 and not await h.stores.notes.flag(cid, DRAFT)
    assert await h.pipeline.inbox.pending_conversations() == []


@pytest.mark.parametrize("lost", ["chat.stopStream", "chat.delete"])
async def test_a_half_written_reply_whose_deletion_lost_its_answer_keeps_the_reply_owed_then_posts_it_once(
        h, server, lost) -> None:
    """A worker died writing a streamed reply; the next message's turn first stops and deletes that stream, and
    Slack's answer to the stop (or to the deletion) is lost, on every attempt. Nothing escapes the worker: a stop
    whose answer was lost is followed by the deletion all the same; while a deletion is unconfirmed nothing is
    posted (the draft flag stays, the conversation stays owed), and the sweep deletes what is left and answers,
    once."""
    root = "1700021200.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    client = await h.bot.workspaces.client("T1")
    begun = await client.chat_startStream(channel=CHANNEL, thread_ts=root, recipient_team_id="T1",
                                          recipient_user_id="U1", markdown_text="Half of a repl")
    await h.stores.notes.set_flag(cid, DRAFT, DraftMark(CHANNEL, begun["ts"], time.time(), True).value())
    h.slack.drops[lost] = 2  # the call and the client's retry after the dropped connection
    server.push(Reply(text="Short answer."))
    assert await h.post(event_body(mention(root, "quick one"), event_id="Ev-s12")) == 200
    await h.settle()
    assert h.slack.drops[lost] == 0 and h.slack.deleted == [begun["ts"]]
    if lost == "chat.delete":
        assert not h.slack.calls_to("chat.postMessage"), "nothing posted while the deletion is unconfirmed"
        assert await h.stores.notes.flag(cid, DRAFT) and await h.pipeline.inbox.pending_conversations() == [cid]
        assert await h.bot.worker.sweep() == 1
        await h.settle()
    assert [m["text"] for m in h.slack.bot_messages(CHANNEL, root)] == ["Short answer."]
    assert len(h.slack.calls_to("chat.postMessage")) == 1 and not await h.stores.notes.flag(cid, DRAFT)
    assert await h.pipeline.inbox.pending_conversations() == []
    text = await (await h.http.get("/metrics")).text()
    assert metric(text, 'threadkeeper_errors_total{where="worker"}') == 0, "nothing escaped the worker"


async def test_the_lease_is_held_while_a_stream_a_dead_worker_began_is_looked_for(prefix, redis_client) -> None:
    """A worker asked Slack for a stream and died before the answer; Slack's reads show the stream only 7 s later.
    The worker that takes the conversation over looks for it that long, holding the lease all the while (a 5 s
    lease, renewed), so no other worker takes the thread over meanwhile; then it deletes the stream."""
    h, http = await make_harness(prefix, redis_client, threadkeeper_lease_seconds=5.0)
    try:
        root = "1700021000.000100"
        cid = f"slack:T1:{CHANNEL}:{root}"
        h.slack.read_lag = 7.0
        asked = time.time()
        begun = await (await h.bot.workspaces.client("T1")).chat_startStream(
            channel=CHANNEL, thread_ts=root, recipient_team_id="T1", recipient_user_id="U1", markdown_text="Half")
        await h.stores.notes.set_flag(cid, DRAFT, DraftMark(CHANNEL, None, asked, True).value())
        await h.pipeline.inbox.mark_pending(cid)  # the dead worker's conversation is owed
        assert await h.bot.worker.sweep() == 1
        deadline = time.monotonic() + 30
        while await h.stores.leases.holder(cid) is None:
            assert time.monotonic() < deadline, "the sweep took the conversation over"
            await asyncio.sleep(0.05)
        holders = set()
        while not h.slack.deleted:
            assert time.monotonic() < deadline, "the stream was never deleted"
            holders.add(await h.stores.leases.holder(cid))
            await asyncio.sleep(0.2)
        assert time.time() - asked >= h.slack.read_lag, "found once Slack's reads showed it"
        assert h.slack.deleted == [begun["ts"]] and None not in holders and len(holders) == 1, holders
        await h.settle()
        assert not h.slack.bot_messages(CHANNEL, root) and not await h.stores.notes.flag(cid, DRAFT)
    finally:
        await h.settle()
        await http.close()
        await h.slack.close()


async def test_a_worker_whose_lease_another_took_begins_no_stream_and_leaves_the_draft_flag_alone(
        h, server, redis_client, prefix) -> None:
    """The draft flag is fenced by the conversation's lease like the turn's checkpoints: a worker whose lease
    another worker took while its model was still thinking cannot record a draft, so it asks Slack for no stream,
    and the new holder's record of the reply it is writing stands; its turn is not committed and nothing is
    posted."""
    root = "1700021100.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    server.push(Reply(text=LONG, delay=1.5, chunk_delay=0.01))
    assert await h.post(event_body(mention(root, "the rollout plan please"), event_id="Ev-s11")) == 200
    deadline = time.monotonic() + 20
    while not server.requests:
        assert time.monotonic() < deadline, "the turn reached the model"
        await asyncio.sleep(0.02)
    theirs = DraftMark(CHANNEL, None, time.time(), True).value()
    await redis_client.set(f"{prefix}:{{{cid}}}:lease", "another-workers-token", px=60_000)  # taken over
    await redis_client.hset(f"{prefix}:{{{cid}}}:notes", f"flag:{DRAFT}", json.dumps(theirs))
    await h.settle()
    assert not h.slack.calls_to("chat.startStream") and not h.slack.calls_to("chat.postMessage")
    assert await redis_client.hget(f"{prefix}:{{{cid}}}:notes", f"flag:{DRAFT}") == json.dumps(theirs).encode()
    rows = await h.pipeline.checkpoints.lineage(cid)
    assert all(r.status.value != "completed" for r in rows), "its turn was not committed"


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "post-then-update"])
async def test_a_worker_whose_lease_is_taken_while_slack_makes_its_draft_deletes_that_message_itself(
        h, server, redis_client, prefix, streamed: bool) -> None:
    """The lease is lost while Slack makes the draft's message (its answer slow, as from a loaded worker): the new
    holder looked for the message before it existed and found none, so only this worker learns its ts, and its
    record of it is refused. It deletes the message itself (a stream stopped first): nothing is left half-written
    or streaming, and the new holder's draft flag stands."""
    root = "1700021150.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    h.slack.refuse_streaming = not streamed
    method = "chat.startStream" if streamed else "chat.postMessage"
    h.slack.holds[method] = answered = asyncio.Event()
    server.push(Reply(text=LONG, chunk_delay=0.01))
    assert await h.post(event_body(mention(root, "the rollout plan please"), event_id="Ev-s12")) == 200
    deadline = time.monotonic() + 20
    while not h.slack.bot_messages(CHANNEL, root):
        assert time.monotonic() < deadline, "Slack made the draft's message"
        await asyncio.sleep(0.02)
    [made] = h.slack.bot_messages(CHANNEL, root)
    assert made["streaming"] is streamed
    await redis_client.set(f"{prefix}:{{{cid}}}:lease", "another-workers-token", px=60_000)  # taken over
    await redis_client.hset(f"{prefix}:{{{cid}}}:notes", f"flag:{DRAFT}", json.dumps(""))  # it found nothing
    answered.set()
    await h.settle()
    assert h.slack.bot_messages(CHANNEL, root) == [], "the message it made is deleted"
    assert h.slack.deleted == [made["ts"]]
    if streamed:
        assert [c["ts"] for c in h.slack.calls_to("chat.stopStream")] == [made["ts"]], "stopped before deletion"
    assert await redis_client.hget(f"{prefix}:{{{cid}}}:notes", f"flag:{DRAFT}") == json.dumps("").encode()
    rows = await h.pipeline.checkpoints.lineage(cid)
    assert all(r.status.value != "completed" for r in rows), "its turn was not committed"


@pytest.mark.parametrize("place", ["assistant-thread", "thread-under-the-bots-answer", "dm-top-level"])
async def test_only_a_message_where_the_reply_goes_is_taken_for_a_half_written_one(prefix, redis_client,
                                                                                  place) -> None:
    """On the assistant surface a direct message holds the bot's own messages of several kinds. A worker asked for
    a reply's message (a stream in a thread of the DM, a post at its top level) and died before Slack answered;
    moments before, the bot's message the thread hangs from was made (an assistant thread's opening message,
    subtype ``assistant_app_thread``, or the bot's own answer someone replied to), and the bot answered in
    another thread of the DM, broadcast to its top level. The worker that takes the conversation over deletes
    the half-written message and nothing else."""
    h, http = await make_harness(prefix, redis_client, threadkeeper_slack_surface="assistant")
    slack, dm = h.slack, "D7"
    try:
        client = await h.bot.workspaces.client("T1")
        asked = time.time()
        root = f"{asked:.6f}"  # made moments after the reply was asked for
        parent = {"type": "message", "user": BOT_USER, "bot_id": "BBOT", "text": "How can I help?", "ts": root,
                  "thread_ts": root}
        if place != "thread-under-the-bots-answer":
            parent["subtype"] = "assistant_app_thread"
        other = "1700000950.000100"
        elsewhere = await client.chat_postMessage(channel=dm, thread_ts=other, text="another thread")
        if place != "dm-top-level":
            cid = f"slack:T1:{dm}:{root}"
            slack.threads[(dm, root)] = [parent]
            begun = await client.chat_startStream(channel=dm, thread_ts=root, markdown_text="Half")
        else:
            cid = f"slack:T1:{dm}:dm"
            begun = await client.chat_postMessage(channel=dm, text="Half")
            broadcast = {**parent, "subtype": "thread_broadcast", "ts": elsewhere["ts"], "thread_ts": other}
            slack.channels[dm] += [parent, broadcast]  # listed newest first: before the half-written message
        await h.stores.notes.set_flag(cid, DRAFT, DraftMark(dm, None, asked, place != "dm-top-level").value())
        await h.pipeline.inbox.mark_pending(cid)
        assert await h.bot.worker.sweep() == 1
        await h.settle()
        assert slack.deleted == [begun["ts"]], "the half-written message, and no other"
        assert not await h.stores.notes.flag(cid, DRAFT)
        assert slack.find(dm, root) is not None and slack.find(dm, elsewhere["ts"]) is not None
    finally:
        await h.settle()
        await http.close()
        await slack.close()


@pytest.mark.parametrize("refuse", [False, True], ids=["streamed", "posted-then-updated"])
async def test_a_reply_ending_in_whitespace_is_finished_in_place(h, server, refuse) -> None:
    h.slack.refuse_streaming = refuse
    root = "1700020600.000100"
    server.push(Reply(text=LONG + " \n\n  ", chunk_delay=0.01))
    assert await h.post(event_body(mention(root, "the plan, please"), event_id="Ev-ws")) == 200
    await h.settle()
    assert not h.slack.deleted, "what was shown is not taken back"
    [message] = h.slack.bot_messages(CHANNEL, root)
    assert message["text"].rstrip() == LONG
    assert len(h.slack.calls_to("chat.postMessage")) == (1 if refuse else 0), "and not posted a second time"


async def test_a_worker_whose_lease_another_takes_mid_stream_stops_reading_the_model_at_once(
        h, server, redis_client, prefix) -> None:
    """The lease is taken by another worker while the model streams a long reply: the worker notices at its next
    renewal (a third of the lease) and abandons the model call, hanging up on the stream, instead of reading it to
    its end for a reply nobody will keep; its turn is not committed and the new holder's lease stands."""
    root = "1700021160.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    lease = 1.5
    h.pipeline.executor.config.lease_seconds = lease
    words = [f"word{i}" for i in range(600)]
    server.push(Reply(text=" ".join(words), chunk_delay=0.02))  # about 12 s of writing
    assert await h.post(event_body(mention(root, "the whole rollout plan please"), event_id="Ev-s13")) == 200
    deadline = time.monotonic() + 20
    while not h.slack.calls_to("chat.startStream"):
        assert time.monotonic() < deadline, "the reply began streaming"
        await asyncio.sleep(0.02)
    await redis_client.set(f"{prefix}:{{{cid}}}:lease", "another-workers-token", px=60_000)  # taken over
    taken = time.monotonic()
    while not server.hung_up:
        assert time.monotonic() < taken + 10, f"still read after 10 s: {len(server.sent)} of {len(words)} words"
        await asyncio.sleep(0.02)
    waited = server.hung_up[0] - taken
    print(f"the stream was hung up on {waited:.2f} s after the lease was taken (renewed every {lease / 3:.2f} s)")
    assert waited <= lease / 3 + 2.0, waited
    assert len(server.sent) < len(words), "not read to its end"
    await h.settle()
    rows = await h.pipeline.checkpoints.lineage(cid)
    assert all(r.status.value != "completed" for r in rows), "its turn was not committed"
    assert await redis_client.get(f"{prefix}:{{{cid}}}:lease") == b"another-workers-token"
