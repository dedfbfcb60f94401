"""Serving the bot: the HTTP events endpoint (with /healthz and /metrics) or Socket Mode."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

from .envelope import problem as envelope_problem
from .signature import SignatureGate
from .slack import SlackBot
from .workspaces import KEY_WRONG

log = logging.getLogger("threadkeeper.server")

HealthCheck = Callable[[], Awaitable[bool]]
SlackState = Callable[[], Awaitable[str]]


def socket_state(handler: Any) -> SlackState:
    """The Socket Mode connection's state for ``/healthz``: ``connected`` or ``disconnected``."""
    async def state() -> str:
        client = getattr(handler, "client", None)
        return "connected" if client is not None and await client.is_connected() else "disconnected"
    return state


def build_web_app(bot: SlackBot, health: HealthCheck, *, events: bool = True,
                  durability: str = "unknown", slack: SlackState | None = None,
                  ack_seconds: float = 2.0, eviction: str = "unknown") -> web.Application:
    """``POST /slack/events``, ``GET /healthz``, ``GET /metrics``.

    An event's signature is checked before its body is read as anything (:class:`bot.signature.SignatureGate`): by
    the headers alone (unsigned, stale, a body declared over the bound), then by one HMAC of the body, read up to its
    bound; only a request Slack signed is parsed, checked for its shape (:func:`bot.envelope.problem`) and given to
    Bolt.

    ``/healthz`` also says how Redis keeps acknowledged messages across its own restart (``durability``) and
    how Slack reaches this process: ``http`` (events are posted to it) or, in Socket Mode, whether the
    connection is up (``slack``); a worker whose socket is down answers 503, since it receives nothing.
    ``eviction`` is Redis's ``maxmemory-policy`` (anything but ``noeviction`` can drop stored history), and
    ``encryption_key`` whether stored installations open with the key: a worker whose key cannot decrypt them
    answers 503, since every event of an installed workspace would fail.

    An event is acknowledged once it is stored; when Redis does not answer within ``ack_seconds`` (stalled,
    failing over) the endpoint answers 503 at once, so Slack sends the event again, instead of holding the
    request until Slack gives up on it (a retry that finds the event stored is deduplicated)."""

    gate = SignatureGate(bot.signing_secret or "") if events else None

    def refused(refusal: tuple[int, str]) -> web.Response:
        status, reason = refusal
        if status == 400:
            return malformed(reason)
        bot.metrics.events.labels("request", "unsigned").inc()  # (counted, not logged: a flood would fill the log)
        return web.Response(status=status, text=reason)

    def malformed(why: str) -> web.Response:
        bot.metrics.events.labels("request", "rejected").inc()
        log.warning("rejected a malformed Slack request: %s", why)
        return web.Response(status=400, text=f"malformed Slack request: {why}")

    async def slack_events(request: web.Request) -> web.Response:
        assert gate is not None
        refusal = gate.headers(request.headers, request.content_length)
        if refusal is not None:
            return refused(refusal)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:  # (sent without a Content-Length, larger than it may be)
            return refused((413, f"the body is larger than {gate.max_body_bytes:,} bytes"))
        refusal = await gate.body(request.headers, body)
        if refusal is not None:
            return refused(refusal)
        why = envelope_problem(request.headers, body)
        if why is None:
            try:
                bolt_request = await to_bolt_request(request)
            except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:  # Bolt could not read it
                why = f"{type(exc).__name__}: {str(exc)[:200]}"
        if why is not None:
            return malformed(why)
        try:
            async with asyncio.timeout(ack_seconds):
                response = await bot.app.async_dispatch(bolt_request)
        except TimeoutError:
            bot.metrics.events.labels("request", "timeout").inc()
            log.warning("Redis did not answer within %.1f s: answered 503, Slack will send the event again",
                        ack_seconds)
            return web.Response(status=503, text=f"storage did not answer within {ack_seconds:g} s; retry")
        return await to_aiohttp_response(response)

    flow = bot.app.oauth_flow

    async def install(request: web.Request) -> web.Response:  # Bolt's install page and its OAuth callback
        assert flow is not None
        handle = flow.handle_installation if request.path == flow.install_path else flow.handle_callback
        return await to_aiohttp_response(await handle(await to_bolt_request(request)))

    async def healthz(_: web.Request) -> web.Response:
        redis_ok = False
        with contextlib.suppress(Exception):
            redis_ok = await health()
        state = "http" if slack is None else "disconnected"
        if slack is not None:
            with contextlib.suppress(Exception):
                state = await slack()
        token = "unknown"
        with contextlib.suppress(Exception):
            token = await bot.slack_health()
        key = "unknown"
        with contextlib.suppress(Exception):
            key = await bot.workspaces.encryption_key()
        ok = redis_ok and state != "disconnected" and token == "ok" and key != KEY_WRONG
        body = {"ok": ok, "redis": "reachable" if redis_ok else "unreachable", "durability": durability,
                "eviction": eviction, "slack": state, "slack_token": token, "encryption_key": key}
        return web.Response(status=200 if ok else 503, text=json.dumps(body), content_type="application/json")

    async def metrics(_: web.Request) -> web.Response:
        with contextlib.suppress(Exception):  # Redis unreachable: the counters of this process are still served
            await bot.measure()
        return web.Response(body=bot.metrics.render(), content_type="text/plain")

    async def preload(_: web.Application) -> None:  # before the site listens: no event waits on an import
        await bot.pipeline.preload()

    async def hear_stops(_: web.Application) -> None:
        bot.listen()

    async def stop_hearing(_: web.Application) -> None:
        await bot.close()

    app = web.Application(client_max_size=gate.max_body_bytes if gate is not None else 1024 * 1024)
    app.on_startup.append(preload)
    app.on_startup.append(hear_stops)
    app.on_cleanup.append(stop_hearing)
    if events:
        app.router.add_post("/slack/events", slack_events)
        if flow is not None:
            app.router.add_get(flow.install_path, install)
            app.router.add_get(flow.redirect_uri_path, install)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


