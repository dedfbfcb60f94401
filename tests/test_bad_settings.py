"""Every bad setting a newcomer or an operator can make stops the command with one line that names the variable and
says how to fix it: no traceback (that is for ``THREADKEEPER_LOG_LEVEL=DEBUG``), a non-zero exit, within seconds.
Each case runs ``python -m threadkeeper`` against servers on loopback that the test starts: a model server that
refuses the key or does not know the model, a Redis that wants a password, a TCP listener that never speaks TLS."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from fakes import free_port
from model_server import ModelServer, Reply
from prestarted import run, spawn
from test_budget_and_cli import clean_env

PASSWORD = "correct-horse-battery"
WRONG = "not-the-password"
SECONDS = 15.0
"""Far below what a wrong setting used to cost before failing (21 s for TLS against a plain server), far above what
a start-up without a model takes on a busy machine."""
MODEL_SECONDS = 45.0
"""A row that names a model asks litellm or the model server before it fails (seconds under load): it is bounded
only so that a retry loop would show."""


@dataclass
class Loopback:
    """What the cases point their settings at."""

    redis_pw: int
    """A Redis that requires ``PASSWORD``."""
    plain: int
    """A TCP listener that accepts connections and never answers (a server that does not speak TLS)."""
    closed: int
    """A port nothing listens on."""
    model: str = ""
    """The loopback model server's URL (set per test)."""
    extra: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def loopback() -> Iterator[Loopback]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("needs redis-server on the PATH")
    port = free_port()
    process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--requirepass", PASSWORD,
                                "--save", "", "--appendonly", "no", "--loglevel", "warning"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        deadline = time.monotonic() + 20
        client = redis.Redis(port=port, password=PASSWORD, socket_connect_timeout=1)
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the password-protected redis-server did not start"
                time.sleep(0.05)
        client.close()
        yield Loopback(redis_pw=port, plain=listener.getsockname()[1], closed=free_port())
    finally:
        listener.close()
        process.terminate()  # the redis-server this fixture started, by its PID
        process.wait(timeout=20)


MODEL = {"AI_MODEL": "openai/test-model", "OPENAI_BASE_URL": "{model}/v1", "OPENAI_API_KEY": "sk-wrong",
         "AI_MODEL_CONTEXT_WINDOW_TOKENS": "16000"}
NOT_FOUND = {"error": {"message": "The model `test-model` does not exist", "type": "invalid_request_error",
                       "code": "model_not_found"}}
BAD_KEY = {"error": {"message": "Incorrect API key provided: sk-wrong", "type": "invalid_request_error",
                     "code": "invalid_api_key"}}


@dataclass(frozen=True)
class Case:
    command: tuple[str, ...]
    env: dict[str, str]
    names: str
    """The variable the line must name."""
    says: str
    """Words of the line that say what is wrong."""
    reply: Reply | None = None
    """What the model server answers (None: no model is called)."""


CASES = {
    "model-key-refused": Case(("console",), MODEL, "OPENAI_API_KEY", "refused the key",
                              Reply(status=401, error=BAD_KEY)),
    "model-unknown-to-the-provider": Case(("console",), MODEL, "AI_MODEL", "does not serve this model",
                                          Reply(status=404, error=NOT_FOUND)),
    "model-unknown-to-litellm": Case(("console",), {"AI_MODEL": "no-such-model"}, "AI_MODEL",
                                     "not a model litellm can call"),
    "model-unreachable": Case(("console",), {**MODEL, "OPENAI_BASE_URL": "http://127.0.0.1:{closed}/v1"},
                              "OPENAI_BASE_URL", "does not answer"),
    "embedding-model-unknown-to-litellm": Case(("console",), {"AI_EMBEDDING_MODEL": "no-such-embedder"},
                                               "AI_EMBEDDING_MODEL", "not a model litellm can call"),
    "embedding-server-unreachable": Case(("console",), {"AI_EMBEDDING_MODEL": "ollama/nomic-embed-text",
                                                        "OLLAMA_API_BASE": "http://127.0.0.1:{closed}"},
                                         "OLLAMA_API_BASE", "does not answer"),
    "redis-wrong-password": Case(("conversations",), {"REDIS_URL": f"redis://:{WRONG}@127.0.0.1:{{redis_pw}}/0"},
                                 "REDIS_URL", "refused the password"),
    "redis-missing-password": Case(("conversations",), {"REDIS_URL": "redis://127.0.0.1:{redis_pw}/0"}, "REDIS_URL",
                                   "requires a password"),
    "redis-unreachable": Case(("history", "console:local"), {"REDIS_URL": "redis://127.0.0.1:{closed}/0"}, "REDIS_URL",
                              "cannot reach"),
    "redis-no-such-database": Case(("conversations",), {"REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:{{redis_pw}}/99"},
                                   "REDIS_URL", "has no database 99"),
    "redis-tls-against-a-plain-server": Case(("console",), {"REDIS_URL": "rediss://127.0.0.1:{plain}/0"}, "REDIS_URL",
                                             "TLS handshake"),
    "slack-bot-token-without-app-token-or-secret": Case(("run",), {"SLACK_BOT_TOKEN": "xoxb-1-2-abc"},
                                                        "SLACK_APP_TOKEN", "half configured"),
    "slack-app-token-without-bot-token": Case(("run",), {"SLACK_APP_TOKEN": "xapp-1-abc"}, "SLACK_BOT_TOKEN",
                                              "half configured"),
}


