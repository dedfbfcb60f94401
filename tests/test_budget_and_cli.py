"""Budgets derived from windows, the offline model, the console and the history/context/replay commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import prestarted
import pytest
from conftest import REDIS_URL, drop_prefix, real_redis

from threadkeeper.services import BudgetError, ContextBudget, ModelClient, resolve_window
from threadkeeper.services.models import OFFLINE_WINDOW_TOKENS


def cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
        timeout: float = 240, cwd: Path | str | None = None, fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``threadkeeper *args`` forked from an interpreter that has imported the stack (tests/prestarted.py), or with
    ``fresh`` a new ``python -m threadkeeper`` (for what a process measures of itself: its memory, its start); the
    tests of what a command imports run ``python -m threadkeeper`` themselves."""
    full_env = {**clean_env(), **(env or {})}
    # Not the checkout: a developer's .env there (keys, a REDIS_URL of theirs) must never reach the tests.
    if fresh:
        return subprocess.run([sys.executable, "-m", "threadkeeper", *args], input=stdin, capture_output=True,
                              text=True, env=full_env, cwd=cwd or _NO_DOTENV, timeout=timeout)
    return prestarted.run(*args, input=stdin, env=full_env, cwd=cwd or _NO_DOTENV, timeout=timeout)


def clean_env() -> dict[str, str]:
    """This environment without the product's settings (a REDIS_URL, a model or a key of the developer's)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "AI_", "THREADKEEPER_", "REDIS"))}


_NO_DOTENV = tempfile.mkdtemp(prefix="threadkeeper-cli-")
"""An empty working directory for the command-line tests."""


@pytest.mark.parametrize("window", [8_000, 128_000, 1_000_000])
def test_every_threshold_is_a_fraction_of_the_usable_window(window: int) -> None:
    b = ContextBudget.derive(window, fixed_prompt_tokens=300, max_output_tokens=16_384)
    assert b.usable_tokens == window - b.output_reserve_tokens - 300
    assert b.trigger_tokens == int(b.usable_tokens * 0.8)
    assert b.target_tokens == int(b.usable_tokens * 0.55)
    assert b.retained_user_tokens + b.summary_cap_tokens + b.pin_tokens <= b.target_tokens < b.trigger_tokens
    assert 256 <= b.output_reserve_tokens <= 16_384


def test_window_from_litellm_override_and_unknown_model() -> None:
    assert resolve_window("gpt-4o-mini", None) == 128_000
    assert resolve_window("gpt-4o-mini", 9_000) == 9_000
    assert resolve_window("offline", None) == OFFLINE_WINDOW_TOKENS
    with pytest.raises(BudgetError, match="AI_MODEL_CONTEXT_WINDOW_TOKENS"):
        resolve_window("acme/unknown-model-7", None)
    with pytest.raises(BudgetError, match="larger window"):
        ContextBudget.derive(1_000, fixed_prompt_tokens=900)


async def test_offline_model_answers_honestly_with_usage() -> None:
    client = ModelClient("offline")
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "alice: where is ABC-123?"}]
    reply = await client.complete(messages)
    assert "not a language model" in reply.text and "where is ABC-123?" in reply.text
    assert reply.usage is not None and reply.usage.input_tokens > 0
    assert f"{reply.usage.input_tokens:,} tokens of context" in reply.text
    assert reply.text == (await client.complete(messages)).text


async def test_the_offline_model_quotes_what_its_context_holds_for_the_question() -> None:
    """Recalled messages and memory records (under their day lines in the runtime context) and earlier messages in
    view are quoted with their reference, author and day when they share words with the question; nothing else."""
    runtime = ("[runtime context] now: 2024-03-20 10:00 UTC\n"
               "[recalled from earlier in this thread: ...]\n2024-03-12:\n[#12] ana: the login bug is ABC-123\n"
               "[#13] bo: lunch at noon\n"
               "[memory: ...]\n2023-11-14:\n- alice: M1 staging cluster called kestrel-eu; M2 (decision) "
               "never deploy Fridays")
    messages = [{"role": "system", "content": "sys"}, {"role": "system", "content": runtime},
                {"role": "user", "content": "[#40] cy: which login bug ticket, and where is the staging cluster?"}]
    reply = (await ModelClient("offline").complete(messages)).text
    assert "Earlier in this thread, ana (12 Mar 2024, #12): \u201cthe login bug is ABC-123\u201d" in reply
    assert "From memory, M1: alice (14 Nov 2023): \u201cstaging cluster called kestrel-eu\u201d" in reply
    assert "lunch" not in reply and "Fridays" not in reply and "not a language model" in reply
    plain = [{"role": "user", "content": "cy: nothing in common here"}]
    assert "What my context holds" not in (await ModelClient("offline").complete(plain)).text


def test_console_works_with_piped_stdin_and_no_configuration() -> None:
    result = cli("console", stdin="hello\n/context\n/history\n/quit\n")
    assert result.returncode == 0, result.stderr
    assert "threadkeeper> Offline model here" in result.stdout
    assert "context of console:local" in result.stdout and "HEAD" in result.stdout
    assert "embedded Redis (data in " in result.stdout


def test_invalid_setting_fails_at_start_naming_the_variable() -> None:
    result = cli("console", env={"THREADKEEPER_RETENTION_DAYS": "-3"}, stdin="")
    assert result.returncode == 2
    assert "THREADKEEPER_RETENTION_DAYS" in result.stderr


def test_help_and_history_start_without_the_model_stack() -> None:
    """``--help`` and ``history`` import neither litellm nor the tokenizers and word lists: every command
    would otherwise pay seconds of imports before doing anything."""
    probe = ("import sys, threadkeeper.cli as c; c.build_parser(); "
             "print(sorted(m for m in ('litellm', 'tiktoken', 'wordfreq', 'services', 'bot') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=_NO_DOTENV, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert cli("--help").returncode == 0


def test_an_offline_worker_never_imports_the_provider_stack() -> None:
    """The offline model answers in-process: a whole turn (compaction check, tokenizer, reply) runs without
    importing litellm, which would cost the worker about 200 MB and seconds of start-up."""
    probe = ("import asyncio, sys\n"
             "import fakeredis\n"
             "from threadkeeper.root import build_pipeline, build_stores\n"
             "from threadkeeper.settings import Settings\n"
             "settings = Settings(_env_file=None)\n"
             "pipeline = build_pipeline(settings, build_stores(settings, client=fakeredis.FakeAsyncRedis()))\n"
             "async def turn():\n"
             "    await pipeline.submit('console:probe', 'hello, where are we?', author='U1', id='1')\n"
             "    return (await pipeline.run('console:probe'))[0]\n"
             "result = asyncio.run(turn())\n"
             "print(result.status, 'litellm' in sys.modules, 'tiktoken' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=_NO_DOTENV, timeout=120,
                            env=clean_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["completed", "False", "True"]


@pytest.mark.parametrize("command", ["console", "run"])
def test_the_offline_console_starts_without_the_provider_stack(command: str, tmp_path: Path) -> None:
    """A newcomer's first start (no Slack tokens, no model settings, the embedded Redis) and first message never
    import litellm: its import alone would take seconds of a start-up that should take one."""
    probe = ("import sys\n"
             "from threadkeeper.cli import main\n"
             f"code = main([{command!r}])\n"
             "print('exit', code, 'litellm', 'litellm' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", probe], input="hello, where are we?\n", capture_output=True,
                            text=True, cwd=tmp_path, timeout=120, env=clean_env())
    assert result.returncode == 0, result.stderr
    assert "threadkeeper> Offline model here" in result.stdout, result.stdout
    assert result.stdout.split()[-4:] == ["exit", "0", "litellm", "False"], result.stdout


def test_unknown_conversation_exits_non_zero() -> None:
    for command in ("history", "context"):
        result = cli(command, "slack:T0:C0:0.0")
        assert result.returncode != 0 and "no conversation" in result.stderr


def test_malformed_replay_file_names_message_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"messages": [{"id": "1", "author": "a", "text": "ok"},
                                             {"id": "2", "author": "b"}]}))
    result = cli("replay", str(path))
    assert result.returncode == 2
    assert "message 1 (id '2')" in result.stderr and "'text'" in result.stderr
    path.write_text("[{\"ts\": \"1.0\", \"text\": \"hi\"}]")
    result = cli("replay", str(path))
    assert "field 'user'" in result.stderr


def _ok(i: int, text: str = "hello there") -> dict:
    return {"id": f"{1700000000 + i}.000100", "author": "U1", "text": text}


BAD_REPLAYS = [  # (what is wrong, the file, what the error names)
    ("deep JSON", "[" * 5000 + "]" * 5000, "nested too deeply"),
    ("a lone surrogate", json.dumps({"messages": [_ok(1), _ok(2, "caf\ud800")]}), "message 1"),
    ("an empty text", json.dumps({"messages": [_ok(1), _ok(2), _ok(3, "  ")]}), "field 'text' is empty"),
    ("an edit of an unknown message", json.dumps({"messages": [_ok(1), {**_ok(2), "edits": "nope"}]}),
     "edits 'nope'"),
    ("a deletion before its message", json.dumps({"messages": [{**_ok(1), "deletes": _ok(2)["id"]}, _ok(2)]}),
     "which is not a message before it"),
    ("edits and deletes", json.dumps({"messages": [_ok(1), {**_ok(2), "edits": _ok(1)["id"],
                                                            "deletes": _ok(1)["id"]}]}), "not both"),
    ("a Slack export ts that is no time", json.dumps([{"ts": "1.0", "user": "U1", "text": "a"},
                                                      {"ts": "soon", "user": "U1", "text": "b"}]), "'ts'"),
    ("a message that is a list", json.dumps({"messages": [_ok(1), [1, 2]]}), "message 1"),
    ("an id that is a number", json.dumps({"messages": [_ok(1), {**_ok(2), "id": 7}]}), "'id'"),
    ("a conversation id with braces", json.dumps({"conversation_id": "x{y}", "messages": [_ok(1)]}),
     "invalid conversation id"),
]


@pytest.mark.parametrize(("what", "raw", "named"), BAD_REPLAYS[:-1], ids=[b[0] for b in BAD_REPLAYS[:-1]])
def test_a_malformed_replay_file_is_refused_whole_with_a_reason(what: str, raw: str, named: str) -> None:
    from threadkeeper.services.replay import ReplayInputError, parse_thread

    with pytest.raises(ReplayInputError) as caught:
        parse_thread(raw.encode("utf-8", "surrogatepass"), "bad.json")
    assert named in str(caught.value) and str(caught.value).startswith("bad.json:"), str(caught.value)


@pytest.mark.redis
def test_the_lineage_tree_branches_at_forks_and_at_a_second_turn_from_one_checkpoint() -> None:
    from rich.console import Console

    from threadkeeper.bot.render import lineage_tree
    from threadkeeper.persistence import CheckpointKind, CheckpointStatus, LineageEntry

    def row(i: str, kind: str, status: str, parent: str | None = None, fork: str | None = None,
            head: bool = False) -> LineageEntry:
        return LineageEntry(id=i, kind=CheckpointKind(kind), status=CheckpointStatus(status), parent=parent,
                            forked_from=fork, message_count=3, token_total=90, created_at=1700000000.0, is_head=head)

    rows = [row("cp1", "turn", "completed"), row("cp2", "turn", "superseded", parent="cp1"),
            row("cp3", "turn", "completed", parent="cp1"), row("cp4", "compaction", "completed", fork="cp3"),
            row("cp5", "turn", "completed", parent="cp4", head=True)]
    console = Console(record=True, width=200)
    console.print(lineage_tree("console:local", rows, 7))
    lines = console.export_text().splitlines()
    at = {name: next(i for i, line in enumerate(lines) if f" {name} " in line) for name in ("cp1", "cp2", "cp3", "cp5")}
    indent = {name: len(lines[i]) - len(lines[i].lstrip(" │├└─")) for name, i in at.items()}
    assert lines[0].startswith("lineage of console:local (7 messages so far; 5 checkpoints")
    assert indent["cp1"] == indent["cp3"] < indent["cp2"], "the newer turn continues the line; the other branches"
    assert indent["cp5"] > indent["cp3"] and "⑂ compacted: forked from cp3" in lines[at["cp5"] - 2]
    assert "HEAD cp5" in lines[at["cp5"]]


def test_long_work_says_where_it_stands_in_plain_lines_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Written to a file or a pipe, progress is a plain line now and then (count, share, time taken and left) and
    one at the end; phases without a count are named as they start."""
    import io

    from threadkeeper import logs

    clock = iter(float(t) for t in range(0, 1000, 5))
    out = io.StringIO()
    monkeypatch.setattr(logs.time, "monotonic", lambda: next(clock))
    with logs.WorkProgress("replay", 400, stream=out) as bar:
        for done in range(0, 401, 100):
            bar.update(done)
    lines = out.getvalue().splitlines()
    assert lines[0] == "replay: 100 of 400 (25%), 10 s, about 30 s left", lines
    assert lines[-1].startswith("replay: 400 of 400 (100%)") and "left" not in lines[-1]
    out = io.StringIO()
    with logs.WorkProgress("bench", None, stream=out) as phases:
        phases.update(what="history of 1,000 messages")
    assert out.getvalue().splitlines()[0].startswith("bench: history of 1,000 messages (")
    assert out.getvalue().splitlines()[-1].startswith("bench: done (")


