"""litellm's real provider code (HTTP, the OpenAI SDK, Ollama) against loopback model servers."""

from __future__ import annotations

import pytest
from fakes import pipeline
from model_server import ModelServer, Reply

from threadkeeper.services import ModelClient, ModelError


async def test_output_requests_are_clamped_to_what_the_model_allows(server: ModelServer) -> None:
    client = ModelClient("openai/gpt-4o", attempts=1, timeout_seconds=10)
    server.push(Reply(text="fine", prompt_tokens=42, completion_tokens=3))
    reply = await client.complete([{"role": "user", "content": "hi"}], max_output_tokens=20_000)
    assert server.paths == ["/v1/chat/completions"]
    assert server.requests[0]["max_tokens"] == 16_384, "gpt-4o allows 16,384 output tokens"
    assert reply.text == "fine" and reply.usage is not None and reply.usage.input_tokens == 42


async def test_ollama_is_told_the_window_the_budget_assumes(server: ModelServer) -> None:
    client = ModelClient("ollama_chat/llama3.1", attempts=1, timeout_seconds=10, context_window=8_000)
    server.push(Reply(text="hola", prompt_tokens=30, completion_tokens=2))
    reply = await client.complete([{"role": "user", "content": "hi"}])
    assert server.paths == ["/api/chat"]
    assert server.requests[0]["options"]["num_ctx"] == 8_000
    assert reply.text == "hola" and reply.usage is not None and reply.usage.input_tokens == 30


async def test_a_turn_runs_through_the_openai_route_with_tools_and_usage(server: ModelServer, prefix, client) -> None:
    p, _ = pipeline(prefix, client, settings={"ai_model": "openai/gpt-4o", "ai_fast_model": "openai/gpt-4o",
                                              "ai_model_context_window_tokens": 8_000})
    server.push(Reply(text="The deploy is green.", prompt_tokens=812, completion_tokens=6))
    await p.submit("slack:T1:C1:1.000100", "is the deploy green?", author="ana", id="1.000100")
    [result] = await p.run("slack:T1:C1:1.000100")
    assert result.reply == "The deploy is green." and result.usage is not None and result.usage.input_tokens == 812
    sent = server.requests[0]
    assert {t["function"]["name"] for t in sent["tools"]} == {"record_state", "thread_search"}
    assert sent["max_tokens"] <= 16_384 and sent["messages"][-2]["content"] == "[#1] ana: is the deploy green?"


async def test_a_hung_provider_pauses_the_turn_at_the_timeout_and_the_next_message_resumes_it(
        server: ModelServer, prefix, client) -> None:
    """A provider that accepts the request and never answers: the call is cut at AI_TIMEOUT_SECONDS (one
    request, no retry behind it), the turn is saved awaiting resume, and the next message
    resumes it once the provider answers again."""
    import time

    conv = "slack:T1:C1:2.000100"
    p, _ = pipeline(prefix, client, settings={"ai_model": "openai/gpt-4o", "ai_fast_model": "openai/gpt-4o",
                                              "ai_model_context_window_tokens": 8_000, "ai_timeout_seconds": 1.5,
                                              "ai_retry_attempts": 1})
    server.push(Reply(text="too late", delay=5))
    await p.submit(conv, "what broke the deploy?", author="ana", id="2.000100")
    started = time.perf_counter()
    [paused] = await p.run(conv)
    assert paused.status == "awaiting_resume" and time.perf_counter() - started < 4.5
    assert len(server.requests) == 1, "the request reached the provider, and was not retried"
    server.push(Reply(text="The migration did.", prompt_tokens=300, completion_tokens=4))
    await p.submit(conv, "any news?", author="ana", id="2.000200")
    [resumed] = await p.run(conv)
    assert resumed.checkpoint_id == paused.checkpoint_id and resumed.status == "completed"
    assert resumed.reply == "The migration did."
    asked = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert any("what broke the deploy?" in a for a in asked) and any("any news?" in a for a in asked)