@pytest.mark.parametrize("name", list(CASES))
async def test_a_bad_setting_stops_with_one_line_naming_it(name: str, loopback: Loopback, tmp_path: Path,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    case = CASES[name]
    server = await ModelServer(default=case.reply or Reply()).start()
    try:
        places = {"model": server.url, "redis_pw": loopback.redis_pw, "plain": loopback.plain,
                  "closed": loopback.closed}
        env = {**clean_env(), **{k: v.format(**places) for k, v in case.env.items()}}
        streams = tmp_path_factory.mktemp("streams")
        out, err = streams / "stdout", streams / "stderr"
        started = time.monotonic()
        # ``threadkeeper`` forked from an interpreter that has imported the stack (tests/prestarted.py)
        process = await asyncio.to_thread(spawn, *case.command, cwd=tmp_path, env=env,
                                          input=b"hello, can you hear me?\n", stdout=out, stderr=err)
        await asyncio.wait_for(process.wait(), timeout=120)
        seconds = time.monotonic() - started
    finally:
        await server.stop()
    stdout, stderr = out.read_text(), err.read_text()
    assert process.returncode not in (0, None), (stdout, stderr)
    assert "Traceback" not in stderr and "Traceback" not in stdout, stderr
    said = [line for line in stderr.splitlines() if line.startswith("threadkeeper: error: ")]
    assert len(said) == 1 and stderr.rstrip().splitlines()[-1] == said[0], stderr
    assert case.names in said[0] and case.says in said[0], said[0]
    assert WRONG not in stderr and PASSWORD not in stderr, "a password never reaches a message"
    assert "try again" not in (stdout + stderr).lower(), "asking again cannot fix a setting"
    names_a_model = case.reply is not None or any(k in case.env for k in ("AI_MODEL", "AI_EMBEDDING_MODEL"))
    assert seconds < (MODEL_SECONDS if names_a_model else SECONDS), f"took {seconds:.1f} s"
    if case.reply is not None:
        assert len(server.requests) == 1, "a refusal for good is not retried"
    if name.startswith("slack-"):
        assert "threadkeeper console" not in stdout, "no silent fallback to the console"


def test_the_traceback_of_a_bad_setting_is_shown_at_debug_only(loopback: Loopback, tmp_path: Path) -> None:
    env = {**clean_env(), "REDIS_URL": f"redis://:{WRONG}@127.0.0.1:{loopback.redis_pw}/0"}
    quiet, debug = (run("conversations", cwd=tmp_path, timeout=120, env={**env, **extra})
                    for extra in ({}, {"THREADKEEPER_LOG_LEVEL": "DEBUG"}))
    for result in (quiet, debug):
        assert result.returncode == 2 and result.stderr.rstrip().splitlines()[-1].startswith("threadkeeper: error: ")
    assert "Traceback" not in quiet.stderr and "Traceback" in debug.stderr and "AuthenticationError" in debug.stderr


@pytest.mark.parametrize("command", [("conversations",), ("history", "console:local"), ("context", "console:local"),
                                     ("forget", "console:local"), ("dead-letters", "list"), ("memory", "list")])
def test_a_command_that_only_reads_makes_no_store_where_it_runs(command: tuple[str, ...], tmp_path: Path) -> None:
    result = run(*command, cwd=tmp_path, env=clean_env(), timeout=120)
    assert list(tmp_path.iterdir()) == [], "nothing is created in the folder a read-only command runs from"
    said = (result.stdout if command == ("conversations",) else result.stderr).strip()
    assert "no conversations are stored in" in said and "THREADKEEPER_DATA_DIR" in said, said
    assert len(said.splitlines()) == 1 and "Traceback" not in result.stderr
    assert result.returncode == (0 if command == ("conversations",) else 2)
