"""``threadkeeper bench``: Slack's signed events acknowledged while unsigned requests flood the events endpoint.

The real bot (``threadkeeper serve --http``) runs in a process of its own on a loopback port, against the loopback
fake of the Slack Web API that the tests use (``tests/slack_fake.py``, in the source tree: the row is measured from a
checkout). Several clients post large requests that are not Slack's (half carry no signature, half a wrong one) as fast
as the endpoint takes them, while signed mentions arrive at a steady pace; the figures are the signed events' time to
their acknowledgement during the flood, and the flood's own pace.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import http.client
import importlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

SECRET = "bench-flood-signing-secret"
TESTS = Path(__file__).resolve().parents[1] / "tests"
"""Where the loopback fake of the Slack Web API is (a checkout's tests)."""
NOT_HERE = "signed_ack_p99_s_during_unsigned_flood not measured: the loopback fake of Slack's Web API " \
           f"(tests/slack_fake.py) is in a source checkout, not here ({TESTS})"


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _signed(body: str, secret: str = SECRET) -> dict[str, str]:
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}",
            "Content-Type": "application/json"}


def _flood_body(kb: int) -> bytes:
    """An envelope of about ``kb`` kilobytes that looks like Slack's (an event with many rich-text elements): costly
    to parse, so a server that parses before it checks the signature pays for every one."""
    element = {"type": "text", "text": "lorem ipsum dolor"}
    size = len(json.dumps(element)) + 2
    blocks = [{"type": "rich_text", "elements": [element] * 50}] * max(1, kb * 1024 // (50 * size))
    return json.dumps({"type": "event_callback", "team_id": "T1", "event_id": "EvFlood", "event_time": 1,
                       "event": {"type": "message", "channel": "C1", "ts": "1.000001", "text": "x",
                                 "blocks": blocks}}).encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Flood:
    """``clients`` threads posting ``total`` requests of ``body`` to the endpoint, each on a connection of its own,
    alternately without a signature and with a wrong one."""

    def __init__(self, port: int, body: bytes, total: int, clients: int) -> None:
        self.port, self.body, self.total, self.clients = port, body, total, clients
        self.statuses: list[int] = []
        """the status of each answered request; 0: the server closed the connection before answering"""
        self._next = 0
        self._lock = threading.Lock()

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= self.total:
                return None
            self._next += 1
            return self._next

    def _client(self) -> None:
        while (n := self._take()) is not None:
            headers = {"Content-Type": "application/json", "Content-Length": str(len(self.body))}
            if n % 2:
                headers.update({"X-Slack-Request-Timestamp": str(int(time.time())),
                                "X-Slack-Signature": "v0=" + "0" * 64})
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                connection.request("POST", "/slack/events", body=self.body, headers=headers)
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):  # refused before the whole body was sent
                status = 0
            finally:
                connection.close()
            with self._lock:
                self.statuses.append(status)

    def run(self) -> dict[str, Any]:
        """Every request posted and answered (or cut off): their statuses and the seconds it took."""
        started = time.perf_counter()
        threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"statuses": self.statuses, "seconds": time.perf_counter() - started}


def flood_main(port: int, total: int, clients: int, body_kb: int) -> None:
    """The flood, in a process of its own (so its clients do not hold up the measuring one): prints its result as
    JSON."""
    print(json.dumps(_Flood(port, _flood_body(body_kb), total, clients).run()))