CONTEXT_LENGTH = {"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages "
                                      "resulted in 9107 tokens. Please reduce the length of the messages.",
                            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


async def test_a_context_length_refusal_compacts_tighter_and_the_turn_is_answered(server: ModelServer, prefix,
                                                                                  client) -> None:
    p, _ = pipeline(prefix, client, settings={"ai_model": "openai/gpt-4o", "ai_fast_model": "offline/offline",
                                              "ai_model_context_window_tokens": 8_000})
    cid = "slack:T1:C1:2.000100"
    for i in range(150):
        await p.submit(cid, f"update {i}: the migration of shard {i} finished, latency fine, nothing else to add",
                       author="ana", id=f"2.{i:06d}", reply_expected=False)
    await p.run(cid)
    server.push(Reply(status=400, error=CONTEXT_LENGTH), Reply(text="Answered after compacting."))
    await p.submit(cid, "so where are we with the migration?", author="ana", id="2.000999")
    [result] = await p.run(cid)
    assert result.status == "completed" and result.reply == "Answered after compacting."
    assert len(server.requests) == 2, "one refusal, one retry"
    rows = await p.checkpoints.lineage(cid)
    compactions = [r for r in rows if r.kind.value == "compaction"]
    assert len(compactions) == 1 and compactions[0].message_count < 150
    retried = server.requests[1]["messages"]
    assert retried[-2]["content"].endswith("] ana: so where are we with the migration?")
    assert sum(len(m["content"] or "") for m in retried) < sum(len(m["content"] or "") for m in server.requests[0]["messages"])
    # A second refusal in a row is answered with an apology, and the thread is not stuck: its message is kept.
    server.push(Reply(status=400, error=CONTEXT_LENGTH), Reply(status=400, error=CONTEXT_LENGTH))
    await p.submit(cid, "and the next step?", author="ana", id="2.001000")
    [failed] = await p.run(cid)
    assert failed.status == "failed" and "could not answer" in (failed.reply or "")
    assert any(m.id == "2.001000" for m in (await p.checkpoints.load_history(cid)).messages)


def test_start_up_names_a_missing_key_or_an_unknown_model(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_budget_and_cli import cli

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    missing = cli("console", env={"AI_MODEL": "openai/gpt-4o"}, stdin="", cwd=tmp_path)  # no .env of anyone's
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("threadkeeper: error: AI_MODEL='openai/gpt-4o' needs OPENAI_API_KEY set (in the "
                                      "environment or .env): the provider's key")
    unknown = cli("console", env={"AI_MODEL": "nosuchprovider/some-model"}, stdin="", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.startswith(
        "threadkeeper: error: AI_MODEL='nosuchprovider/some-model' is not a model litellm can call")
    no_window = cli("console", env={"AI_MODEL": "openai/my-local-model", "OPENAI_API_KEY": "sk-x"}, stdin="",
                    cwd=tmp_path)
    assert no_window.returncode == 2 and "set AI_MODEL_CONTEXT_WINDOW_TOKENS" in no_window.stderr
    assert len(no_window.stderr.strip().splitlines()) == 1
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    down = cli("console", env={"AI_MODEL": "openai/my-local-model", "OPENAI_API_KEY": "sk-x",
                               "AI_MODEL_CONTEXT_WINDOW_TOKENS": "8192",
                               "OPENAI_BASE_URL": f"http://127.0.0.1:{closed}/v1"}, stdin="", cwd=tmp_path)
    assert down.returncode == 2 and len(down.stderr.strip().splitlines()) == 1
    assert down.stderr.startswith(f"threadkeeper: error: AI_MODEL='openai/my-local-model' is served from "
                                  f"OPENAI_BASE_URL=http://127.0.0.1:{closed}/v1, which does not answer")


def test_dotenv_variables_reach_the_providers(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from threadkeeper.settings import export_dotenv

    env = tmp_path / ".env"
    env.write_text("OPENAI_API_KEY=sk-from-dotenv\nOLLAMA_API_BASE=http://127.0.0.1:11434\nAI_MODEL=gpt-4o\n")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OLLAMA_API_BASE", "http://from-the-environment:1")
    monkeypatch.delenv("AI_MODEL", raising=False)
    assert sorted(export_dotenv(str(env))) == ["AI_MODEL", "OPENAI_API_KEY"]
    import os

    assert os.environ["OPENAI_API_KEY"] == "sk-from-dotenv"
    assert os.environ["OLLAMA_API_BASE"] == "http://from-the-environment:1", "the environment wins over .env"


async def test_one_retry_layer_counts_every_request(server: ModelServer) -> None:
    error = {"error": {"message": "upstream overloaded", "type": "server_error", "code": None}}
    once = ModelClient("openai/gpt-4o", attempts=1, timeout_seconds=10, retry_wait_seconds=0.01)
    server.push(Reply(status=500, error=error), Reply(text="an SDK retry would get this"))
    with pytest.raises(ModelError):
        await once.complete([{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1, "the provider SDK's own retries are off"
    server.requests.clear()
    server.replies.clear()
    thrice = ModelClient("openai/gpt-4o", attempts=3, timeout_seconds=10, retry_wait_seconds=0.01)
    server.push(Reply(status=500, error=error), Reply(status=500, error=error), Reply(text="third time"))
    reply = await thrice.complete([{"role": "user", "content": "hi"}])
    assert reply.text == "third time" and len(server.requests) == 3


async def test_retry_after_is_honoured_and_a_wait_longer_than_a_call_is_not_a_timeout(server: ModelServer) -> None:
    import time

    from threadkeeper.services.models import RateLimitedError

    limited = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    client = ModelClient("openai/gpt-4o", attempts=3, timeout_seconds=5, retry_wait_seconds=0.01)
    server.push(Reply(status=429, error=limited, headers={"Retry-After": "1"}), Reply(text="after the wait"))
    started = time.perf_counter()
    reply = await client.complete([{"role": "user", "content": "hi"}])
    assert reply.text == "after the wait" and time.perf_counter() - started >= 1.0 and len(server.requests) == 2
    server.push(Reply(status=429, error=limited, headers={"Retry-After": "3600"}))
    started = time.perf_counter()
    with pytest.raises(RateLimitedError, match="retry after 3600s, longer than a call may take"):
        await client.complete([{"role": "user", "content": "hi"}])
    assert time.perf_counter() - started < 2 and len(server.requests) == 3


@pytest.mark.parametrize("fast_model, window, limit", [("openai/gpt-4o", None, 16_384),
                                                      ("openai/fast-8k", 8_192, 8_192 // 4)])
async def test_a_compaction_gets_its_narrative_from_a_real_provider_route(server: ModelServer, prefix, client,
                                                                         fast_model, window, limit) -> None:
    """The summarizer is called through litellm's OpenAI route; its request stays within the model's limits
    and its narrative, citing a real reference, is accepted."""
    from fakes import Step, scripted
    from test_compaction import CONV, chat, filler

    main = scripted()
    main.default = Step(text="noted")
    settings = {"ai_fast_model": fast_model}
    if window:
        settings["ai_fast_model_context_window_tokens"] = window
    p, _ = pipeline(prefix, client, context_window=4096, settings=settings)
    server.default = Reply(text="- [#1] Ticket OPS-77 tracks the outage of the ledger service.",
                           prompt_tokens=900, completion_tokens=20)
    await chat(p, ["Ticket OPS-77 tracks the outage of the ledger service."] + filler(70, 1))
    history = await p.checkpoints.load_history(CONV)
    root = await p.checkpoints.get(CONV, history.chain[0])
    assert server.requests and all(path == "/v1/chat/completions" for path in server.paths)
    for request in server.requests:
        chars = sum(len(m["content"]) for m in request["messages"])
        print(f"{fast_model}: model={request['model']} max_tokens={request['max_tokens']} "
              f"messages={len(request['messages'])} prompt_chars={chars}")
        assert request["max_tokens"] <= limit
    assert root.meta.info["strategy"] == "llm"
    narrative = history.messages[0].text.split("Narrative (model-written):")[1]
    assert "- [#1] Ticket OPS-77 tracks the outage of the ledger service." in narrative


class Collected:
    """A draft that keeps what it is written."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.discarded = 0

    async def write(self, text: str) -> None:
        self.pieces.append(text)

    async def discard(self) -> None:
        self.discarded += 1
        self.pieces.clear()


async def test_a_streamed_reply_is_written_as_it_comes_and_read_like_a_whole_one(server: ModelServer) -> None:
    import litellm

    text = "The deploy of pg-stage-7 finished at 14:02 and every check is green."
    call = ("thread_search", '{"query": "pg-stage-7 rollback window"}')
    client = ModelClient("openai/gpt-4o", attempts=1, timeout_seconds=10)
    server.push(Reply(text=text, prompt_tokens=900, completion_tokens=17, tool_calls=[call],
                      finish_reason="tool_calls"))
    draft = Collected()
    reply = await client.complete([{"role": "user", "content": "status?"}], draft=draft)
    sent = server.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert draft.pieces == Reply(text=text).pieces() and len(draft.pieces) == 12, "written a word at a time"
    assert reply.text == text and [(c.name, c.arguments) for c in reply.tool_calls] == [call], \
        "a tool call streamed in pieces is read whole"
    assert reply.usage is not None and (reply.usage.input_tokens, reply.usage.output_tokens) == (900, 17)
    assert reply.finish_reason == "tool_calls"
    price = litellm.model_cost["gpt-4o"]
    expected = 900 * price["input_cost_per_token"] + 17 * price["output_cost_per_token"]
    assert reply.cost_usd == pytest.approx(expected)
    server.push(Reply(text="fine", prompt_tokens=900, completion_tokens=17))
    whole = await client.complete([{"role": "user", "content": "status?"}])
    assert "stream" not in server.requests[1] and whole.cost_usd == pytest.approx(expected), "priced the same whole"

    ollama = ModelClient("ollama_chat/llama3.1", attempts=1, timeout_seconds=10, context_window=8_000)
    server.push(Reply(text="hola a todos", prompt_tokens=30, completion_tokens=3))
    draft = Collected()
    reply = await ollama.complete([{"role": "user", "content": "hi"}], draft=draft)
    assert server.requests[-1]["stream"] is True and server.requests[-1]["options"]["num_ctx"] == 8_000
    assert draft.pieces == ["hola", " a", " todos"] and reply.text == "hola a todos"
    assert reply.usage is not None and reply.usage.input_tokens == 30


async def test_a_stream_cut_mid_reply_is_taken_back_and_retried(server: ModelServer) -> None:
    text = "one two three four five six"
    client = ModelClient("openai/gpt-4o", attempts=2, timeout_seconds=10, retry_wait_seconds=0.01)
    server.push(Reply(text=text, fail_after_chunks=3), Reply(text=text))
    draft = Collected()
    reply = await client.complete([{"role": "user", "content": "count"}], draft=draft)
    assert len(server.requests) == 2 and draft.discarded == 1, "the cut attempt's text is taken back once"
    assert "".join(draft.pieces) == reply.text == text


async def test_the_console_talks_to_a_real_provider_route(server: ModelServer, prefix, client) -> None:
    import io

    from threadkeeper.bot.console import run_console

    p, _ = pipeline(prefix, client, settings={"ai_model": "openai/gpt-4o", "ai_model_context_window_tokens": 8_000})
    server.push(Reply(text="Tracking ABC-123 from now on.", prompt_tokens=700, completion_tokens=8))
    out = io.StringIO()
    assert await run_console(p, "console:real", io.StringIO("track ABC-123 for me\n/context\n/quit\n"), out) == 0
    shown = out.getvalue()
    assert "threadkeeper> Tracking ABC-123 from now on." in shown and "context of console:real" in shown
    assert server.paths == ["/v1/chat/completions"] and server.requests[0]["model"] == "gpt-4o"


def _local_model_examples() -> list[dict[str, str]]:
    """The variables of each command in docs/configuration.md's local-model example, as written there."""
    import re
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()
    [block] = re.findall(r"\*\*Local models\.\*\*.*?```bash\n(.*?)```", doc, re.S)
    examples = []
    for line in block.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = shlex.split(line)
        variables = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=.*", w))
        assert words[len(variables):] == ["make", "run"], line
        examples.append(variables)
    return examples


LOCAL_MODEL_EXAMPLES = _local_model_examples()


def test_the_documented_local_model_examples_are_the_two_routes() -> None:
    assert sorted(e["AI_MODEL"].split("/")[0] for e in LOCAL_MODEL_EXAMPLES) == ["ollama_chat", "openai"]


@pytest.mark.parametrize("documented", LOCAL_MODEL_EXAMPLES, ids=lambda e: e["AI_MODEL"])
async def test_each_documented_local_model_example_answers_in_the_console(documented: dict[str, str], prefix,
                                                                           redis_client) -> None:
    """``make run`` with exactly the variables docs/configuration.md gives (no Slack tokens: the console), the
    server's address pointed at a loopback one: start-up passes its checks and a message gets the model's answer."""
    import asyncio
    import json
    import tempfile
    from urllib.parse import urlsplit

    import prestarted
    from conftest import REDIS_URL
    from test_budget_and_cli import clean_env

    srv = await ModelServer().start()
    try:
        srv.default = Reply(text="Local model here: ABC-123 is the login bug.", prompt_tokens=400, completion_tokens=9)
        env = {k: v for k, v in clean_env().items() if not k.startswith(("OPENAI_", "OLLAMA_"))}
        env.update(documented)
        for name, value in documented.items():
            if name.endswith(("_BASE_URL", "_API_BASE")):  # the same path, on the loopback server
                env[name] = srv.url + urlsplit(value).path
        env.update(REDIS_URL=REDIS_URL, THREADKEEPER_KEY_PREFIX=prefix)
        with tempfile.TemporaryDirectory() as cwd:  # no .env of anyone's
            # ``threadkeeper run`` forked from an interpreter that has imported the stack (tests/prestarted.py)
            ran = await asyncio.to_thread(prestarted.run, "run", env=env, cwd=cwd, timeout=240,
                                          input="ABC-123 is the login bug, keep it in mind\n/quit\n")
    finally:
        await srv.stop()
    stdout, stderr = ran.stdout, ran.stderr
    assert ran.returncode == 0, stderr
    window = int(documented["AI_MODEL_CONTEXT_WINDOW_TOKENS"])
    assert f"model {documented['AI_MODEL']} (window {window:,} tokens" in stdout
    assert "threadkeeper> Local model here: ABC-123 is the login bug." in stdout
    [request] = srv.requests
    assert request["model"] == documented["AI_MODEL"].split("/", 1)[1]
    assert "ABC-123 is the login bug, keep it in mind" in json.dumps(request["messages"])
    if documented["AI_MODEL"].startswith("ollama_chat/"):
        assert srv.paths == ["/api/chat"] and request["options"]["num_ctx"] == window
    else:
        assert srv.paths == ["/v1/chat/completions"]


def test_the_fast_model_takes_the_main_window_only_when_it_is_the_main_model(server: ModelServer) -> None:
    from threadkeeper.root import check_models
    from threadkeeper.settings import Settings, SettingsError

    local = {"ai_model": "openai/my-local-model", "ai_model_context_window_tokens": 16_384}
    for same in ({}, {"ai_fast_model": "openai/my-local-model"}):
        settings = Settings(_env_file=None, **local, **same)  # type: ignore[call-arg]
        assert settings.fast_model_context_window_tokens == 16_384
        check_models(settings)
    other = Settings(_env_file=None, **local, ai_fast_model="openai/my-small-model")  # type: ignore[call-arg]
    assert other.fast_model_context_window_tokens is None
    with pytest.raises(SettingsError, match="set AI_FAST_MODEL_CONTEXT_WINDOW_TOKENS"):
        check_models(other)
    own = Settings(_env_file=None, **local, ai_fast_model_context_window_tokens=4_096)  # type: ignore[call-arg]
    assert own.fast_model_context_window_tokens == 4_096, "the fast model's own window wins"
