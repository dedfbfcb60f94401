"""Hostile and malformed Slack events: every one is answered without a server error, and none corrupts what
is stored (the conversation that existed before still loads, whole). The envelope's own fields are Bolt's to
parse; the team id is a string here, as Slack always sends it, and the event inside is anything at all.
Uninstalls are left out: they delete data on purpose (tested on their own). So are assistant events: Bolt's
own assistant middleware answers 500 to one without its ``assistant_thread`` before any listener runs (Slack
always sends it). The examples are the same on every run (``derandomize``)."""

from __future__ import annotations

import asyncio
import json

import fakeredis
from fakes import Step, scripted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_fake import BOT_USER, event_body, sign
from test_slack_bot import CHANNEL, make_harness, mention

junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=40),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
ts = st.one_of(st.sampled_from(["1700009000.000100", "1700009001.000200", "0", "-1", "1e309", "nan", ""]),
               st.text(max_size=20), junk)
text = st.one_of(st.text(max_size=200), st.just(f"<@{BOT_USER}> " + "x" * 5000), st.just("<@"), junk)
inner = st.fixed_dictionaries({}, optional={"ts": ts, "text": text, "user": st.one_of(st.just("U2"), junk),
                                            "thread_ts": ts, "bot_id": junk})
event = st.fixed_dictionaries(
    {"type": st.sampled_from(["app_mention", "message", "pin_added", "pin_removed", "reaction_added"])},
    optional={"subtype": st.one_of(st.sampled_from(["message_changed", "message_deleted", "bot_message",
                                                    "file_share", "thread_broadcast", "channel_join"]), junk),
              "ts": ts, "thread_ts": ts, "channel": st.one_of(st.just(CHANNEL), junk),
              "user": st.one_of(st.just("U1"), st.just(BOT_USER), junk), "text": text, "bot_id": junk,
              "channel_type": st.one_of(st.just("im"), junk), "message": st.one_of(inner, junk),
              "previous_message": st.one_of(inner, junk), "deleted_ts": ts, "item": st.one_of(
                  st.fixed_dictionaries({}, optional={"message": inner, "channel": junk}), junk),
              "files": st.one_of(st.lists(st.dictionaries(st.sampled_from(["name", "title", "filetype",
                                                                             "preview"]), junk), max_size=2), junk),
              "tokens": junk})


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, min_size=1, max_size=4), st.one_of(st.just("T1"), st.text(max_size=12)))
def test_malformed_events_get_no_server_error_and_corrupt_nothing(events: list[dict], team) -> None:
    asyncio.run(_scenario(events, team))


async def _scenario(events: list[dict], team) -> None:
    model = scripted()
    model.default = Step(text="fine")
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    h, http = await make_harness("tkfuzz", client)
    root = "1700008999.000100"
    cid = f"slack:T1:{CHANNEL}:{root}"
    try:
        assert await h.post(event_body(mention(root, "remember pg-stage-7"), event_id="Ev-root")) == 200
        await h.settle()
        before = [m.text for m in (await h.pipeline.checkpoints.load_history(cid)).messages]
        for i, e in enumerate(events):
            body = event_body(e, event_id=f"Ev-{i}")
            body["team_id"] = team
            raw = json.dumps(body)
            response = await h.http.post("/slack/events", data=raw, headers=sign("test-signing-secret", raw))
            assert response.status < 500, (e, response.status, await response.text())
        await h.settle()
        after = [m.text for m in (await h.pipeline.checkpoints.load_history(cid)).messages]
        assert after[:len(before)] == before, "what was stored before is still there, unchanged"
    finally:
        await h.bot.worker.shutdown(0)
        await http.close()
        await h.slack.close()
        await client.aclose()
