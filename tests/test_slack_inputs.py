"""Input that a signature check or the envelope's schema rejects gets a 400 saying why, never a 500 and never a
traceback: unsigned or signed, at any depth, in any shape Slack does not send."""

from __future__ import annotations

import json

import fakeredis
import pytest
from slack_fake import event_body, sign
from test_slack_bot import SECRET, make_harness, mention

ROOT = "1700008999.000100"


def _deep(n: int) -> str:
    return "[" * n + "]" * n


SIGNED_SHAPES = [  # bodies Slack never sends, correctly signed
    ("a JSON list", "[1, 2, 3]"),
    ("a JSON string", '"hello"'),
    ("a JSON number", "42"),
    ("null", "null"),
    ("not JSON", "{not json"),
    ("empty", ""),
    ("deep JSON", '{"type": "event_callback", "event": ' + _deep(5000) + "}"),
    ("event is a string", json.dumps({**event_body({}, event_id="E1"), "event": "app_mention"})),
    ("event is a list", json.dumps({**event_body({}, event_id="E1"), "event": [1]})),
    ("type is a number", json.dumps({**event_body(mention(ROOT, "hi"), event_id="E1"), "type": 7})),
    ("event type is a dict", json.dumps(event_body({"type": {"a": 1}}, event_id="E1"))),
    ("authorizations is a string", json.dumps({**event_body(mention(ROOT, "hi"), event_id="E1"),
                                               "authorizations": "all"})),
    ("team_id is a list", json.dumps({**event_body(mention(ROOT, "hi"), event_id="E1"), "team_id": ["T1"]})),
    ("event_id is a dict", json.dumps({**event_body(mention(ROOT, "hi"), event_id="E1"), "event_id": {"x": 1}})),
    ("challenge is a number", json.dumps({"type": "url_verification", "challenge": 5})),
    ("not UTF-8", b"\xff\xfe{\x00".decode("latin-1")),
]


@pytest.fixture
async def harness():
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    h, http = await make_harness("tkinputs", client)
    yield h
    await h.bot.worker.shutdown(0)
    await http.close()
    await h.slack.close()
    await client.aclose()


async def _post(h, raw: str | bytes, headers: dict) -> tuple[int, str]:
    response = await h.http.post("/slack/events", data=raw, headers=headers)
    return response.status, await response.text()


@pytest.mark.parametrize(("name", "raw"), SIGNED_SHAPES, ids=[n for n, _ in SIGNED_SHAPES])
async def test_a_signed_shape_slack_does_not_send_gets_400(harness, name: str, raw: str, caplog) -> None:
    sent = raw.encode("latin-1") if name == "not UTF-8" else raw
    status, text = await _post(harness, sent, sign(SECRET, sent))
    assert status == 400, (name, status, text)
    assert text and "Traceback" not in text and "Traceback" not in caplog.text


async def test_unsigned_deep_json_is_refused_before_it_is_read(harness, caplog) -> None:
    status, text = await _post(harness, _deep(5000), {"Content-Type": "application/json"})
    assert status == 401 and "not signed" in text and "Traceback" not in caplog.text, (status, text)


@pytest.mark.parametrize("stamp", ["abc", "", "1e9", "-5", "12.5", "9" * 40, "17000x"])
async def test_a_timestamp_that_is_not_a_number_gets_400(harness, stamp: str, caplog) -> None:
    raw = json.dumps(event_body(mention(ROOT, "hi"), event_id="E1"))
    headers = {**sign(SECRET, raw), "X-Slack-Request-Timestamp": stamp}
    status, text = await _post(harness, raw, headers)
    assert status == 400, (stamp, status, text)
    assert "timestamp" in text and "Traceback" not in caplog.text


async def test_a_well_formed_request_is_still_answered(harness) -> None:
    assert await harness.post(event_body(mention(ROOT, "remember pg-stage-7"), event_id="Ev-ok")) == 200
    assert await harness.post({"type": "url_verification", "challenge": "abc"}) == 200