async def _serve(fake_url: str, url: str, prefix: str, port: int, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """``threadkeeper serve --http`` on ``port``, once its ``/healthz`` answers; what it logs goes to ``log``."""
    import aiohttp

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "AI_", "THREADKEEPER_", "REDIS"))}
    env.update({"REDIS_URL": url, "THREADKEEPER_KEY_PREFIX": prefix, "SLACK_BOT_TOKEN": "xoxb-bench",
                "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_BASE_URL": fake_url, "THREADKEEPER_LOG_LEVEL": "ERROR",
                "THREADKEEPER_SHUTDOWN_SECONDS": "2",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    server = subprocess.Popen([sys.executable, "-m", "threadkeeper", "serve", "--http", "--host", "127.0.0.1",
                               "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the bot did not start: {log.read().decode(errors='replace')[-2000:]}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/healthz") as answer:
                    if answer.status == 200:
                        return server
            await asyncio.sleep(0.1)
    _stop(server)
    raise RuntimeError("the bot's /healthz did not answer 200 within 60 s")


def _cpu_seconds(pid: int) -> float:
    """The CPU time process ``pid`` has used so far (Linux's /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


async def flood_metrics(url: str, prefix: str, *, unsigned: int = 300, clients: int = 6, body_kb: int = 900,
                        pace_seconds: float = 0.05, quiet_events: int = 40) -> dict[str, float]:
    """The real bot on a loopback port; ``unsigned`` requests of ``body_kb`` KB posted by ``clients`` clients at once,
    while a signed mention arrives every ``pace_seconds``. The signed events' acknowledgement p50 and p99 in seconds
    during the flood, and at the same pace alone before it (``quiet_events`` of them); the flood's requests per
    second, and the bot's CPU per unsigned request: its CPU from the flood's start until every signed event is
    answered, less what as many signed events cost it without a flood."""
    import aiohttp

    sys.path.insert(0, str(TESTS))
    slack_fake: Any = importlib.import_module("slack_fake")  # (the tests' module: no package of this one)
    bot_user: str = slack_fake.BOT_USER

    fake = await slack_fake.FakeSlack().start()

    def answered() -> int:
        """How many of the mentions' threads hold the bot's reply."""
        return sum(1 for (channel, _), messages in fake.threads.items() if channel == "C1" and any(
            m.get("user") == bot_user and not str(m.get("text") or "_").startswith("_") for m in messages))
    log = tempfile.TemporaryFile()
    server = await _serve(fake.base_url, url, prefix, port := _free_port(), log)
    sent = 0
    failed: list[int] = []

    async def signed_ack(session: aiohttp.ClientSession) -> float:
        nonlocal sent
        sent += 1
        ts = f"1700000000.{sent:06d}"
        body = json.dumps({"token": "unused", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
                           "event_id": f"EvBench{sent}", "event_time": int(time.time()),
                           "event": {"type": "app_mention", "user": "U1", "text": f"<@{bot_user}> status?", "ts": ts,
                                     "channel": "C1", "event_ts": ts},
                           "authorizations": [{"user_id": bot_user, "is_bot": True, "team_id": "T1"}]})
        started = time.perf_counter()
        async with session.post(f"http://127.0.0.1:{port}/slack/events", data=body, headers=_signed(body)) as answer:
            await answer.read()
            if answer.status != 200:  # (503: not stored within the ack's bound; Slack would send it again)
                failed.append(answer.status)
        return time.perf_counter() - started

    try:
        async with aiohttp.ClientSession() as session:
            async def paced(until: Callable[[], bool]) -> list[float]:
                """A signed event every ``pace_seconds`` (whether or not the earlier ones were answered yet) until
                ``until()``; the time each took to be acknowledged."""
                acks: list[asyncio.Task[float]] = []
                due = time.perf_counter()
                while not until():
                    acks.append(asyncio.create_task(signed_ack(session)))
                    due += pace_seconds
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                return list(await asyncio.gather(*acks))

            async def all_answered() -> float:
                """Once every signed event so far is answered (its turn done): the bot's CPU seconds until then."""
                deadline = time.monotonic() + 300
                while answered() < sent - len(failed):  # (one answered 503 was not stored: Slack would resend it)
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{sent - len(failed) - answered()} signed events were not answered "
                                           "within 300 s")
                    await asyncio.sleep(0.1)
                return _cpu_seconds(server.pid)

            await paced(lambda: sent >= 5)  # (the first turns: the bot's imports and caches)
            cpu = await all_answered()
            quiet = await paced(lambda: sent >= 5 + quiet_events)
            per_event = (await all_answered() - cpu) / quiet_events
            cpu, failed_before = _cpu_seconds(server.pid), len(failed)
            flood = await asyncio.create_subprocess_exec(
                sys.executable, "-c", "import sys; from threadkeeper.bench_flood import flood_main; "
                "flood_main(*map(int, sys.argv[1:]))", str(port), str(unsigned), str(clients), str(body_kb),
                stdout=subprocess.PIPE)
            waiting = asyncio.create_task(flood.communicate())
            during = await paced(waiting.done)
            flooded = json.loads((await waiting)[0])
            stored = len(during) - (len(failed) - failed_before)  # (the turns to leave out)
            cpu = await all_answered() - cpu - stored * per_event
    finally:
        _stop(server)
        await fake.close()
        log.seek(0)
        logged = log.read().decode(errors="replace")
        log.close()
    if logged.strip():
        print(logged[-3000:], file=sys.stderr)
    statuses: list[int] = flooded["statuses"]
    refused = sum(1 for s in statuses if s in (401, 413) or s == 0)
    if refused != unsigned:
        raise RuntimeError(f"{unsigned - refused} unsigned requests were not refused: {sorted(set(statuses))}")
    return {"signed_ack_p99_s_during_unsigned_flood": round(_percentile(during, 0.99), 3),
            "signed_ack_p50_s_during_unsigned_flood": round(statistics.median(during), 3),
            "signed_ack_p99_s_quiet": round(_percentile(quiet, 0.99), 3),
            "signed_ack_p50_s_quiet": round(statistics.median(quiet), 3),
            "signed_acks_during_unsigned_flood": len(during),
            "signed_acks_failed_during_unsigned_flood": len(failed),
            "bot_cpu_ms_per_unsigned_request": round(max(0.0, cpu) * 1000 / unsigned, 2),
            "unsigned_flood_requests_per_s": round(unsigned / max(flooded["seconds"], 1e-6), 1)}


def flood_process_metrics(url: str, prefix: str, quick: bool, progress: Callable[[str], None] = lambda _: None,
                          ) -> tuple[dict[str, float], str | None]:
    """:func:`flood_metrics` in a process of its own (300 requests; 60 with ``quick``), or why it was not measured."""
    if not (TESTS / "slack_fake.py").exists():
        return {}, NOT_HERE
    progress("signed events acknowledged during a flood of unsigned requests")
    code = ("import asyncio, json, sys; from threadkeeper.bench_flood import flood_metrics; print(json.dumps("
            "asyncio.run(flood_metrics(sys.argv[1], sys.argv[2], unsigned=int(sys.argv[3])))))")
    done = subprocess.run([sys.executable, "-c", code, url, prefix, "60" if quick else "300"], capture_output=True,
                          text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the flood bench failed: {done.stderr[-2000:]}")
    metrics: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return metrics, None
