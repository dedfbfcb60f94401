"""The ``threadkeeper`` command line."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from threadkeeper.persistence import ThreadkeeperError

from .evalcmd import cmd_eval, cmd_eval_instructions, cmd_eval_memory, cmd_eval_redaction, windows_list
from .logs import WorkProgress, quiet_turn_lines
from .opscmd import REASONS, cmd_bench, cmd_compact, cmd_dead_letters, cmd_forget
from .settings import Settings, SettingsError, load_settings
from .stores import Stores, with_pipeline

if TYPE_CHECKING:
    from threadkeeper.services import Pipeline

# Commands import the model stack (litellm, tokenizers, word lists) only when they need it, so that
# ``--help`` and ``history`` start in well under a second.

log = logging.getLogger("threadkeeper")


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def cmd_history(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores, pipeline: Pipeline) -> int:
        rows = await pipeline.lineage(args.conversation_id)
        if args.json:
            print(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
            return 0
        from rich.console import Console
        from rich.table import Table

        from threadkeeper.bot.render import HELD, lineage_tree

        messages = await pipeline.messages(args.conversation_id)
        if args.tree:
            Console(width=200).print(lineage_tree(args.conversation_id, rows, messages))
            return 0
        table = Table(title=f"lineage of {args.conversation_id}: {messages:,} message{'' if messages == 1 else 's'} "
                            f"so far", caption=HELD, show_lines=False)
        for col in ("", "checkpoint", "kind", "status", "parent", "forked_from", "held", "tokens", "created"):
            table.add_column(col, justify="right" if col in ("held", "tokens") else "left")
        for row in rows:
            table.add_row("HEAD" if row.is_head else "", row.id, row.kind.value, row.status.value, row.parent or "-",
                          row.forked_from or "-", f"{row.message_count:,}", f"{row.token_total:,}",
                          _stamp(row.created_at))
        Console(width=200).print(table)
        return 0

    return asyncio.run(with_pipeline(settings, work, read_only=True))


def cmd_conversations(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores, pipeline: Pipeline) -> int:
        rows, total = await pipeline.conversations(args.limit)
        if args.json:
            print(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
            return 0
        if not rows:
            print(f"no conversations in {stores.where} (key prefix {settings.threadkeeper_key_prefix!r})")
            return 0
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"conversations in {stores.where}, most recent first", show_lines=False)
        for col in ("conversation", "last activity (UTC)", "messages", "generation", "turn"):
            table.add_column(col, justify="right" if col in ("messages", "generation") else "left")
        for row in rows:
            table.add_row(row.id, _stamp(row.last_activity), f"{row.messages:,}", str(row.generation),
                          "running or paused" if row.active else "")
        Console(width=200).print(table)
        if total > len(rows):
            print(f"(the {len(rows)} most recent of {total:,}; --limit shows more)")
        return 0

    from .embedded import NothingStoredError

    try:
        return asyncio.run(with_pipeline(settings, work, read_only=True))
    except NothingStoredError as nothing:
        if args.json:
            print("[]")
        else:
            print(nothing)
        return 0


def cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    from threadkeeper.bot.console import run_console

    from .root import check_models

    check_models(settings)
    quiet_turn_lines(settings.threadkeeper_log_level)  # the console shows each turn itself

    async def work(stores: Stores, pipeline: Pipeline) -> int:
        b = pipeline.budget
        banner = (f"threadkeeper console: conversation {args.conversation}, model {pipeline.model.model} "
                  f"(window {b.window_tokens:,} tokens, compacts at {b.trigger_tokens:,}), {stores.where}")
        return await run_console(pipeline, args.conversation, sys.stdin, sys.stdout, banner=banner)

    return asyncio.run(with_pipeline(settings, work, context_window=args.context_window))


def count_first(settings: Settings) -> None:
    """What the console (and ``run``, which may start it) loads before anything else, logging included: the model's
    tokenizer. While tiktoken builds o200k it holds the table twice (its ranks as a Python dict beside its own tables:
    76 MB more than the process held, 48 MB once built), and a process peaks at its largest moment, so the table is
    built while the process is small (the settings read, nothing else of the stack imported)."""
    from threadkeeper.services.models import tokenizer_for

    tokenizer_for(settings.ai_model)


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    half = settings.slack_half_set()
    if half:
        raise SettingsError(half)
    if settings.slack_configured:
        args.socket = bool(settings.slack_app_token)
        args.http = not args.socket
        args.port = None
        args.host = "0.0.0.0"
        return cmd_serve(args, settings)
    missing = [n for n, v in (("SLACK_BOT_TOKEN", settings.slack_bot_token),
                              ("SLACK_APP_TOKEN or SLACK_SIGNING_SECRET",
                               settings.slack_app_token or settings.slack_signing_secret)) if not v]
    print(f"No Slack credentials ({', '.join(missing)} unset): starting the local console instead.",
          file=sys.stderr)
    args.conversation = "console:local"
    args.context_window = None
    return cmd_console(args, settings)


def cmd_context(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores, pipeline: Pipeline) -> int:
        if args.messages_file:
            for number, arriving in enumerate(_arriving_lines(args.messages_file, pipeline, args.author), 1):
                report = await pipeline.context(args.conversation_id, arriving=arriving)
                print(json.dumps({"line": number, **report.as_dict()}, ensure_ascii=False), flush=True)
            return 0
        arriving = [pipeline.message(args.message, author=args.author)] if args.message else []
        report = await pipeline.context(args.conversation_id, arriving=arriving)
        if args.json:
            out = report.as_dict()
            print(json.dumps(out, indent=2, ensure_ascii=False))
        else:
            from threadkeeper.bot.render import context_text

            print(context_text(report))
        return 0

    return asyncio.run(with_pipeline(settings, work, model=args.model, context_window=args.context_window,
                                     read_only=True))


def _arriving_lines(path: str, pipeline: Pipeline, author: str | None) -> list[list[Any]]:
    """``--messages-file``: JSON lines of ``{"text", "author"?}``, each previewed on its own."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [line for line in fh.read().splitlines() if line.strip()]
    except OSError as exc:
        raise ThreadkeeperError(f"cannot read {path}: {exc.strerror or exc}") from None
    out = []
    for number, line in enumerate(lines, 1):
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ThreadkeeperError(f"{path} line {number}: not JSON ({exc})") from None
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise ThreadkeeperError(f"{path} line {number}: expected an object with a non-empty \"text\" string")
        who = item.get("author", author)
        if who is not None and not isinstance(who, str):
            raise ThreadkeeperError(f"{path} line {number}: \"author\" must be a string")
        out.append([pipeline.message(item["text"], author=who)])
    return out


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from threadkeeper.services import Conversation, load_thread, replay
    from threadkeeper.services.replay import default_conversation_id

    thread = load_thread(args.thread_file)  # the whole file is checked before anything is written
    # (an id given, even an empty one, is the one checked: only none given falls back to the file's)
    conversation_id = args.conversation if args.conversation is not None else \
        thread.conversation_id or default_conversation_id(thread, args.thread_file)
    # a clear error now, not after part of the thread is written
    conversation = Conversation.of(conversation_id, args.privacy or "unknown")
    if args.out and not os.access(os.path.dirname(os.path.abspath(args.out)), os.W_OK):
        raise ThreadkeeperError(f"cannot write the report to {args.out}: its folder does not exist or is not writable")
    quiet_turn_lines(settings.threadkeeper_log_level)  # the replay reports its turns itself

    async def work(stores: Stores, pipeline: Pipeline) -> int:
        with WorkProgress("replay", len(thread.messages)) as bar:
            result = await replay(pipeline, thread, conversation=conversation, turn_every=args.turn_every,
                                  progress=lambda done, total: bar.update(done))
        text = json.dumps(result, indent=2, ensure_ascii=False)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            print(f"replayed {result['messages']:,} messages in {result['turns']:,} turns into {conversation_id}; "
                  f"{len(result['compactions'])} compactions; next context {result['context_tokens']:,} tokens "
                  f"-> {args.out}", file=sys.stderr)
        else:
            print(text)
        return 0

    return asyncio.run(with_pipeline(settings, work, model=args.model, context_window=args.context_window))


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from threadkeeper.bot.server import serve_http, serve_socket

    from .root import build_slack_bot, check_models

    check_models(settings)
    if args.socket and not settings.slack_app_token:
        raise SettingsError("--socket needs SLACK_APP_TOKEN (an app-level token, xapp-…, with connections:write)")
    if args.http and not settings.slack_signing_secret:
        raise SettingsError("--http needs SLACK_SIGNING_SECRET to verify Slack's requests")

    async def work(stores: Stores, pipeline: Pipeline) -> int:
        bot = build_slack_bot(settings, stores, pipeline)
        for line in await bot.preflight(settings.slack_app_token if args.socket else None):
            log.info(line)

        async def health() -> bool:
            return await pipeline.healthy()

        if not settings.redis_url:
            log.info("REDIS_URL is not set: the bot keeps its state in the %s (one machine only; a fleet of "
                     "workers needs a Redis they share)", stores.where)
        kept, policy = await pipeline.durability(), await pipeline.eviction()  # eviction: warned by open_stores
        if kept == "none":
            log.warning("Redis at REDIS_URL keeps nothing across a restart (appendonly no, no snapshots): every "
                        "acknowledged message not yet answered would be lost. Production needs appendonly yes "
                        "(see docs/slack.md).")
        elif kept == "rdb":
            log.warning("Redis at REDIS_URL only snapshots: messages acknowledged since the last snapshot are lost "
                        "if Redis restarts. Production needs appendonly yes (see docs/slack.md).")
        if args.socket:
            await serve_socket(bot, health, app_token=settings.slack_app_token or "", port=args.port,
                               sweep_seconds=settings.threadkeeper_sweep_seconds,
                               shutdown_seconds=settings.threadkeeper_shutdown_seconds, durability=kept,
                               eviction=policy)
        else:
            await serve_http(bot, health, host=args.host, port=args.port or 3000,
                             sweep_seconds=settings.threadkeeper_sweep_seconds,
                             shutdown_seconds=settings.threadkeeper_shutdown_seconds, durability=kept,
                             ack_seconds=settings.threadkeeper_ack_seconds, eviction=policy)
        return 0

    return asyncio.run(with_pipeline(settings, work))


