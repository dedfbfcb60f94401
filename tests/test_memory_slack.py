"""Memory across conversations through the Slack bot: signed events against the loopback fake Slack API."""

from __future__ import annotations

import pytest
from fakes import Step, scripted
from slack_fake import BOT_USER, event_body
from test_slack_bot import make_harness

FACT = "The staging cluster is called kestrel-eu and lives in eu-west-3."
ASK = "what is the staging cluster called?"


@pytest.fixture
def model():
    m = scripted()
    m.default = Step(text="Noted.")
    return m


def mention(channel: str, ts: str, text: str, *, thread_ts: str | None = None, user: str = "U1") -> dict:
    event = {"type": "app_mention", "user": user, "text": f"<@{BOT_USER}> {text}", "ts": ts, "channel": channel,
             "event_ts": ts}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def sent(model) -> str:  # type: ignore[no-untyped-def]
    """What the last model request carried (every message's text)."""
    return "\n".join(str(m.get("content") or "") for m in model.requests[-1]["messages"])


async def test_a_fact_told_in_one_thread_reaches_a_new_thread_of_its_channel_and_no_private_leak(
        model, prefix, redis_client) -> None:
    h, http = await make_harness(prefix, redis_client, threadkeeper_memory_workspaces="T1",
                                 threadkeeper_memory_channels="*")
    try:
        h.slack.private.add("C777")
        h.slack.members["C777"] = ["U1"]
        for n, channel in enumerate(("C100", "C777")):
            ts = f"170000000{n}.000100"
            assert await h.post(event_body(mention(channel, ts, FACT), event_id=f"Ev{n}")) == 200
            await h.settle()
            assert (await h.pipeline.extract_memory(f"slack:T1:{channel}:{ts}")).records >= 1
        assert await h.post(event_body(mention("C100", "1700000100.000100", ASK), event_id="EvB")) == 200
        await h.settle()
        assert "kestrel-eu" in sent(model), "thread B of the public channel is shown thread A's fact"
        assert sent(model).count("kestrel-eu") == 1, "only the public channel's record, not the private one's"
        assert await h.post(event_body(mention("C200", "1700000101.000100", ASK), event_id="EvC")) == 200
        await h.settle()
        assert "kestrel" not in sent(model), "another channel sees neither"
        assert await h.post(event_body(mention("C777", "1700000102.000100", ASK, user="U9"), event_id="EvD")) == 200
        await h.settle()
        assert "kestrel" not in sent(model), "a non-member asking in the private channel is shown nothing"
        assert await h.post(event_body(mention("C777", "1700000103.000100", ASK), event_id="EvE")) == 200
        await h.settle()
        assert "kestrel" in sent(model), "a current member is"
        deleted = {"type": "message", "subtype": "message_deleted", "channel": "C100", "ts": "1700000200.000100",
                   "deleted_ts": "1700000000.000100", "previous_message": {"ts": "1700000000.000100"},
                   "event_ts": "1700000200.000100"}
        assert await h.post(event_body(deleted, event_id="EvDel")) == 200
        await h.settle()
        assert await h.post(event_body(mention("C100", "1700000300.000100", ASK), event_id="EvF")) == 200
        await h.settle()
        assert "kestrel" not in sent(model), "the deleted source's records are retracted before the next turn"
    finally:
        await h.settle()
        await http.close()
        await h.slack.close()