def test_replay_of_a_bad_file_writes_nothing_and_says_why_in_one_line(tmp_path: Path, prefix: str) -> None:
    import redis

    env = {"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix}
    for what, raw, named in (BAD_REPLAYS[1], BAD_REPLAYS[4], BAD_REPLAYS[-1]):
        path = tmp_path / "bad.json"
        path.write_bytes(raw.encode("utf-8", "surrogatepass"))
        result = cli("replay", str(path), env=env)
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert result.returncode == 2 and len(lines) == 1 and named in lines[0], (what, result.stderr)
        assert "Traceback" not in result.stderr
    with redis.Redis.from_url(REDIS_URL) as client:
        assert client.keys(f"{prefix}:*") == [], "nothing was written"


def test_replay_into_an_empty_conversation_id_is_refused_not_replaced(tmp_path: Path, prefix: str) -> None:
    """An id given, even an empty one, is the id checked: ``--conversation ''`` is refused in one line, not replayed
    into the conversation the file would name."""
    import redis

    path = tmp_path / "thread.json"
    path.write_text(json.dumps({"messages": [{"id": "1700.000001", "text": "hello", "author": "U1"}]}), encoding="utf-8")
    result = cli("replay", str(path), "--conversation", "", env={"REDIS_URL": REDIS_URL,
                                                                  "THREADKEEPER_KEY_PREFIX": prefix})
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "invalid conversation id ''" in lines[0], result.stderr
    with redis.Redis.from_url(REDIS_URL) as client:
        assert client.keys(f"{prefix}:*") == [], "nothing was written"


@pytest.mark.redis
async def test_replay_2000_messages_against_real_redis(tmp_path: Path, prefix: str) -> None:
    client = await real_redis()
    thread = {"conversation_id": "replay:test:2000",
              "messages": [{"id": f"{1700000000 + i}.000100", "author": f"U{i % 5}",
                            "text": f"message {i}: deploy status for service-{i % 17} is {'green' if i % 3 else 'red'}"}
                           for i in range(2000)]}
    path, out = tmp_path / "thread.json", tmp_path / "out.json"
    path.write_text(json.dumps(thread))
    env = {"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix}
    try:
        result = cli("replay", str(path), "--turn-every", "10", "--out", str(out), env=env)
        assert result.returncode == 0, result.stderr
        assert "replay: 2,000 of 2,000 (100%)" in result.stderr, "piped, the replay still says where it stands"
        report = json.loads(out.read_text())
        assert report["conversation_id"] == "replay:test:2000"
        for key in ("window_tokens", "output_reserve_tokens", "fixed_prompt_tokens", "usable_tokens",
                    "trigger_tokens", "target_tokens", "retained_user_tokens", "summary_cap_tokens"):
            assert isinstance(report["budget"][key], int), key
        assert report["window_tokens"] == report["budget"]["window_tokens"]
        assert isinstance(report["compactions"], list)
        for entry in report["context"]:
            assert set(entry) == {"role", "text", "source_ids", "tokens"}
        assert report["context_tokens"] == sum(e["tokens"] for e in report["context"])
        tree = cli("history", "replay:test:2000", "--tree", env=env)
        assert tree.returncode == 0 and tree.stdout.count("⑂ compacted: forked from") == len(report["compactions"])
        assert tree.stdout.count("HEAD") == 1, tree.stdout
        history = cli("history", "replay:test:2000", "--json", env=env)
        rows = json.loads(history.stdout)
        assert len(report["compactions"]) >= 1
        assert len(rows) == 200 + len(report["compactions"]) and sum(r["is_head"] for r in rows) == 1
        assert report["context_tokens"] - report["budget"]["fixed_prompt_tokens"] < report["budget"]["trigger_tokens"]
        assert set(rows[0]) == {"id", "kind", "status", "parent", "forked_from", "message_count", "token_total",
                                "created_at", "is_head"}
        context = cli("context", "replay:test:2000", "--json", env=env)
        assert json.loads(context.stdout)["context_tokens"] == report["context_tokens"]
    finally:
        await drop_prefix(client, prefix)
        await client.aclose()


def test_the_deploy_kit_matches_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """`.env.example` names every setting and loads as it is; the image installs through `deploy/install.sh`
    and copies every package the distribution ships."""
    import re

    from threadkeeper.settings import Settings

    root = Path(__file__).resolve().parents[1]
    example = (root / ".env.example").read_text()
    named = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.M))
    assert {field.upper() for field in Settings.model_fields} <= named
    for field in Settings.model_fields:
        monkeypatch.delenv(field.upper(), raising=False)
    loaded = Settings(_env_file=str(root / ".env.example"))  # type: ignore[call-arg]
    assert loaded.ai_model == "offline" and loaded.redis_url is None and not loaded.slack_configured
    dockerfile = (root / "Dockerfile").read_text()
    assert "deploy/install.sh" in dockerfile and "USER threadkeeper" in dockerfile
    folders = sorted(p.name for p in (root / "threadkeeper").iterdir() if p.is_symlink())
    assert folders == ["bot", "evals", "persistence", "services"], folders
    for folder in folders:
        assert f"COPY {folder} ./{folder}" in dockerfile, folder