def cmd_manifest(args: argparse.Namespace, settings: Settings) -> int:
    from threadkeeper.bot.manifest import manifest

    if args.http is not None and not args.http.startswith(("https://", "http://")):
        raise ThreadkeeperError(f"--http must be the URL Slack reaches this app at (https://…), not {args.http!r}")
    made = manifest("http" if args.http else "socket", args.surface, args.http or "https://threadkeeper.example.com")
    print(json.dumps(made, indent=2))
    return 0


MAX_COUNT = 1_000_000_000
"""The largest count an option takes (a limit, a window, messages, turns): beyond it a number is a mistake, and one
past 2**63 would fail deep in Redis."""


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value[:40]!r} is not a whole number") from None
    if not 1 <= number <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{value[:40]} must be from 1 to {MAX_COUNT:,}")
    return number


def _port(value: str) -> int:
    number = _positive(value)
    if number > 65_535:
        raise argparse.ArgumentTypeError(f"{value[:40]} is not a port (1 to 65535)")
    return number


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("threadkeeper-slack")
    except PackageNotFoundError:
        return "(not installed)"


PLOT_HELP = ("draw {what} to this file: .png, .svg or .pdf (needs matplotlib, the plot extra; checked before the "
             "run)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="threadkeeper", description="A Slack bot that never loses the thread.")
    parser.set_defaults(first=None)  # what a command loads before logging and its own imports (count_first)
    parser.add_argument("--version", action="version", version=f"threadkeeper {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("history", help="show a conversation's checkpoint lineage, oldest first")
    p.add_argument("conversation_id", help="the conversation (slack:<team>:<channel>:<thread_ts>, console:local, …; "
                                           "threadkeeper conversations lists them)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--tree", action="store_true", help="draw the lineage as a tree: compactions' forks as branches")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("conversations", help="list the stored conversations: id, last activity, messages, generation")
    p.add_argument("--limit", type=_positive, default=50, help="show at most this many, most recent first (default 50)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_conversations)

    p = sub.add_parser("run", help="the main job: the Slack bot when configured, otherwise the local console")
    p.set_defaults(func=cmd_run, first=count_first)

    p = sub.add_parser("console", help="a line-based local chat on the real pipeline (works with piped stdin)")
    p.add_argument("--conversation", default="console:local", help="conversation id (default console:local)")
    p.add_argument("--context-window", type=_positive, help="override the model's context window (tokens)")
    p.set_defaults(func=cmd_console, first=count_first)

    p = sub.add_parser("context", help="what the next turn of a conversation would send to the model")
    p.add_argument("conversation_id", help="the conversation (threadkeeper conversations lists them)")
    p.add_argument("--json", action="store_true", help="print JSON (every entry in full) instead of text")
    p.add_argument("--model", help="model whose budget applies (default AI_MODEL)")
    p.add_argument("--context-window", type=_positive, help="override the model's context window (tokens)")
    p.add_argument("--message", help="preview the turn this message would start if it arrived now (recall included)")
    p.add_argument("--messages-file", help="JSON lines of {\"text\", \"author\"?}: one JSON context per line")
    p.add_argument("--author", help="the author of --message (default: none)")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("replay", help="feed a recorded thread through the pipeline; print the next context")
    p.add_argument("thread_file", help="a JSON thread ({\"messages\": [{\"id\", \"author\", \"text\", \"ts\"?, …}]}) "
                                        "or a Slack export (a JSON list of message objects)")
    p.add_argument("--context-window", type=_positive, help="override the main model's window for this run")
    p.add_argument("--model", help="model to use (default AI_MODEL)")
    p.add_argument("--turn-every", type=_positive, default=1, help="run a turn every K messages (default 1)")
    p.add_argument("--conversation", help="conversation id (default: from the file, or derived from it)")
    p.add_argument("--out", help="write the JSON report here instead of stdout")
    p.add_argument("--privacy", choices=("public", "private", "dm"),
                   help="who may see the thread's channel, as Slack would say (memory keeps a private or direct "
                        "channel's records there); default: public for a local id, unknown for a Slack id")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("serve", help="run the Slack bot (Socket Mode or the HTTP events endpoint)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--socket", action="store_true", help="Socket Mode (needs SLACK_APP_TOKEN)")
    mode.add_argument("--http", action="store_true", help="HTTP events at /slack/events (needs SLACK_SIGNING_SECRET)")
    p.add_argument("--port", type=_port, help="HTTP port (default 3000; with --socket: serve /healthz and "
                                                  "/metrics on this port)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0: every interface)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("eval", help="evals of long-thread continuity")
    ev = p.add_subparsers(dest="suite", required=True)
    c = ev.add_parser("continuity", help="how much of a long thread survives compaction, by strategy and window")
    c.add_argument("--benchmark", choices=("generated", "realtalk", "beam"), default="generated",
                   help="generated threads with planted probes (default), or a public benchmark read from --path: "
                        "realtalk (any LoCoMo-format JSON) or beam")
    c.add_argument("--path", help="the benchmark's files: a LoCoMo-format JSON file or folder of them (realtalk); "
                                  "a BEAM chat folder or a folder of them, e.g. 100K (beam)")
    c.add_argument("--limit", type=_positive, help="evaluate only the first N chats or threads")
    c.add_argument("--dataset", help="a JSON file: replay input plus probes (or a list of them)")
    c.add_argument("--strategies", default="recency,accumulating-summaries,user-messages+summary,threadkeeper",
                   help="comma-separated strategies to compare (default: all four)")
    c.add_argument("--windows", type=windows_list, default=None,
                   help="comma-separated context windows (default 4000,8000,16000; benchmarks add 32000)")
    c.add_argument("--threads", type=_positive, default=5, help="generated threads (default 5)")
    c.add_argument("--messages", type=_positive, default=1500, help="messages per generated thread (default 1500)")
    c.add_argument("--seed", type=int, default=1, help="seed of the generated threads (default 1)")
    c.add_argument("--styles", default="work",
                   help="generated thread styles, comma-separated: work, casual, multilingual, messy (default work)")
    c.add_argument("--turn-every", type=_positive, default=5, help="run a turn every K messages (default 5)")
    c.add_argument("--ask", action=argparse.BooleanOptionalAction, default=True,
                   help="also ask every question as the next message and grade the context built for it, "
                        "recall included (default on; --no-ask grades only the standing context)")
    c.add_argument("--json", help="write the results as JSON here")
    c.add_argument("--misses", metavar="FILE",
                   help="benchmarks: write each question asked whose answer the context missed as a JSON line here "
                        "(question, evidence ids, which baselines held it)")
    c.add_argument("--plot", metavar="FILE", help=PLOT_HELP.format(what="the share kept per window, each strategy "
                                                                        "and baseline beside threadkeeper"))
    c.add_argument("--model", help="a real model to run the threads with (enables --judge-model)")
    c.add_argument("--judge-model", help="grade answers to each probe's question with this model")
    c.set_defaults(func=cmd_eval)
    c = ev.add_parser("memory", help="what earlier threads of a channel bring to a new thread, against BM25 and "
                                     "no memory at the same spend")
    c.add_argument("--benchmark", choices=("realtalk", "beam"), required=True,
                   help="realtalk (any LoCoMo-format JSON) or beam, read from --path")
    c.add_argument("--path", required=True, help="the benchmark's files (as for eval continuity)")
    c.add_argument("--limit", type=_positive, help="evaluate only the first N chats")
    c.add_argument("--windows", type=windows_list, default=[8192],
                   help="comma-separated context windows (default 8192)")
    c.add_argument("--json", help="write the results as JSON here")
    c.add_argument("--plot", metavar="FILE", help=PLOT_HELP.format(what="the share answered per window, memory "
                                                                        "beside BM25 and no memory"))
    c.set_defaults(func=cmd_eval_memory)
    c = ev.add_parser("redaction", help="how many secrets of a public secret scanner's samples redaction removes, "
                                        "and how much ordinary text it leaves alone, beside an entropy rule")
    c.add_argument("--source", choices=("gitleaks",), default="gitleaks",
                   help="where the samples come from: gitleaks (its rule files' true and false positives)")
    c.add_argument("--path", required=True, help="a gitleaks checkout: a work tree or a bare git directory")
    c.add_argument("--seed", type=int, default=1, help="seed of the secrets drawn from the rules' regexes (default 1)")
    c.add_argument("--by-vendor", action="store_true", help="also print each vendor's share")
    c.add_argument("--pairs", metavar="DIR", help="conversations people wrote (REALTALK's data folder, any LoCoMo-format "
                                                  "set): what the context of a person's previous message, or a message "
                                                  "ending in a secret's name, changes in their next one")
    c.add_argument("--pairs-benchmark", choices=("realtalk", "beam"), default="realtalk",
                   help="the format of --pairs: realtalk (any LoCoMo-format set, the default) or beam")
    c.add_argument("--json", help="write the results as JSON here")
    c.set_defaults(func=cmd_eval_redaction)
    c = ev.add_parser("instructions", help="where instructions from a public prompt-injection set, and look-alike "
                                           "facts, end up: as a person's quoted words, as the assistant's own, or "
                                           "as facts record_state accepts; beside a cue-word baseline")
    c.add_argument("--source", choices=("cyberseceval",), default="cyberseceval",
                   help="where the instructions come from: cyberseceval (Meta's prompt-injection sets, 18 languages)")
    c.add_argument("--path", required=True, help="a PurpleLlama checkout: a work tree or a bare git directory")
    c.add_argument("--facts", action="append", default=[], required=True, metavar="DIR",
                   help="a Universal Dependencies treebank checkout (UD_English-EWT, UD_German-GSD, …) whose "
                        "sentences give the look-alike facts; repeat it for each language")
    c.add_argument("--by-language", action="store_true", help="also print each language's shares")
    c.add_argument("--json", help="write the results as JSON here")
    c.set_defaults(func=cmd_eval_instructions)

    p = sub.add_parser("bench", help="speed, write cost, compaction cost, throughput and memory on real Redis")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (under a minute)")
    p.add_argument("--json", help="write the metrics as JSON here")
    p.add_argument("--plot", metavar="FILE", help=PLOT_HELP.format(what="each metric that has a target against it"))
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("compact", help="compact a conversation now (internal: for orchestration and operators)")
    p.add_argument("conversation_id", help="the conversation to compact")
    p.add_argument("--dry-run", action="store_true", help="compute the compaction but write nothing")
    p.add_argument("--with-model", action="store_true",
                   help="let a dry run call the summarizer (billable); by default a preview calls no model")
    p.add_argument("--reason", choices=REASONS, default="manual",
                   help="why, recorded on the compaction checkpoint (default manual)")
    p.add_argument("--target-model", help="budget the result for this model's window (default AI_MODEL)")
    p.add_argument("--json", action="store_true", help="print the compaction report as JSON")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("forget", help="delete a conversation's whole history (or, with --team, a workspace's)")
    p.add_argument("target", help="a conversation id, or with --team a Slack team id")
    p.add_argument("--team", action="store_true", help="forget every conversation of this Slack workspace")
    p.add_argument("--yes", action="store_true", help="delete; without it, only say what would be deleted")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser("dead-letters", help="list the inbox items set aside as unreadable, or queue them again")
    p.add_argument("action", choices=("list", "retry"),
                   help="list: each one with why it cannot be read; retry: queue again those this version reads")
    p.add_argument("conversation_id", nargs="?", help="only this conversation")
    p.add_argument("--all", action="store_true", help="retry: every conversation's dead letters")
    p.add_argument("--json", action="store_true", help="list: print JSON")
    p.set_defaults(func=cmd_dead_letters)

    p = sub.add_parser("manifest", help="print the Slack app manifest (Socket Mode, or HTTP with --http)")
    p.add_argument("--http", metavar="URL", help="the public base URL Slack posts events to (HTTP mode)")
    p.add_argument("--surface", choices=("agent", "assistant"), default="agent",
                   help="agent (agent_view, default: what new apps get) or assistant (assistant_view, existing apps)")
    p.set_defaults(func=cmd_manifest)

    from .memorycmd import add_parser as add_memory

    add_memory(sub)
    return parser


def tune_gc() -> None:
    """Garbage-collector settings for a long-running worker.

    Import-time objects (litellm's model map and provider tables) are moved out of the collector's
    sight, and the young generation is collected less often: with the history cache holding many
    long-lived messages this lifts throughput by about a quarter (``threadkeeper bench``: 240 → 330
    turns/s) without changing what is freed.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        settings = load_settings()
        first: Callable[[Settings], None] | None = args.first
        if first is not None:
            first(settings)
        from .logs import configure

        configure(settings.threadkeeper_log_level, settings.threadkeeper_log_format)
        tune_gc()
        func: Callable[[argparse.Namespace, Settings], int] = args.func
        code = func(args, settings)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except ThreadkeeperError as exc:
        log.debug("what led to the error below", exc_info=True)  # the traceback, at THREADKEEPER_LOG_LEVEL=DEBUG only
        print(f"threadkeeper: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``threadkeeper history ID | head``): stop quietly, as other commands do. Python
        # would otherwise complain again when it flushes stdout on exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


