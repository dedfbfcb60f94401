"""Memory across conversations through the Slack bot: signed events against the loopback fake Slack API."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest
from fakes import Step, scripted
from slack_fake import BOT_USER, event_body, sign
from test_slack_bot import SECRET, make_harness

from threadkeeper.bot.home import FORGET_ACTION, SWITCH_ACTION

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


async def test_a_reply_that_cites_memory_links_to_where_it_was_said(model, prefix, redis_client) -> None:
    """The reply's sources line names each cited record's channel and links its day to the message, with the link
    Slack gives (``chat.getPermalink``); a source Slack cannot link to is named without a link."""
    h, http = await make_harness(prefix, redis_client, threadkeeper_memory_workspaces="T1",
                                 threadkeeper_memory_channels="*")
    try:
        told = "1700000000.000100"
        h.slack.threads[("C100", told)] = [{"type": "message", "user": "U1", "ts": told, "text": FACT}]
        assert await h.post(event_body(mention("C100", told, FACT), event_id="Ev0")) == 200
        await h.settle()
        assert (await h.pipeline.extract_memory(f"slack:T1:C100:{told}")).records >= 1
        model.default = Step(text="It is kestrel-eu (M1).")
        assert await h.post(event_body(mention("C100", "1700000100.000100", ASK), event_id="EvB")) == 200
        await h.settle()
        [reply] = h.replies("C100")[-1:]
        lines = [e["text"] for b in reply["blocks"] if b["type"] == "context" for e in b["elements"]]
        assert "From memory: M1 <#C100>, <https://fake.slack.test/archives/C100/p1700000000000100|14 Nov 2023" \
            in " ".join(lines), lines
        assert h.slack.calls_to("chat.getPermalink") == [{"channel": "C100", "message_ts": told}]
        h.slack.threads[("C100", told)] = []  # deleted in Slack meanwhile, and Slack says so
        h.bot.events.permalinks.clear()
        model.default = Step(text="Still kestrel-eu (M1).")
        assert await h.post(event_body(mention("C100", "1700000200.000100", ASK), event_id="EvC")) == 200
        await h.settle()
        lines = [e["text"] for b in h.replies("C100")[-1]["blocks"] if b["type"] == "context"
                 for e in b["elements"]]
        assert "From memory: M1 <#C100>, 14 Nov 2023" in " ".join(lines) and "fake.slack.test" not in " ".join(lines)
    finally:
        await h.settle()
        await http.close()
        await h.slack.close()


async def test_a_reply_a_dead_worker_committed_is_delivered_with_the_same_blocks(model, prefix, redis_client) -> None:
    """A turn whose reply cites memory commits and its worker dies before posting it: the worker that delivers it
    posts what the turn's own worker would have, the sources line and the feedback buttons under the reply."""
    h, http = await make_harness(prefix, redis_client, threadkeeper_memory_workspaces="T1",
                                 threadkeeper_memory_channels="*")
    try:
        told = "1700000000.000100"
        h.slack.threads[("C100", told)] = [{"type": "message", "user": "U1", "ts": told, "text": FACT}]
        assert await h.post(event_body(mention("C100", told, FACT), event_id="Ev0")) == 200
        await h.settle()
        assert (await h.pipeline.extract_memory(f"slack:T1:C100:{told}")).records >= 1
        model.default = Step(text="It is kestrel-eu (M1).")

        async def killed(*args, **kwargs) -> None:  # type: ignore[no-untyped-def]  # dies right after the commit
            raise ConnectionResetError("killed")

        h.bot.events.reply = killed  # type: ignore[method-assign]
        assert await h.post(event_body(mention("C100", "1700000100.000100", ASK), event_id="EvB")) == 200
        await h.settle()
        del h.bot.events.reply
        assert not [r for r in h.replies("C100") if "kestrel-eu" in str(r["text"])]
        assert await h.bot.worker.sweep() == 1
        await h.settle()
        [reply] = [r for r in h.replies("C100") if "kestrel-eu" in str(r["text"])]
        kinds = [b["type"] for b in reply["blocks"]]
        lines = [e["text"] for b in reply["blocks"] if b["type"] == "context" for e in b["elements"]]
        assert "From memory: M1 <#C100>, <https://fake.slack.test/archives/C100/p1700000000000100|14 Nov 2023" \
            in " ".join(lines), lines
        assert kinds == ["markdown", "context", "context_actions"], kinds
    finally:
        await h.settle()
        await http.close()
        await h.slack.close()