async def test_forget_deletes_a_conversation_only_when_told_to(redis_client, prefix: str) -> None:
    env = {"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix}
    chat = cli("console", "--conversation", "console:forget-me", stdin="my card ends in 4242\n/quit\n", env=env)
    assert chat.returncode == 0, chat.stderr
    cli("console", "--conversation", "console:keep-me", stdin="keep this\n/quit\n", env=env)
    asked = cli("forget", "console:forget-me", env=env)
    assert asked.returncode == 1 and "would delete" in asked.stdout and "--yes" in asked.stdout
    assert cli("history", "console:forget-me", env=env).returncode == 0, "nothing deleted without --yes"
    done = cli("forget", "console:forget-me", "--yes", env=env)
    assert done.returncode == 0 and "deleted" in done.stdout, done.stderr
    gone = cli("history", "console:forget-me", env=env)
    assert gone.returncode != 0 and "no conversation" in gone.stderr
    assert [k async for k in redis_client.scan_iter(match=f"{prefix}:{{console:forget-me}}*")] == []
    assert cli("history", "console:keep-me", env=env).returncode == 0
    again = cli("forget", "console:forget-me", "--yes", env=env)
    assert again.returncode == 2 and "no conversation" in again.stderr


def test_a_bad_setting_is_named_without_its_secret() -> None:
    result = cli("history", "x", env={"REDIS_URL": "http://u:hunter2pw@cache:6379"})
    assert result.returncode == 2 and "REDIS_URL" in result.stderr and "hunter2pw" not in result.stderr


def test_every_budget_limit_follows_the_window_and_the_model() -> None:
    from threadkeeper.services import ContextBudget

    small, mid, large = (ContextBudget.derive(w, fixed_prompt_tokens=500) for w in (4_096, 32_000, 200_000))
    assert (small.output_reserve_tokens, mid.output_reserve_tokens, large.output_reserve_tokens) == (409, 3_200, 8_192)
    assert ContextBudget.derive(32_000, fixed_prompt_tokens=500, max_output_tokens=1_000).output_reserve_tokens == 1_000
    assert mid.usable_tokens == 32_000 - 3_200 - 500
    assert (mid.trigger_tokens, mid.target_tokens) == (int(mid.usable_tokens * 0.8), int(mid.usable_tokens * 0.55))


async def test_the_summarizer_is_given_chunks_its_own_window_holds() -> None:
    from fakes import Step, scripted

    from threadkeeper.persistence import Message, TextPart
    from threadkeeper.services import ModelClient, Tokenizer
    from threadkeeper.services.handoff import Summarizer

    model = scripted("scripted-chunks")
    model.default = Step(text="- [m0] The rollout is reviewed.")
    lines = [Message(id=f"m{i}", role="user", author="ben", tokens=60, created_at=1_700_000_000.0 + i,
                     parts=[TextPart(text=f"update {i}: the rollout of service-{i} was reviewed with its owner, "
                                          "dashboards, alerts and runbooks checked one by one")]) for i in range(400)]
    calls = {}
    for window in (4_096, 16_384, 128_000):
        before = len(model.requests)
        summarizer = Summarizer(ModelClient("scripted-chunks/x", attempts=1), Tokenizer("gpt-4o"), window_tokens=window)
        await summarizer.handoff_narrative([], lines, 400)
        calls[window] = len(model.requests) - before
        for request in model.requests[before:]:
            sent = sum(Tokenizer("gpt-4o").count(m["content"]) for m in request["messages"])
            assert sent <= window // 2 + 1_000, (window, sent)
    assert calls[4_096] > calls[16_384] > calls[128_000] == 1, calls


async def test_dead_letters_are_listed_with_why_and_queued_again_by_the_command(redis_client, prefix: str) -> None:
    from threadkeeper.persistence import Inbox, InboxItem, Message, TextPart

    env = {"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix}
    inbox = Inbox(redis_client, prefix=prefix)
    cid = "slack:T1:C9:1700009000.000100"
    readable = InboxItem(message=Message(id="1700009000.000200", role="user", parts=[TextPart(text="is it done?")],
                                         author="U1", tokens=4)).model_dump_json()
    await redis_client.rpush(inbox.keys(cid).dead, '{"kind": "reaction_added"}', readable)
    await redis_client.zadd(inbox.dead_key, {cid: 1.0})
    assert cli("dead-letters", "list", env=env).stdout.splitlines()[0] == f"{cid}: 2 dead letters"
    listed = json.loads(cli("dead-letters", "list", "--json", env=env).stdout)
    assert [i["unreadable"] for i in listed[0]["items"]] == [
        "kind: Input should be 'message', 'edit', 'delete', 'pin' or 'unpin'", None]
    refused = cli("dead-letters", "retry", env=env)
    assert refused.returncode == 2 and "--all" in refused.stderr
    retried = cli("dead-letters", "retry", cid, env=env)
    assert retried.returncode == 3 and "1 queued again, 1 still unreadable" in retried.stdout, retried.stdout
    assert await inbox.dead_letters(cid) == ['{"kind": "reaction_added"}']
    assert [i.message.text for i in await inbox.peek(cid) if i.message] == ["is it done?"]
    assert await inbox.pending_conversations() == [cid], "owed work: a worker's sweep answers it"
    assert cli("dead-letters", "retry", "--all", env=env).returncode == 3
    assert len(await inbox.peek(cid)) == 1, "queued once"


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4"])
def test_a_long_text_is_counted_as_its_encoder_counts_it_whole(model: str) -> None:
    """A text of many lines is counted from its lines' kept counts: the sum is the whole text's count, also where a
    line break does not end a piece (before an empty line, a line opening with white space or with ``//``)."""
    from random import Random

    from threadkeeper.services import Tokenizer

    tokenizer = Tokenizer(model)
    assert tokenizer.encoder is not None
    rng = Random(5)
    words = ["done.", "see", "a:", "x)", "ok", "12", '"', "//x", "/usr/bin", " one", "  two", "\tTab", "\r", "\u00a0nb",
             "😀", "[#4] Ana:", "2024-01-03:", "café", "it's", "...", "https://example.com/a"]
    for _ in range(200):
        lines = ["".join(rng.choice(words) + rng.choice(["", " "]) for _ in range(rng.randint(0, 40)))
                 for _ in range(rng.randint(2, 40))]
        text = "\n".join(lines)
        whole = len(tokenizer.encoder.encode(text, disallowed_special=()))
        assert tokenizer.count(text) == whole
        assert tokenizer.count(text) == whole  # from the counts kept
    for joined in ("done.\n//x " * 60, "see\n\n" * 200, "see\n\r\nz" * 100):
        assert tokenizer.count(joined) == len(tokenizer.encoder.encode(joined, disallowed_special=()))


def test_a_tokenizer_counts_as_tiktoken_does_without_keeping_the_python_copy_of_its_ranks() -> None:
    """The encoding a Tokenizer holds no longer keeps tiktoken's Python dict of merge ranks (29 MB for o200k), and
    counts exactly what an encoding built from the full ranks counts."""
    import tiktoken
    from tiktoken_ext.openai_public import o200k_base

    from threadkeeper.services import Tokenizer

    tokenizer = Tokenizer("gpt-4o")
    assert tokenizer.name == "o200k_base"
    assert getattr(tokenizer.encoder, "_mergeable_ranks") == {}
    assert tiktoken.get_encoding("o200k_base") is tokenizer.encoder  # the process's one copy is the lean one
    full = tiktoken.Encoding(**o200k_base())
    assert len(getattr(full, "_mergeable_ranks")) > 199_000
    texts = ["", "hello world", "the password for staging is Xq9-vB7mKt2w, and the deploy key is in 1Password",
             "Größenänderung später, ¿vale? ça marche — 東京で会いましょう 🎉", "def f(x):\n    return x ** 2\n" * 20,
             "<|endoftext|> is counted as text", " ".join(str(n) for n in range(300))]
    for text in texts:
        assert tokenizer.count(text) == len(full.encode(text, disallowed_special=())), text
    assert tokenizer.encoder is not None
    assert full.decode(tokenizer.encoder.encode(texts[2])) == texts[2]


@pytest.mark.parametrize("command", ["console", "run"])
def test_the_console_loads_its_tokenizer_before_the_rest_of_the_stack(command: str, tmp_path: Path) -> None:
    """While tiktoken loads o200k it holds the table twice (76 MB more than before, 48 MB kept once it is built), so
    the console loads it first, when the process holds little else: the application, the redaction rules, the log
    formatter (structlog, with rich) and the Redis client are imported after it, and numpy (the search indexes'
    arrays) not at all for a first turn, which searches nothing."""
    probe = ("import sys\n"
             "from threadkeeper.services.models import tokens\n"
             "seen = []\n"
             "load = tokens._encoder_for\n"
             "def watched(model):\n"
             "    seen.append(sorted(m for m in ('threadkeeper.services.app', 'numpy', 'detect_secrets', 'structlog',\n"
             "                                   'redis')\n"
             "                       if m in sys.modules))\n"
             "    return load(model)\n"
             "tokens._encoder_for = watched\n"
             "from threadkeeper.cli import main\n"
             f"code = main([{command!r}])\n"
             "print('exit', code, 'first load with', seen[0], 'numpy', 'numpy' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", probe], input="hello\n", capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, env=clean_env())
    assert result.returncode == 0, result.stderr
    assert "threadkeeper> Offline model here" in result.stdout, result.stdout
    assert result.stdout.splitlines()[-1] == "exit 0 first load with [] numpy False", result.stdout


def test_each_package_face_name_is_imported_when_first_asked_for() -> None:
    """``threadkeeper.persistence``, ``.services`` and ``.services.models`` import a name's module when the name is
    first used: the names they export are those they declare, each the object its module defines (never the module
    of the same name), and importing the tokenizer imports neither the application, numpy nor the Redis client."""
    import ast
    import importlib

    for package in ("threadkeeper.persistence", "threadkeeper.services", "threadkeeper.services.models"):
        face = importlib.import_module(package)
        assert face.__file__ is not None
        declared = set()
        for node in ast.walk(ast.parse(Path(face.__file__).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                declared |= {alias.name for alias in node.names}
        assert declared == set(face.__all__), package
        for name in face.__all__:
            value = getattr(face, name)
            assert not isinstance(value, type(importlib)), f"{package}.{name} is a module"
    probe = ("import sys\n"
             "from threadkeeper.services.models import tokenizer_for\n"
             "assert tokenizer_for('offline').count('hello world') == 2\n"
             "print(sorted(m for m in ('threadkeeper.services.app', 'threadkeeper.services.models.llm', 'numpy',\n"
             "                         'detect_secrets', 'wordfreq', 'redis') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=_NO_DOTENV, timeout=120,
                            env=clean_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
