"""A stalled Redis (its process stopped with SIGSTOP) makes the events endpoint answer 503 within the ack
deadline, so Slack sends the event again; once Redis runs again the retry is stored and answered once."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
from fakes import Step, scripted
from redis_cluster import _free_ports
from slack_fake import event_body
from test_slack_bot import make_harness, mention

from threadkeeper.persistence.connection import connect

pytestmark = pytest.mark.skipif(not shutil.which("redis-server"), reason="needs redis-server")


@pytest.fixture
def stoppable_redis():
    """A redis-server of this test's own on a free loopback port, stopped (and resumed first) afterwards."""
    port = _free_ports(1)[0]
    directory = tempfile.mkdtemp(prefix="threadkeeper-stall-")
    process = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no", "--dir", directory],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    probe = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    deadline = time.monotonic() + 10
    while True:
        try:
            probe.ping()
            break
        except (redis.RedisError, OSError):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    probe.close()
    try:
        yield process, f"redis://127.0.0.1:{port}/0"
    finally:
        os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


async def test_acks_fail_fast_while_redis_is_stopped_and_the_retry_is_stored_once(stoppable_redis) -> None:
    process, url = stoppable_redis
    model = scripted()
    model.default = Step(text="noted")
    client = connect(url, timeout_seconds=5.0)  # the product's default command timeout
    h, http = await make_harness("tkstall", client)
    root = "1700030000.000100"
    try:
        assert await h.post(event_body(mention(root, "first"), event_id="Ev-1")) == 200
        await h.settle()
        os.kill(process.pid, signal.SIGSTOP)
        try:
            started = time.perf_counter()
            status = await h.post(event_body(mention("1700030001.000100", "second", thread_ts=root),
                                             event_id="Ev-2"))
            took = time.perf_counter() - started
        finally:
            os.kill(process.pid, signal.SIGCONT)
        assert status == 503 and took <= 2.5, (status, took)
        assert await h.post(event_body(mention("1700030001.000100", "second", thread_ts=root), event_id="Ev-2")) == 200
        assert await h.post(event_body(mention("1700030001.000100", "second", thread_ts=root), event_id="Ev-2")) == 200
        await h.settle()
        cid = f"slack:T1:C100:{root}"
        texts = [m.text for m in (await h.pipeline.checkpoints.load_history(cid)).messages if m.role == "user"]
        assert sum("second" in t for t in texts) == 1, texts
    finally:
        await h.bot.worker.shutdown(0)
        await http.close()
        await h.slack.close()
        await client.aclose()
