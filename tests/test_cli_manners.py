"""What a person meets at the command line: help for every argument, ``--version``, output piped into a reader
that stops early, and line editing in the console on a terminal."""

from __future__ import annotations

import argparse
import os
import pty
import select
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import REDIS_URL, drop_prefix, real_redis
from test_budget_and_cli import _NO_DOTENV, clean_env, cli

from threadkeeper.cli import build_parser
from threadkeeper.embedded import EmbeddedRedis
from threadkeeper.persistence import CheckpointStore


def test_every_command_and_argument_says_what_it_is_for() -> None:
    missing = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}")
            elif not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    walk(build_parser(), "threadkeeper")
    assert missing == []


def test_version_names_the_installed_distribution() -> None:
    result = cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"threadkeeper {version('threadkeeper-slack')}"


async def test_output_piped_into_a_reader_that_stops_early_ends_quietly(prefix: str) -> None:
    client = await real_redis()
    store = CheckpointStore(client, prefix=prefix)
    conversation = "console:long-lineage"
    try:
        head = None
        for _ in range(400):  # a lineage whose JSON is far larger than a pipe holds
            cp = await store.start_turn(conversation)
            await store.commit(conversation, cp.id, expected_head=head)
            head = cp.id
        process = subprocess.Popen([sys.executable, "-m", "threadkeeper", "history", conversation, "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=_NO_DOTENV,
                                   env={**clean_env(), "REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix})
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().strip() == b"["
        process.stdout.close()  # what `| head -1` does
        errors = process.stderr.read().decode()
        assert process.wait(timeout=120) == 141
        assert "Traceback" not in errors and "BrokenPipe" not in errors, errors
    finally:
        await drop_prefix(client, prefix)
        await client.aclose()


def _read_until(fd: int, wanted: bytes, timeout: float = 60.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"waited for {wanted!r}; the terminal showed {seen[-600:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the terminal closed
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_the_console_on_a_terminal_edits_lines(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "threadkeeper", "console"], stdin=follower, stdout=follower,
                               stderr=subprocess.PIPE, cwd=tmp_path, close_fds=True,
                               env={**clean_env(), "THREADKEEPER_DATA_DIR": str(tmp_path / "data"), "TERM": "xterm"})
    os.close(follower)
    try:
        _read_until(leader, b"you> ")
        os.write(leader, b"trak ABC-123" + b"\x1b[D" * 9 + b"c\r")  # the left arrow, nine times, then a fix
        shown = _read_until(leader, b"you> ")
        assert "“track ABC-123”".encode() in shown, shown[-600:]
        os.write(leader, b"/quit\r")
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
        left = EmbeddedRedis(tmp_path / "data")  # what a killed console left running
        if left.answering():
            left.start()
            left.stop()


def test_a_replayed_message_time_may_be_written_as_slack_does_or_as_a_number() -> None:
    from threadkeeper.services import parse_thread

    thread = parse_thread('{"messages": [{"id": "1", "author": "a", "text": "x", "ts": 1700000000.25},'
                          ' {"id": "2", "author": "b", "text": "y", "ts": "1700000060.000100"}]}')
    assert [m.created_at for m in thread.messages] == [1700000000.25, 1700000060.0001]


_AS_IN_A_TERMINAL = ("import signal, sys\n"
                     "signal.signal(signal.SIGINT, signal.default_int_handler)\n")
"""A console started as a terminal starts its foreground process: Ctrl-C not ignored. A test runner started in the
background by a shell without job control ignores SIGINT, and its children would inherit that (a process that
inherits an ignored SIGINT keeps ignoring it, as `nohup` and background jobs rely on)."""


def test_ctrl_c_ends_the_console_when_another_thread_receives_it(tmp_path: Path) -> None:
    """The kernel may hand a process's SIGINT to any of its threads: here the one waiting for a line. Python runs the
    handler in the main thread, which sleeps in the event loop with nothing else to wake it; the console ends at once
    all the same (exit 130)."""
    probe = (_AS_IN_A_TERMINAL + "import threading, time\n"
             "from threadkeeper.cli import main\n"
             "def aim():\n"
             "    while True:\n"
             "        reader = next((t for t in threading.enumerate() if t.name == 'console-input'), None)\n"
             "        if reader is not None and reader.ident is not None:\n"
             "            break\n"
             "        time.sleep(0.05)\n"
             "    time.sleep(0.5)  # it waits for a line\n"
             "    signal.pthread_kill(reader.ident, signal.SIGINT)\n"
             "threading.Thread(target=aim, daemon=True).start()\n"
             "sys.exit(main(['console']))\n")
    process = subprocess.Popen([sys.executable, "-c", probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=tmp_path,
                               env={**clean_env(), "THREADKEEPER_DATA_DIR": str(tmp_path / "data")})
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdin is not None
        process.stdin.close()
        left = EmbeddedRedis(tmp_path / "data")
        if left.answering():
            left.start()
            left.stop()
    assert code == 130, "Ctrl-C received by the line reader's thread ends the console"


def test_ctrl_c_ends_the_console_at_once_and_leaves_the_terminal_and_the_store_tidy(tmp_path: Path) -> None:
    import signal
    import termios

    leader, follower = pty.openpty()
    modes = termios.tcgetattr(follower)
    data = tmp_path / "data"
    console = _AS_IN_A_TERMINAL + "from threadkeeper.cli import main\nsys.exit(main(['console']))\n"
    process = subprocess.Popen([sys.executable, "-c", console], stdin=follower, stdout=follower,
                               stderr=subprocess.PIPE, cwd=tmp_path, close_fds=True,
                               env={**clean_env(), "THREADKEEPER_DATA_DIR": str(data), "TERM": "xterm",
                                    "PYTHONFAULTHANDLER": "1"})
    # what it writes to stderr is read as it comes (a full pipe would stop the console, not Ctrl-C)
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read() if process.stderr else b""),
                              daemon=True)
    reader.start()
    try:
        _read_until(leader, b"you> ")  # waiting for a line, with line editing
        assert EmbeddedRedis(data).answering()
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # the fault handler writes every thread's stack to stderr
            process.wait(timeout=30)
            reader.join(timeout=10)
            pytest.fail("Ctrl-C did not end the console within 60 s; what it wrote, its threads' stacks last:\n"
                        + b"".join(errors).decode(errors="replace")[-8000:])
        assert code == 130, "Ctrl-C ends the console; it does not wait for a line"
        assert termios.tcgetattr(follower) == modes, "the terminal is as it was"
        assert not EmbeddedRedis(data).answering(), "and the embedded Redis was stopped on the way out"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
        os.close(follower)
        left = EmbeddedRedis(data)
        if left.answering():
            left.start()
            left.stop()
