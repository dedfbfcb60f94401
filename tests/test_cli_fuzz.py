"""The command line given bad arguments, generated: every subcommand with ids no conversation can have (NUL, newlines,
``../``, braces, empty, huge, any unicode), numbers out of range, a ``REDIS_URL`` it cannot use, unknown flags. Each
call ends with a non-zero status and one error line, never a traceback, and the store is left as it was."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import REDIS_URL, real_redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_budget_and_cli import cli

from threadkeeper.cli import main

pytestmark = pytest.mark.redis

SEEDED = "console:fuzz-seed"

_BAD_CHARS = ["\x00", "\n", "\r", "{", "}", "\x07", "\u2028"]
_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)


@st.composite
def _bad_id(draw: st.DrawFn) -> str:
    """An id no conversation can have."""
    kind = draw(st.sampled_from(["char", "slack", "empty", "huge"]))
    if kind == "char":
        return draw(_text) + draw(st.sampled_from(_BAD_CHARS)) + draw(_text)
    if kind == "slack":
        good = ["T1", "C1", "1700000000.000100"]
        where = draw(st.integers(0, 2))
        good[where] = draw(st.sampled_from(["../C1", "", "C 1", "é", "x" * 65, "C1/..", ".C1", "C1\x00"]))
        return "slack:" + ":".join(good)
    if kind == "empty":
        return ""
    return "x" * draw(st.sampled_from([513, 100_000]))


_bad_slack_part = st.sampled_from(["", "../T1", "T 1", "T\x001", "é", "x" * 65, "T1\n", ".T1", "-T"])
_bad_count = st.sampled_from(["0", "-1", str(10**30), "1e3", "abc", "", "1.5", "nan"])
_bad_url = st.sampled_from(["redis://127.0.0.1:6379/99", "redis://127.0.0.1:6379/abc", "redis://127.0.0.1:6379/2/3",
                            "redis://127.0.0.1:notaport/0", "redis://[::1", "redis://127.0.0.1:65536/0",
                            "redis://127.0.0.1:0/5", "redis://127.0.0.1:6379/-1", "redis://127.0.0.1:6379/" + "9" * 30,
                            "http://127.0.0.1:6379/5", "unix:///nonexistent/redis.sock?db=x"])


def _calls(thread_file: str) -> st.SearchStrategy[tuple[list[str], dict[str, str]]]:
    """(argv, environment added) of a bad call of some subcommand."""
    bad_id, team, count = _bad_id(), _bad_slack_part, _bad_count
    flag = st.sampled_from(["--bogus", "--json=x", "-z", "--limit"])
    argvs = st.one_of(
        st.tuples(st.just("history"), bad_id, st.sampled_from([[], ["--json"], ["--tree"]])).map(
            lambda t: [t[0], t[1], *t[2]]),
        bad_id.map(lambda i: ["context", i, "--message", "what is next?"]),
        count.map(lambda n: ["context", SEEDED, "--context-window", n]),
        st.just(["context", SEEDED, "--messages-file", "/nonexistent/lines.jsonl"]),
        count.map(lambda n: ["conversations", "--limit", n]),
        st.tuples(bad_id, st.sampled_from([[], ["--dry-run"], ["--json"]])).map(lambda t: ["compact", t[0], *t[1]]),
        st.just(["compact", SEEDED, "--reason", "whim"]),
        st.tuples(bad_id, st.booleans()).map(lambda t: ["forget", t[0], *(["--yes"] if t[1] else [])]),
        st.tuples(team, st.booleans()).map(lambda t: ["forget", t[0], "--team", *(["--yes"] if t[1] else [])]),
        st.tuples(st.sampled_from(["list", "retry"]), bad_id).map(lambda t: ["dead-letters", *t]),
        st.just(["dead-letters", "retry"]),
        team.map(lambda t: ["memory", "list", "--team", t]),
        team.map(lambda t: ["memory", "list", "--channel", t]),
        team.map(lambda t: ["memory", "forget", "--all", "--team", t]),
        st.tuples(st.sampled_from(["on", "off"]), team).map(lambda t: ["memory", t[0], "--team", t[1]]),
        team.map(lambda t: ["memory", "on", "--team", "T1", "--channel", t]),
        bad_id.map(lambda i: ["memory", "extract", i]),
        team.map(lambda t: ["memory", "consolidate", "--team", t]),
        st.just(["memory", "forget"]),
        bad_id.map(lambda i: ["replay", thread_file, "--conversation", i]),
        count.map(lambda n: ["replay", thread_file, "--turn-every", n]),
        st.sampled_from([["replay", "/nonexistent/thread.json"], ["replay", "/"]]),
        st.sampled_from([["serve", "--http"], ["serve", "--socket"], ["serve"], ["serve", "--http", "--port", "70000"]]),
        st.sampled_from(["", "ftp://example.com", "example.com", "\x00"]).map(lambda u: ["manifest", "--http", u]),
        count.map(lambda n: ["eval", "continuity", "--threads", n]),
        st.integers(-5, 99).map(lambda n: ["eval", "continuity", "--threads", "1", "--messages", str(n)]),
        st.sampled_from(["0", "abc", "512,1024", ""]).map(lambda w: ["eval", "continuity", "--windows", w]),
        st.just(["eval", "memory", "--benchmark", "realtalk", "--path", "/nonexistent/realtalk"]),
        st.just(["bench", "--plot", "out.bogus"]),
        st.tuples(st.sampled_from(["history", "conversations", "compact", "memory", "eval", "manifest", "bogus"]),
                  flag).map(list),
        st.just([]),
    )
    on_redis = st.tuples(st.sampled_from([["history", SEEDED], ["conversations"], ["memory", "list"],
                                          ["forget", SEEDED, "--yes"]]), _bad_url).map(
        lambda t: (t[0], {"REDIS_URL": t[1]}))
    return st.one_of(argvs.map(lambda a: (a, {})), on_redis)


def _snapshot(prefix: str) -> dict[bytes, bytes | None]:
    with redis.Redis.from_url(REDIS_URL) as client:
        return {key: client.dump(key) for key in client.scan_iter(match=f"{prefix}*", count=1000)}


@contextlib.contextmanager
def _in_process(env: dict[str, str]) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """``main`` as a fresh process would run it: this environment, and what it changes of the process (the root
    logger's handlers, the collector's settings) put back afterwards."""
    root = logging.getLogger()
    handlers, level, threshold = root.handlers[:], root.level, gc.get_threshold()
    saved = dict(os.environ)
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        os.environ.clear()
        os.environ.update(saved)
        root.handlers[:] = handlers
        root.setLevel(level)
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    with _in_process(env) as (_, err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse's own refusals
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, err.getvalue()


def _one_error_line(stderr: str) -> bool:
    return sum(1 for line in stderr.splitlines() if line.startswith("threadkeeper") and ": error: " in line) == 1


@pytest.fixture
def store(prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A store under ``prefix`` holding one replayed conversation; the working folder an empty one (no ``.env``)."""
    import asyncio

    asyncio.run(_reachable())
    for name in [n for n in os.environ if n.startswith(("SLACK_", "AI_", "THREADKEEPER_", "REDIS"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("REDIS_URL", REDIS_URL)
    monkeypatch.setenv("THREADKEEPER_KEY_PREFIX", prefix)
    monkeypatch.setenv("THREADKEEPER_LOG_LEVEL", "WARNING")
    monkeypatch.chdir(tmp_path)
    thread = tmp_path / "thread.json"
    thread.write_text(json.dumps({"messages": [{"id": f"m{i}", "author": "U1", "text": f"the deploy moved to day {i}"}
                                               for i in range(6)]}))
    code, err = _run(["replay", str(thread), "--conversation", SEEDED], {})
    assert code == 0, err
    try:
        yield prefix, str(thread)
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                client.delete(key)


async def _reachable() -> None:
    await (await real_redis()).aclose()


def test_bad_arguments_to_any_command_end_in_one_error_line_and_leave_the_store_as_it_was(store) -> None:
    prefix, thread_file = store
    before = _snapshot(prefix)
    assert before, "the replayed conversation is stored"

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(call=_calls(thread_file))
    @example(call=(["eval", "continuity", "--threads", "1", "--messages", "5"], {}))
    @example(call=(["dead-letters", "list", "slack:T1:C1:1700000000.000100\x00"], {}))
    @example(call=(["manifest", "--http", ""], {}))
    @example(call=(["serve", "--socket", "--port", "70000"], {}))
    @example(call=(["forget", "../T1", "--team", "--yes"], {}))
    @example(call=(["memory", "on", "--team", "T1", "--channel", "C1/.."], {}))
    @example(call=(["conversations"], {"REDIS_URL": "redis://127.0.0.1:6379/2/3"}))
    def bad_call(call: tuple[list[str], dict[str, str]]) -> None:
        argv, env = call
        code, stderr = _run(argv, env)
        assert code != 0, (argv, env, stderr)
        assert "Traceback" not in stderr, (argv, env, stderr)
        assert _one_error_line(stderr), (argv, env, stderr)
        assert _snapshot(prefix) == before, (argv, env)

    bad_call()


@pytest.mark.parametrize(("argv", "env"), [
    (["history", "slack:T1:../C1:1700000000.000100"], {}),
    (["conversations", "--limit", str(10**30)], {}),
    (["conversations"], {"REDIS_URL": "redis://127.0.0.1:6379/99"}),
    (["history", SEEDED], {"REDIS_URL": "redis://127.0.0.1:notaport/5"}),
    (["memory", "list", "--team", "../T1"], {}),
], ids=["dot-dot channel", "huge limit", "database out of range", "port not a number", "dot-dot team"])
def test_a_bad_call_in_a_process_of_its_own_says_one_line_and_no_traceback(store, argv: list[str],
                                                                         env: dict[str, str]) -> None:
    prefix, _ = store
    before = _snapshot(prefix)
    done = cli(*argv, env={"REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix, **env}, timeout=120)
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and _one_error_line(done.stderr), done.stderr
    assert _snapshot(prefix) == before
