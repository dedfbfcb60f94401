"""Generated eval threads: seeded, realistic per style, and honest about what they plant."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from threadkeeper.evals import generate_thread
from threadkeeper.evals.generator import STYLES
from threadkeeper.evals.phrases import BOT, CUE_PHRASES
from threadkeeper.services import parse_thread

_JAPANESE = re.compile(r"[\u3040-\u30ff]")
_SPANISH = re.compile(r"[¿¡ñ]|\b(?:para|está|gracias|alguien)\b")
_GERMAN = re.compile(r"[äöüß]|\b(?:für|ist|zusammen|jemand)\b")


def _planted(thread: dict[str, Any]) -> set[str]:
    """Ids of planted messages: probe evidence, plus edit and delete events."""
    ids = {mid for p in thread["probes"] for mid in p["evidence"]}
    return ids | {m["id"] for m in thread["messages"] if m.get("edits") or m.get("deletes")}


@pytest.mark.parametrize("style", STYLES)
def test_each_style_is_deterministic_and_replayable_with_probes_on_real_messages(style: str) -> None:
    one = generate_thread(3, messages=400, style=style).as_dict()
    assert one == generate_thread(3, messages=400, style=style).as_dict()
    assert one != generate_thread(4, messages=400, style=style).as_dict()
    parse_thread(json.dumps(one))  # the replay format accepts it
    ids = [m["id"] for m in one["messages"]]
    assert len(ids) == len(set(ids)) and all(m["ts"] == m["id"] for m in one["messages"])
    assert all(p["evidence"] and set(p["evidence"]) <= set(ids) for p in one["probes"])
    assert {"identifier", "decision", "open_ask", "constraint", "suspect"} <= {p["kind"] for p in one["probes"]}


def test_work_style_is_the_default() -> None:
    assert generate_thread(5, messages=300).as_dict() == generate_thread(5, messages=300, style="work").as_dict()
    with pytest.raises(ValueError, match="unknown style"):
        generate_thread(5, style="poetry")


@pytest.mark.parametrize("style", STYLES)
def test_reply_is_true_exactly_for_messages_addressed_to_the_bot(style: str) -> None:
    thread = generate_thread(11, messages=500, style=style)
    for m in thread.messages:
        assert m["reply"] is m["text"].startswith(BOT), m
    assert any(m["reply"] for m in thread.messages) and not all(m["reply"] for m in thread.messages)
    asks = {p["evidence"][-1] for p in thread.probes if p["kind"] == "open_ask"}
    assert asks and all(m["reply"] for m in thread.messages if m["id"] in asks)


@pytest.mark.parametrize("style", STYLES)
def test_chatter_avoids_the_cue_phrases_of_planted_items(style: str) -> None:
    thread = generate_thread(7, messages=600, style=style).as_dict()
    planted = _planted(thread)
    chatter = [m["text"].lower() for m in thread["messages"] if m["id"] not in planted]
    assert chatter
    for cue in CUE_PHRASES:
        assert not any(cue in text for text in chatter), cue
    decisions = [m["text"] for m in thread["messages"]
                 if m["id"] in {p["evidence"][0] for p in thread["probes"] if p["kind"] == "decision"}]
    assert len({re.sub(r"\b[A-Z][\w -]*|\d+", "", t) for t in decisions}) > 1  # wording varies


def test_work_chatter_includes_slack_that_defeats_naive_rules() -> None:
    thread = generate_thread(2, messages=1500)
    texts = [m["text"] for m in thread.messages]
    for tricky in ("Can you help?", "Let me know if you need anything else :)",
                   "Have we decided where to go for dinner?"):
        assert tricky in texts
    asker = ""
    for m in thread.messages:
        if m["reply"]:
            asker = m["author"]
        elif m["text"].startswith("nvm") and asker:
            assert m["author"] != asker


def test_casual_threads_are_mostly_chatter_among_few_friends_over_weeks() -> None:
    thread = generate_thread(3, messages=400, style="casual").as_dict()
    messages = thread["messages"]
    planted = _planted(thread)
    assert sum(m["id"] not in planted for m in messages) >= 0.6 * len(messages)
    assert 2 <= len({m["author"] for m in messages}) <= 3
    times = [float(m["ts"]) for m in messages]
    assert times[-1] - times[0] > 14 * 86400
    assert sum(b - a > 3 * 3600 for a, b in zip(times, times[1:])) >= 5  # separate sessions
    texts = {m["id"]: m["text"] for m in messages}
    facts = [p for p in thread["probes"] if p["kind"] == "identifier"]
    assert facts and all(p["answer"] in texts[p["evidence"][0]] for p in facts)
    assert any("?" in m["text"] for m in messages if m["id"] not in planted and not m["reply"])


def test_multilingual_threads_mix_spanish_german_and_japanese_including_planted_facts() -> None:
    thread = generate_thread(3, messages=600, style="multilingual").as_dict()
    messages = thread["messages"]
    texts = [m["text"] for m in messages]
    for pattern in (_SPANISH, _GERMAN, _JAPANESE):
        assert any(pattern.search(t) for t in texts), pattern.pattern
    foreign = [t for t in texts if _SPANISH.search(t) or _GERMAN.search(t) or _JAPANESE.search(t)]
    assert 0.2 <= len(foreign) / len(texts) <= 0.45
    by_id = {m["id"]: m["text"] for m in messages}
    planted_foreign = [p for p in thread["probes"] if p["kind"] == "identifier"
                       and (_SPANISH.search(by_id[p["evidence"][0]]) or _GERMAN.search(by_id[p["evidence"][0]])
                            or _JAPANESE.search(by_id[p["evidence"][0]]))]
    assert planted_foreign and all(p["answer"] in by_id[p["evidence"][0]] for p in planted_foreign)


def test_messy_threads_have_long_pastes_and_late_messages_in_delivery_order() -> None:
    thread = generate_thread(3, messages=600, style="messy").as_dict()
    messages = thread["messages"]
    late = [b for a, b in zip(messages, messages[1:]) if float(b["ts"]) < float(a["ts"])]
    assert 0.04 <= len(late) / len(messages) <= 0.12
    assert all(1 <= float(a["ts"]) - float(b["ts"]) <= 30.5 for a, b in zip(messages, messages[1:])
               if float(b["ts"]) < float(a["ts"]))
    pastes = [m["text"].count("\n") for m in messages if "```" in m["text"]]
    assert pastes and max(pastes) >= 40 and all(n <= 155 for n in pastes)
    decisions = {p["evidence"][-1] for p in thread["probes"] if p["kind"] in ("decision", "reversed_decision")}
    assert any(m["id"] in decisions for m in late)


@pytest.mark.parametrize("style", STYLES)
def test_suspect_probes_say_whether_the_message_was_edited_or_deleted(style: str) -> None:
    changes: dict[str, dict[str, Any]] = {}
    for seed in range(4):
        thread = generate_thread(seed, messages=300, style=style)
        events = {m.get("edits") or m.get("deletes"): m for m in thread.messages if m.get("edits") or m.get("deletes")}
        for p in (p for p in thread.probes if p["kind"] == "suspect"):
            event = events[p["evidence"][0]]
            assert p["change"] == ("deleted" if event.get("deletes") else "edited")
            assert event["reply"] is False and event["text"] != p["answer"]
            changes[p["change"]] = p
    assert set(changes) == {"edited", "deleted"}
