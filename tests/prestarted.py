"""``python -m threadkeeper`` processes forked from an interpreter that has already imported the stack.

A fresh ``python -m threadkeeper serve`` spends seconds of CPU importing litellm, the OpenAI SDK and the bot before
it does anything: the tests that start dozens of such processes (worker fleets, bad settings) spend most of their CPU
there. Here one interpreter per test process imports that stack once (nothing else: no event loop, no connection, no
thread) and forks a child for each command. The child takes the command's environment, working folder and standard
streams, then runs ``python -m threadkeeper``'s own entry point, so it reads its settings, configures its logging,
connects and serves as a fresh process does; it is a real process of its own (a pid to signal, ``kill -9``, an
exit status). What it skips is the import, and with it what the import takes from the environment: a test of what
a command imports, or of how long a cold start takes, starts ``python -m threadkeeper`` itself.

The interpreter is started by :func:`spawn` on first use and ends with the test process (its stdin closes; children
still running then are killed)."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


class Forked:
    """A process forked by the prestarted interpreter: the parts of ``asyncio.subprocess.Process`` the tests use."""

    def __init__(self, server: _Server, pid: int) -> None:
        self._server, self.pid = server, pid

    @property
    def returncode(self) -> int | None:
        return self._server.exits.get(self.pid)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        """Its exit status (negative: the signal that ended it), once it has exited."""
        while (code := self.returncode) is None:
            await asyncio.sleep(0.02)
        return code

    def wait_sync(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (code := self.returncode) is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["threadkeeper"], timeout)
            time.sleep(0.02)
        return code


class _Server:
    def __init__(self) -> None:
        # the interpreter imports what it preloads with the environment a command runs with, less the settings
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLACK_", "AI_", "THREADKEEPER_", "REDIS", "OPENAI", "OLLAMA"))}
        env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        self.proc = subprocess.Popen([sys.executable, str(HERE), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=HERE.parent, bufsize=0)
        self.exits: dict[int, int] = {}
        self.lock = threading.Lock()
        self.started: list[int] = []
        self.ready = threading.Condition()
        self.failed: str | None = None
        threading.Thread(target=self._read, daemon=True, name="prestarted-reader").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            said = json.loads(line)
            with self.ready:
                if "started" in said:
                    self.started.append(int(said["started"]))
                elif "exited" in said:
                    self.exits[int(said["exited"])] = int(said["status"])
                self.ready.notify_all()
        with self.ready:
            self.failed = f"the prestarted interpreter ended (exit status {self.proc.wait()})"
            self.ready.notify_all()

    def fork(self, request: dict[str, object]) -> int:
        assert self.proc.stdin is not None
        with self.lock, self.ready:
            if self.failed:
                raise RuntimeError(self.failed)
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            # the interpreter imports the stack before it reads its first request: seconds, minutes under load
            if not self.ready.wait_for(lambda: self.started or self.failed, timeout=300):
                raise RuntimeError("the prestarted interpreter did not fork within 300 s")
            if not self.started:
                raise RuntimeError(self.failed)
            return self.started.pop(0)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_server: _Server | None = None
_server_lock = threading.Lock()


def _the_server() -> _Server:
    global _server
    with _server_lock:
        if _server is None:
            _server = _Server()
            atexit.register(_server.close)
        return _server


def spawn(*args: str, env: Mapping[str, str], cwd: Path | str, input: bytes | None = None,
          stdout: Path | str | None = None, stderr: Path | str | None = None) -> Forked:
    """``python -m threadkeeper *args`` with exactly ``env`` in ``cwd``. Its stdin is a pipe that gives ``input``
    and then ends (``/dev/null`` without it); its stdout and stderr are appended to the files named (``/dev/null``
    where none is)."""
    server = _the_server()
    fifo = None
    if input is not None:
        fifo = Path(tempfile.mkdtemp(prefix="threadkeeper-stdin-")) / "stdin"
        os.mkfifo(fifo)
    pid = server.fork({"argv": list(args), "env": dict(env), "cwd": str(cwd),
                       "stdin": str(fifo or os.devnull), "stdout": str(stdout or os.devnull),
                       "stderr": str(stderr or os.devnull)})
    forked = Forked(server, pid)
    if fifo is not None:
        threading.Thread(target=_feed, args=(forked, fifo, input or b""), daemon=True, name="prestarted-stdin").start()
    return forked


def _feed(process: Forked, fifo: Path, data: bytes) -> None:
    """Writes ``data`` to the child's stdin pipe once it has opened it, then closes it (its end of input)."""
    try:
        while True:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:  # ENXIO: the child has not opened its end yet
                if process.returncode is not None:
                    return
                time.sleep(0.01)
        os.set_blocking(fd, True)
        try:
            _write_all(fd, data)
        except BrokenPipeError:
            pass  # it exited without reading all of it, as a process may
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(fifo.parent, ignore_errors=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def run(*args: str, env: Mapping[str, str], cwd: Path | str, input: str | None = None,
        timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """As ``subprocess.run([python, "-m", "threadkeeper", *args], input=input, capture_output=True, text=True, ...)``
    with a forked process."""
    with tempfile.TemporaryDirectory(prefix="threadkeeper-out-") as out:
        stdout, stderr = Path(out) / "stdout", Path(out) / "stderr"
        process = spawn(*args, env=env, cwd=cwd, input=None if input is None else input.encode(), stdout=stdout,
                        stderr=stderr)
        try:
            code = process.wait_sync(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait_sync(30)
            raise
        return subprocess.CompletedProcess(["threadkeeper", *args], code, _text(stdout), _text(stderr))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


# The interpreter's side (``python tests/prestarted.py --serve``).

def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m threadkeeper`` with the request's environment and streams."""
    import runpy
    import traceback

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code: object = 0
    try:
        written = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        for fd, name, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", written), (2, "stderr", written)):
            opened = os.open(str(request[name]), flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        os.closerange(3, 256)  # the pipes to the test process, and nothing else inherited
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,  # noqa: SIM115
                          buffering=1)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(str(request["cwd"]))
        sys.path[0] = os.getcwd()  # as ``python -m`` puts it, not this file's folder
        sys.argv = ["threadkeeper", *request["argv"]]
        runpy.run_module("threadkeeper", run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # as the interpreter reads it: None 0, a number itself, anything else printed and 1
        code = exc.code
    except BaseException:  # noqa: BLE001  # an uncaught exception: its traceback and status 1, as Python does
        traceback.print_exc()
        code = 1
    try:
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        # what the interpreter does on its way out: wait for the threads that are not daemons, then the exit
        # handlers (logging's flush among them)
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code if isinstance(code, int) else 1)


def _serve() -> None:
    import gc
    import select

    # what a worker, the console and the commands import before their first line of work
    import threadkeeper.bot.server  # noqa: F401
    import threadkeeper.cli  # noqa: F401
    import threadkeeper.root  # noqa: F401
    import threadkeeper.services.models._litellm  # noqa: F401

    assert threading.active_count() == 1, "a thread would not survive the fork"
    gc.freeze()  # the children's collections skip what was imported: its pages stay shared, not copied
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: set[int] = set()
    pending = b""

    def say(what: dict[str, int]) -> None:
        os.write(1, (json.dumps(what) + "\n").encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            say({"exited": pid, "status": os.waitstatus_to_exitcode(status)})

    while True:
        try:
            readable, _, _ = select.select([0, woken], [], [])
        except InterruptedError:
            continue
        if woken in readable:
            while True:
                try:
                    if not os.read(woken, 512):
                        break
                except BlockingIOError:
                    break
            reap()
        if 0 in readable:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    _child(json.loads(line))
                children.add(pid)
                say({"started": pid})
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    _serve()
