"""The deploy kit agrees with the code: the image's health check and stop timeout, the Slack app manifests (Socket
Mode and HTTP), and the Slack CLI project files that let ``slack run`` start the bot."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from threadkeeper.cli import build_parser
from threadkeeper.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)s", value)
    assert match, value
    return float(match.group(1))


def test_compose_waits_for_the_drain_and_checks_the_socket_mode_worker_health() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["bot"]
    drain = Settings.model_fields["threadkeeper_shutdown_seconds"].default
    assert _seconds(compose["stop_grace_period"]) >= drain + 5, "compose must not kill a worker mid-drain"
    dockerfile = (ROOT / "Dockerfile").read_text()
    [cmd] = re.findall(r"^CMD (\[.*\])$", dockerfile, re.M)
    command = json.loads(cmd)
    args = build_parser().parse_args(command[1:])
    assert args.socket and args.port, "Socket Mode with /healthz served"
    probe = " ".join(compose["healthcheck"]["test"])
    assert f"127.0.0.1:{args.port}/healthz" in probe and f"127.0.0.1:{args.port}/healthz" in dockerfile


def _manifest(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_manifests_are_written_once_and_pass_slacks_schema_in_either_mode_and_surface() -> None:
    """``manifest.json`` (Socket Mode) and ``deploy/manifest.http.json`` are what ``threadkeeper manifest`` writes,
    and every manifest it can write passes Slack's published schema: the agent surface (``agent_view``, what a new app
    gets) and the assistant surface, Socket Mode and HTTP."""
    import jsonschema

    from threadkeeper.bot.manifest import BOT_SCOPES, manifest

    assert _manifest(ROOT / "manifest.json") == manifest("socket", "agent")
    assert _manifest(ROOT / "deploy" / "manifest.http.json") == manifest("http", "agent",
                                                                         "https://threadkeeper.example.com")
    schema = json.loads((ROOT / "tests" / "data" / "slack" / "manifest.schema.1.0.0.json").read_text())
    for mode in ("socket", "http"):
        for surface in ("agent", "assistant"):
            made = manifest(mode, surface)  # type: ignore[arg-type]
            jsonschema.validate(made, schema)
            assert made["oauth_config"]["scopes"]["bot"] == list(BOT_SCOPES)
            assert made["settings"]["interactivity"]["is_enabled"], "the Forget shortcut and feedback buttons"
            events = made["settings"]["event_subscriptions"]["bot_events"]
            assert ("agent_view" in made["features"]) == (surface == "agent") != ("assistant_view" in made["features"])
            assert ("agent_session_stopped" in events) == (surface == "agent")
            assert "app_home_opened" in events and made["features"]["app_home"]["home_tab_enabled"], "memory controls"
            assert ("assistant_thread_started" in events) == (surface == "assistant")
    assert "mpim:read" in BOT_SCOPES, "memory in a group DM needs to know the group DM's members"
    assert "im:read" in BOT_SCOPES, "memory's Home list needs to know whose DM a record came from"
    assert Settings.model_fields["slack_scopes"].default.split(",") == list(BOT_SCOPES)
    http = manifest("http", "agent", "https://bot.example.org/")
    assert http["settings"]["socket_mode_enabled"] is False and manifest()["settings"]["socket_mode_enabled"] is True
    assert http["settings"]["event_subscriptions"]["request_url"] == "https://bot.example.org/slack/events"
    assert http["settings"]["interactivity"]["request_url"] == "https://bot.example.org/slack/events"
    assert http["oauth_config"]["redirect_urls"] == ["https://bot.example.org/slack/oauth_redirect"]
    broken = manifest()
    broken["features"]["agent_view"]["agent_description"] = "x" * 301
    try:
        jsonschema.validate(broken, schema)
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("the schema is applied (an over-long description fails it)")


def test_slack_run_starts_the_bot_from_the_project_files() -> None:
    hooks = json.loads((ROOT / ".slack" / "hooks.json").read_text())["hooks"]
    assert json.loads((ROOT / ".slack" / "config.json").read_text())["manifest"]["source"] == "local"
    start = shlex.split(hooks["start"])
    assert start[0] == ".venv/bin/threadkeeper" and build_parser().parse_args(start[1:]).socket
    get_hooks = shlex.split(hooks["get-hooks"])
    assert get_hooks[0] == ".venv/bin/python"
    answered = subprocess.run([sys.executable, *get_hooks[1:]], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert answered.returncode == 0, answered.stderr
    assert json.loads(answered.stdout)["config"]["sdk-managed-connection-enabled"] is True
    manifest = subprocess.run([sys.executable, "-m", "slack_cli_hooks.hooks.get_manifest"], capture_output=True,
                              text=True, cwd=ROOT, timeout=60)
    assert manifest.returncode == 0 and json.loads(manifest.stdout) == _manifest(ROOT / "manifest.json")


def test_the_env_example_lists_exactly_the_scopes_the_manifest_asks_for() -> None:
    [line] = re.findall(r"^#?\s*SLACK_SCOPES=(.*)$", (ROOT / ".env.example").read_text(), re.M)
    assert line.split(",") == _manifest(ROOT / "manifest.json")["oauth_config"]["scopes"]["bot"]


def test_the_image_installs_the_dependencies_in_a_layer_before_the_code_and_ignores_local_files() -> None:
    """The dependency layer sees only ``pyproject.toml`` and ``constraints.txt`` (a code change reuses it), installs
    exactly the declared dependencies, and the build context leaves out what is local (.venv, .git, caches, .env,
    Redis data) but nothing the Dockerfile copies."""
    import fnmatch
    import tomllib

    lines = [line for line in (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
             if line and not line.startswith("#")]
    copies = [(i, line.split()[1:-1]) for i, line in enumerate(lines) if line.startswith("COPY ")]
    [deps] = [i for i, line in enumerate(lines) if line.startswith("RUN ") and "-r /tmp/requirements.txt" in line]
    before = [src for i, sources in copies if i < deps for src in sources]
    assert sorted(before) == ["constraints.txt", "pyproject.toml"], before
    assert [i for i, line in enumerate(lines) if "deploy/install.sh /opt/threadkeeper" in line][0] > deps
    [snippet] = re.findall(r'python -c "(import tomllib;[^"]*)"', lines[deps])
    listed = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, cwd=ROOT, check=True)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert listed.stdout.splitlines() == declared

    ignored = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
               if p.strip() and not p.startswith("#")]
    for local in (".venv", ".git", ".env", ".pytest_cache", ".mypy_cache", ".threadkeeper", "**/__pycache__"):
        assert local in ignored, local
    for _, sources in copies:
        for src in sources:
            assert not any(fnmatch.fnmatch(src, p) or src.startswith(p.rstrip("/") + "/") for p in ignored), src