async def sweep_forever(bot: SlackBot, every_seconds: float) -> None:
    """Resume pending work whose worker died (its lease expired)."""
    while True:
        await asyncio.sleep(every_seconds)
        try:
            kicked = await bot.worker.sweep()
            if kicked:
                log.info("sweep resumed %d conversations", kicked)
        except Exception:  # noqa: BLE001 - the sweep must keep running
            log.exception("sweep failed")
        if bot.pipeline.memory_on:
            try:
                extracted = await bot.pipeline.sweep_memory()
                if extracted:
                    log.info("memory: %d idle conversations extracted (%d records)", len(extracted),
                             sum(e.records for e in extracted))
            except Exception:  # noqa: BLE001 - the sweep must keep running
                log.exception("memory sweep failed")


async def run_until_stopped(bot: SlackBot, *, sweep_seconds: float, shutdown_seconds: float) -> None:
    """Sweep for orphaned work until SIGTERM or SIGINT; then stop taking turns, give running ones up to
    ``shutdown_seconds`` to finish, and set aside the rest with their leases released (another worker
    resumes them at once)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    sweeper = asyncio.create_task(sweep_forever(bot, sweep_seconds))
    bot.listen()
    try:
        await stop.wait()
        log.info("stopping: no new turns; running ones get up to %.0f s to finish", shutdown_seconds)
    finally:
        sweeper.cancel()
        await bot.worker.shutdown(shutdown_seconds)
        await bot.close()


async def serve_http(bot: SlackBot, health: HealthCheck, *, host: str, port: int, sweep_seconds: float,
                     shutdown_seconds: float = 20.0, durability: str = "unknown", ack_seconds: float = 2.0,
                     eviction: str = "unknown") -> None:
    runner = web.AppRunner(build_web_app(bot, health, durability=durability, ack_seconds=ack_seconds,
                                         eviction=eviction))
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("listening for Slack events on http://%s:%d/slack/events", host, port)
    try:
        await run_until_stopped(bot, sweep_seconds=sweep_seconds, shutdown_seconds=shutdown_seconds)
    finally:
        await runner.cleanup()


async def serve_socket(bot: SlackBot, health: HealthCheck, *, app_token: str, port: int | None,
                       sweep_seconds: float, shutdown_seconds: float = 20.0, durability: str = "unknown",
                       eviction: str = "unknown") -> None:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    handler = AsyncSocketModeHandler(bot.app, app_token)
    runner = None
    if port:
        runner = web.AppRunner(build_web_app(bot, health, events=False, durability=durability,
                                             slack=socket_state(handler), eviction=eviction))
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", port).start()
    await bot.pipeline.preload()  # (done already when the health port's app started: each part loads once)
    await handler.connect_async()  # type: ignore[no-untyped-call]  # slack-bolt leaves it unannotated
    log.info("connected to Slack in Socket Mode")
    try:
        await run_until_stopped(bot, sweep_seconds=sweep_seconds, shutdown_seconds=shutdown_seconds)
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]  # slack-bolt leaves it unannotated
        if runner is not None:
            await runner.cleanup()