# -- memory controls in the Home tab --------------------------------------------------------------------------------

PUBLIC = "The staging cluster is called kestrel-eu and lives in eu-west-3."
PRIVATE = "The billing cluster is called osprey-us and lives in us-east-2."
DIRECT = "The backup cluster is called heron-ap and lives in ap-south-1."


async def remembered(h, *, surface_dm: str = "D5") -> None:  # type: ignore[no-untyped-def]
    """A fact in a public channel (C100), a private one (C777, U1 a member) and U1's DM with the bot, extracted."""
    h.slack.private.add("C777")
    h.slack.members.update({"C100": ["U1", "U9", "UA"], "C777": ["U1"], surface_dm: ["U1", BOT_USER]})
    for n, (channel, fact) in enumerate((("C100", PUBLIC), ("C777", PRIVATE))):
        assert await h.post(event_body(mention(channel, f"170000000{n}.000100", fact), event_id=f"Ev{n}")) == 200
    dm = {"type": "message", "channel": surface_dm, "channel_type": "im", "user": "U1", "text": DIRECT,
          "ts": "1700000002.000100", "event_ts": "1700000002.000100"}
    assert await h.post(event_body(dm, event_id="Ev2")) == 200
    await h.settle()
    for cid in await h.pipeline.conversations_of_workspace("T1"):
        await h.pipeline.extract_memory(cid)
    channels = {r.channel for r in await h.pipeline.memory_records("T1")}
    assert channels == {"C100", "C777", surface_dm}, channels


async def open_home(h, user: str) -> dict:  # type: ignore[no-untyped-def]
    opened = {"type": "app_home_opened", "user": user, "channel": "D5", "tab": "home", "event_ts": "1700000500.1"}
    assert await h.post(event_body(opened, event_id=f"EvHome{user}{len(h.slack.calls)}")) == 200
    await h.settle()
    return h.slack.homes.pop(user)


def buttons(view: dict, action: str) -> list[str]:
    """The values of a view's buttons of one action."""
    return [b["accessory"]["value"] for b in view["blocks"]
            if (b.get("accessory") or {}).get("action_id") == action]


def shown_text(view: dict) -> str:
    return json.dumps(view)


async def press(h, user: str, action: str, value: str) -> None:  # type: ignore[no-untyped-def]
    payload = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": user}, "api_app_id": "A1",
               "token": "unused", "trigger_id": "1.2.3", "container": {"type": "view", "view_id": "V1"},
               "view": {"id": "V1", "type": "home"},
               "actions": [{"type": "button", "action_id": action, "block_id": "b", "value": value,
                            "action_ts": "1700000600.000000"}]}
    raw = urlencode({"payload": json.dumps(payload)})
    response = await h.http.post("/slack/events", data=raw, headers={
        **sign(SECRET, raw, None), "Content-Type": "application/x-www-form-urlencoded"})
    assert response.status == 200
    await h.settle()


@pytest.fixture(params=["agent", "assistant"])
async def mh(request, model, prefix, redis_client):  # type: ignore[no-untyped-def]
    """A bot with memory on in every channel of T1, on either surface."""
    h, http = await make_harness(prefix, redis_client, threadkeeper_memory_workspaces="T1",
                                 threadkeeper_memory_channels="*", threadkeeper_slack_surface=request.param)
    yield h
    await h.settle()
    await http.close()
    await h.slack.close()


