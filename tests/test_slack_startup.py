"""An operator knows at once what is wrong: a bad bot token, a bad app-level token or a missing scope stops the bot at
start with one line naming the setting, and ``/healthz`` is not ready while Slack refuses the token."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from conftest import REDIS_URL, drop_prefix
from fakes import scripted
from prestarted import spawn
from slack_fake import FakeSlack
from test_slack_bot import SECRET, make_harness

from threadkeeper.bot.manifest import BOT_SCOPES


@pytest.fixture
def model():
    return scripted()


async def _serve(slack: FakeSlack, prefix: str, tmp: Path, *mode: str, **env: str) -> tuple[int, str]:
    """``threadkeeper serve`` as a process against the fake Slack: its exit code and what it wrote to stderr, or a
    timeout when it kept running (it then started)."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS", "SLACK", "AI_", "THREADKEEPER"))}
    full = {**keep, "REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix, "SLACK_BOT_TOKEN": "xoxb-test",
            "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_BASE_URL": slack.base_url, "AI_MODEL": "offline",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env}
    err = tmp / "serve.stderr"
    # forked from an interpreter that has imported the stack (tests/prestarted.py)
    proc = await asyncio.to_thread(spawn, "serve", *mode, env=full, cwd=tmp, stderr=err)
    try:
        code = await asyncio.wait_for(proc.wait(), timeout=60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return code, err.read_text()


@pytest.mark.parametrize(("case", "mode", "named"), [
    ("bot token revoked", ("--http", "--port", "65500"), "SLACK_BOT_TOKEN is refused by Slack (invalid_auth)"),
    ("app token wrong", ("--socket",), "SLACK_APP_TOKEN is refused by Slack (invalid_auth)"),
    ("a scope missing", ("--http", "--port", "65501"), "SLACK_BOT_TOKEN lacks the scopes mpim:read"),
])
async def test_a_permanent_refusal_stops_the_bot_at_start_with_one_line(prefix: str, tmp_path: Path, case: str,
                                                                       mode: tuple[str, ...], named: str) -> None:
    slack = await FakeSlack().start()
    try:
        env = {"SLACK_APP_TOKEN": "xapp-test"} if "--socket" in mode else {}
        if case == "bot token revoked":
            slack.refused.add("xoxb-test")
        elif case == "app token wrong":
            slack.refused.add("xapp-test")
        else:
            slack.scopes = [s for s in BOT_SCOPES if s != "mpim:read"]
        code, err = await _serve(slack, prefix, tmp_path, *mode, **env)
    finally:
        await slack.close()
    lines = [line for line in err.splitlines() if "threadkeeper: error:" in line]
    assert code != 0 and len(lines) == 1 and named in lines[0], err[-2000:]
    assert "api.slack.com/apps" in lines[0], "it says where in the app's settings to fix it"
    assert "Traceback" not in err


async def test_healthz_is_not_ready_while_slack_refuses_the_bot_token(model, prefix: str, client) -> None:
    h, http = await make_harness(prefix, client)
    try:
        health = await (await h.http.get("/healthz")).json()
        assert health["ok"] and health["slack_token"] == "ok"
        h.bot.slack_health.seconds = 0  # asked again at every check
        h.slack.refused.add("xoxb-test")
        response = await h.http.get("/healthz")
        assert response.status == 503 and json.loads(await response.text())["slack_token"] == "refused"
        h.slack.refused.clear()
        assert (await h.http.get("/healthz")).status == 200, "ready again once Slack accepts it"
    finally:
        await http.close()
        await h.slack.close()


async def test_preflight_says_which_workspace_and_bot_user_are_served(model, prefix: str, client) -> None:
    h, http = await make_harness(prefix, client)
    try:
        lines = await h.bot.preflight()
        assert lines == ["serving workspace T1 (T1) as @threadkeeper (UBOT)"]
    finally:
        await http.close()
        await h.slack.close()


LOADED_BEFORE_SERVING = ("detect_secrets", "numpy", "wordfreq.tokens")
"""What a worker's first acknowledgement or turn would import while the event loop waits, had it not been loaded
before the worker listens (each takes a fifth to a half of a second on this machine)."""


async def test_a_worker_loads_before_it_listens_what_its_first_ack_and_turn_would_import(prefix: str) -> None:
    """``threadkeeper serve`` imports the redaction rules' detect-secrets, wordfreq's tokenizer and numpy before it
    listens for Slack's events, and its first acknowledgement (a message holding a secret-shaped token) and first
    turn import none of them: Python's own import log (``-X importtime``, in the order of the log lines) says so."""
    import socket
    import time

    import aiohttp
    from slack_fake import event_body, sign
    from test_slack_bot import CHANNEL, mention

    slack = await FakeSlack().start()
    with socket.socket() as s:  # a free port (the process binds it at once)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS", "SLACK", "AI_", "THREADKEEPER"))}
    env = {**keep, "REDIS_URL": REDIS_URL, "THREADKEEPER_KEY_PREFIX": prefix, "SLACK_BOT_TOKEN": "xoxb-test",
           "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_BASE_URL": slack.base_url, "AI_MODEL": "offline",
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-X", "importtime", "-m", "threadkeeper", "serve",
                                                "--http", "--host", "127.0.0.1", "--port", str(port), env=env,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    before: list[str] = []
    after: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while not any("listening for Slack events" in line for line in before):
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=max(1.0, deadline - time.monotonic()))
            assert line, "\n".join(before[-40:])
            before.append(line.decode())

        async def log_after() -> None:
            while line := await proc.stderr.readline():  # type: ignore[union-attr]
                after.append(line.decode())

        reading = asyncio.create_task(log_after())
        body = json.dumps(event_body(mention("1700004000.000100", "the deploy ref is Xq9vB7mKt2wZp4Lr, isn't it?"),
                                     event_id="Ev-first"))
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/slack/events", data=body,
                                 headers=sign(SECRET, body)) as response:
                assert response.status == 200
        while not [c for c in slack.calls_to("chat.postMessage") if c.get("channel") == CHANNEL]:
            assert time.monotonic() < deadline, "the first turn was answered"
            await asyncio.sleep(0.05)
    finally:
        proc.terminate()
        await proc.wait()
        await slack.close()
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            await drop_prefix(client, prefix)  # what the worker stored of its turn
        finally:
            await client.aclose()
    await reading

    def imported(lines: list[str]) -> set[str]:
        """Of :data:`LOADED_BEFORE_SERVING`, what ``lines`` log an import of (a package imported in a thread is
        logged by its modules only)."""
        modules = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
        return {name for name in LOADED_BEFORE_SERVING for m in modules if m == name or m.startswith(name + ".")}

    assert imported(before) == set(LOADED_BEFORE_SERVING)
    assert not imported(after), "the first acknowledgement or turn imported it"
