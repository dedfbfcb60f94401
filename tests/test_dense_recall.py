"""Recall by meaning: with ``AI_EMBEDDING_MODEL`` set, BM25 is fused with the question's nearest messages by
embedding, through litellm's real embedding routes (OpenAI-compatible and Ollama) against the loopback model server,
whose toy model places synonyms together."""

from __future__ import annotations

import logging
import socket

import pytest
from fakes import Step, pipeline, scripted
from model_server import ModelServer, Reply

from threadkeeper.persistence import ConversationKeys
from threadkeeper.services.recall import RECALL_HEADER
from threadkeeper.services.text import TermIndex, fuse

CONV = "slack:T1:C9:1700000000.000400"
FACT = "Kate signed up for a ceramics course at the studio on Elm street."
QUESTION = "what new hobby has she taken up lately?"
"""Shares no search term with the fact: only its meaning (hobby ~ ceramics in the toy model) reaches it."""
ROUTES = {"openai": ("openai/toy-embed", "/v1/embeddings"), "ollama": ("ollama/toy-embed", "/api/embed")}


def test_fusion_ranks_by_both_and_meaning_reaches_only_searchable_live_documents() -> None:
    index = TermIndex()
    for terms in (["pottery"], ["lunch"], ["lunch", "room"], ["kiln"], ["lunch"]):
        index.add(terms)
    index.searchable([0, 1, 2, 3])  # the last is still in the context: not searchable
    index.embed([0, 1, 2, 3, 4], [[1, 0], [0, 1], [0.1, 1], [0.9, 0.1], [1, 0]])
    index.remove(3)
    assert index.ranked(["lunch"]) == index.scores(["lunch"]), "without a vector: BM25 alone, exactly"
    _, near = index.nearest([1, 0], limit=10)
    assert near.tolist() == [0, 2, 1], "removed and pending documents are never reached"
    fused = [p for _, p in index.ranked(["lunch"], [1, 0], nearest=10)]
    assert fused[0] in (1, 2) and 0 in fused, "a document only meaning finds is fused in"
    assert fuse([5, 6], [6, 7]) == [(1 / 62 + 1 / 61, 6), (1 / 61, 5), (1 / 62, 7)]


def _filler(n: int) -> list[str]:
    return [f"status update {i}: weather nice, lunch good, sync moved to the big room, pastries again, "
            f"nothing else to report from this corner of the office today" for i in range(n)]


@pytest.fixture
def model():
    m = scripted()
    m.default = Step(text="noted")
    return m


def _pipeline(prefix, client, embedding: str | None, **settings):  # type: ignore[no-untyped-def]
    p, stores = pipeline(prefix, client, context_window=4096,
                         settings={**settings, **({"ai_embedding_model": embedding} if embedding else {})})
    return p, stores


async def _thread(p) -> None:  # type: ignore[no-untyped-def]
    """The fact, then enough talk that a compaction folds it; one turn answers all of it."""
    talk = [FACT, *_filler(110)]
    for i, text in enumerate(talk):
        await p.submit(CONV, text, author=("alice", "bob")[i % 2], id=f"1700.{i:06d}", created_at=1700000000 + i * 60,
                       reply_expected=i == len(talk) - 1)
    p.executor.input.bounded = lambda items: items  # one turn takes the whole queue
    await p.run(CONV)
    await p.submit(CONV, "ok, moving on", author="alice", id="1700.008000", created_at=1700000000 + 200 * 60)
    await p.run(CONV)  # compacts first


async def _recalled(p, question: str = QUESTION) -> str:  # type: ignore[no-untyped-def]
    preview = await p.context(CONV, arriving=[p.message(question, author="carol")])
    runtime = preview.context[-1].text
    return runtime[runtime.index(RECALL_HEADER):] if RECALL_HEADER in runtime else ""