async def test_home_lists_what_a_person_may_see_and_nothing_of_a_private_channel_they_are_not_in(mh) -> None:
    await remembered(mh)
    records: dict[str, set[str]] = {}
    for r in await mh.pipeline.memory_records("T1"):
        records.setdefault(r.channel, set()).add(r.id)
    member = await open_home(mh, "U1")
    assert all(name in shown_text(member) for name in ("kestrel-eu", "osprey-us", "heron-ap")), \
        "a member sees all three"
    assert "<#C100>" in shown_text(member) and "<#C777>" in shown_text(member)
    assert set(buttons(member, FORGET_ACTION)) == {r.id for r in await mh.pipeline.memory_records("T1")}
    outsider = await open_home(mh, "U9")
    assert "kestrel-eu" in shown_text(outsider) and set(buttons(outsider, FORGET_ACTION)) == records["C100"]
    for hidden in ("osprey", "C777", *records["C777"], "heron", "D5", *records["D5"]):
        assert hidden not in shown_text(outsider), f"a non-member is shown nothing of {hidden}"
    assert not buttons(member, SWITCH_ACTION) and not buttons(outsider, SWITCH_ACTION), "no switch for non-admins"
    mh.slack.members["C777"].append("U7")
    mh.slack.errors["conversations.members"] = "internal_error"
    unsure = await open_home(mh, "U7")
    assert buttons(unsure, FORGET_ACTION) == [] and "osprey" not in shown_text(unsure), \
        "when Slack cannot say who is a member, nothing is shown"


async def test_forget_removes_a_record_and_a_forged_press_on_one_the_presser_may_not_see_changes_nothing(
        model, prefix, redis_client) -> None:
    h, http = await make_harness(prefix, redis_client, threadkeeper_memory_workspaces="T1",
                                 threadkeeper_memory_channels="*")
    try:
        await remembered(h)
        before = await h.pipeline.memory_records("T1")
        ids = {r.channel: r.id for r in before}
        await press(h, "U9", FORGET_ACTION, ids["C777"])
        await press(h, "U9", FORGET_ACTION, ids["D5"])
        assert await h.pipeline.memory_records("T1") == before, "a non-member's forged presses forget nothing"
        assert "osprey" not in shown_text(h.slack.homes.pop("U9")), "and the view published after shows none of it"
        for record in [r for r in before if r.channel == "C100"]:
            await press(h, "U1", FORGET_ACTION, record.id)
        assert {r.channel for r in await h.pipeline.memory_records("T1")} == {"C777", "D5"}
        after = h.slack.homes.pop("U1")
        assert "kestrel" not in shown_text(after) and ids["C100"] not in buttons(after, FORGET_ACTION)
        assert "osprey" in shown_text(after), "the others stay"
        assert await h.post(event_body(mention("C100", "1700000700.000100", ASK), event_id="EvAsk")) == 200
        await h.settle()
        assert "kestrel" not in sent(model), "a forgotten record is no longer used"
    finally:
        await h.settle()
        await http.close()
        await h.slack.close()


async def test_the_memory_switch_is_an_admins_only_and_a_forged_press_changes_nothing(
        model, prefix, redis_client) -> None:
    h, http = await make_harness(prefix, redis_client, threadkeeper_memory_workspaces="T1",
                                 threadkeeper_memory_channels="*")
    try:
        await remembered(h)
        h.slack.admins.add("UA")
        admin = await open_home(h, "UA")
        assert buttons(admin, SWITCH_ACTION) == ["C100 off"], "an admin gets the switch of the channels they see"
        assert not buttons(await open_home(h, "U1"), SWITCH_ACTION), "a member who is not an admin does not"
        await press(h, "U1", SWITCH_ACTION, "C100 off")
        await press(h, "U9", SWITCH_ACTION, "C777 off")
        assert await h.pipeline.memory_switched_on("T1", "C100") and await h.pipeline.memory_switched_on("T1", "C777")
        await press(h, "UA", SWITCH_ACTION, "C100 off")
        assert not await h.pipeline.memory_switched_on("T1", "C100"), "an admin's press switches memory off"
        assert buttons(h.slack.homes.pop("UA"), SWITCH_ACTION) == ["C100 on"], "and the view shows it"
        assert await h.post(event_body(mention("C100", "1700000700.000100", ASK), event_id="EvAsk")) == 200
        await h.settle()
        assert "kestrel" not in sent(model), "memory is off in that channel"
    finally:
        await h.settle()
        await http.close()
        await h.slack.close()