@pytest.mark.parametrize("route", sorted(ROUTES))
async def test_a_message_sharing_no_word_with_the_question_is_recalled_only_by_meaning(
        route: str, server: ModelServer, model, prefix, client) -> None:
    name, path = ROUTES[route]
    p, _ = _pipeline(prefix, client, name)
    await _thread(p)
    history = await p.checkpoints.load_history(CONV)
    assert not any("ceramics" in m.text for m in history.messages if not m.flags.handoff), "the fact was folded"
    assert "ceramics" in await _recalled(p), "found by meaning"
    assert set(server.paths) == {path}, "litellm's own route for the provider"
    words_only, _ = _pipeline(prefix, client, None)
    assert "ceramics" not in await _recalled(words_only), "BM25 alone cannot reach it"
    await p.submit(CONV, QUESTION, author="carol", id="1700.009000")
    [result] = await p.run(CONV)
    assert result.status == "completed"
    sent = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "system"]
    assert any(RECALL_HEADER in t and "ceramics" in t for t in sent), "the turn itself recalls it"


async def test_a_turn_embeds_only_the_question_and_a_cold_worker_reads_the_stored_vectors(
        server: ModelServer, model, prefix, client) -> None:
    await _embedded_once(server, prefix, client)


async def test_vectors_live_in_the_conversations_slot_of_a_redis_cluster(
        server: ModelServer, model, prefix, cluster_client) -> None:
    await _embedded_once(server, prefix, cluster_client)
    key = ConversationKeys(prefix, CONV)
    assert cluster_client.keyslot(key.vectors) == cluster_client.keyslot(key.state)


async def _embedded_once(server: ModelServer, prefix: str, client) -> None:  # type: ignore[no-untyped-def]
    p, _ = _pipeline(prefix, client, "openai/toy-embed")
    await _thread(p)
    await p.submit(CONV, QUESTION, author="carol", id="1700.009000")
    await p.run(CONV)
    server.embedded.clear()
    second = "and who is paying for the course?"
    await p.submit(CONV, second, author="carol", id="1700.009001")
    await p.run(CONV)
    assert server.embedded == [[second]], "the reply before it says what earlier replies said: stored already"
    key = ConversationKeys(prefix, CONV).vectors
    assert key.startswith(f"{prefix}:{{{CONV}}}:"), "beside the conversation, in its hash slot"
    assert await client.hlen(key) >= 112 and await client.ttl(key) > 0
    cold, _ = _pipeline(prefix, client, "openai/toy-embed")  # another worker: no index, no vectors in memory
    server.embedded.clear()
    assert "ceramics" in await _recalled(cold, "remind me of that pottery thing?")
    assert server.embedded == [["remind me of that pottery thing?"]], "every message's vector read from Redis"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("failure", ["down", "401", "dimensions", "hung"])
async def test_a_failing_embedding_model_logs_one_line_and_the_turn_recalls_by_words(
        failure: str, server: ModelServer, model, prefix, client, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    timeout = 1.0 if failure == "hung" else 5.0
    p, _ = _pipeline(prefix, client, "openai/toy-embed", ai_timeout_seconds=timeout)
    await _thread(p)
    if failure == "down":
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{_closed_port()}/v1")
    elif failure == "401":
        server.embed_error = Reply(status=401, error={"error": {"message": "Incorrect API key provided",
                                                                "type": "invalid_request_error"}})
    elif failure == "dimensions":
        server.embed_wrong = 64
    else:
        server.embed_delay = 30
    question = "what was in the status update 7 about pastries?"
    words_only, _ = _pipeline(prefix, client, None)
    expected = await _recalled(words_only, question)
    assert "status update 7" in expected
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="threadkeeper"):
        failing, _ = _pipeline(prefix, client, "openai/toy-embed", ai_timeout_seconds=timeout)  # as cold as words_only
        assert await _recalled(failing, question) == expected, "recall by words alone, exactly"
        caplog.clear()
        await p.submit(CONV, question, author="carol", id="1700.009000")
        [result] = await p.run(CONV)
    assert result.status == "completed" and result.reply == "noted", "the turn does not fail"
    sent = [m["content"] for m in model.requests[-1]["messages"] if m["role"] == "system"]
    assert any(RECALL_HEADER in t and "status update 7:" in t for t in sent)
    lines = [r.getMessage() for r in caplog.records if r.name == "threadkeeper.recall"]
    assert len(lines) == 1 and "AI_EMBEDDING_MODEL='openai/toy-embed'" in lines[0], lines
    said = {"down": "does not answer", "401": "refused the key", "dimensions": "64 dimensions",
            "hung": "did not answer within 1s"}[failure]
    assert said in lines[0] and "\n" not in lines[0]
