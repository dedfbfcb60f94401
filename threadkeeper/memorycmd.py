"""``threadkeeper memory``: list, show and forget records of memory across conversations; switch it on or off for a
channel; extract and consolidate now."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from threadkeeper.persistence import ThreadkeeperError

from .settings import Settings
from .stores import Stores, with_pipeline

if TYPE_CHECKING:
    from threadkeeper.services import Pipeline


def _when(at: float | None) -> str:
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M") if at else "-"


def cmd_memory(args: argparse.Namespace, settings: Settings) -> int:
    action = args.memory_action

    async def work(stores: Stores, pipeline: Pipeline) -> int:
        if action == "list":
            rows = await pipeline.memory_records(args.team, args.channel)
            if args.json:
                print(json.dumps([{**r.model_dump(), "suspect": r.suspect} for r in rows], ensure_ascii=False,
                                 indent=2))
                return 0
            from rich.console import Console
            from rich.table import Table

            table = Table(title=f"{len(rows):,} memory records")
            for col in ("id", "workspace", "channel", "scope", "kind", "said", "shown", "cited", "text"):
                table.add_column(col)
            for r in rows:
                mark = (f" (superseded by {r.superseded_by})" if r.superseded_by else "") + \
                    (" (SUSPECT: its source was edited since)" if r.suspect else "")
                table.add_row(r.id, r.workspace, r.channel, f"{r.scope}/{r.visibility}", r.kind, _when(r.said_at),
                              str(r.shown), str(r.uses), r.text[:100] + mark)
            Console(width=200).print(table)
            return 0
        if action == "show":
            record = await pipeline.memory_record(args.record_id, args.team)
            print(json.dumps({**record.model_dump(), "suspect": record.suspect}, ensure_ascii=False, indent=2))
            return 0
        if action == "forget":
            if args.all:
                if not args.team:
                    raise ThreadkeeperError("forget --all needs --team (the workspace whose memory goes)")
                print(f"deleted {await pipeline.forget_memory(args.team):,} memory keys of workspace {args.team}")
                return 0
            if not args.record_id:
                raise ThreadkeeperError("name a record id to forget (or --all --team T for a workspace's memory)")
            record = await pipeline.forget_memory_record(args.record_id, args.team)
            print(f"forgot {record.id} ({record.kind} from {record.conversation})")
            return 0
        if action in ("enable", "disable"):
            await pipeline.switch_memory(args.team, args.channel, action == "enable")
            where = f"channel {args.channel} of workspace {args.team}" if args.channel else f"workspace {args.team}"
            print(f"memory {action}d for {where}" + ("" if "*" in settings.threadkeeper_memory_workspaces or
                                                    args.team in settings.threadkeeper_memory_workspaces.split(",")
                                                    else "; THREADKEEPER_MEMORY_WORKSPACES does not allow this "
                                                         "workspace yet, so it stays off until it does"))
            return 0
        if action == "extract":
            result = await pipeline.extract_memory(args.conversation_id)
            print(f"{result.conversation_id}: {result.outcome}, {result.records} records from {result.messages} new "
                  f"messages, {result.model_calls} model calls" + (f" ({result.error})" if result.error else ""))
            return 0 if result.outcome in ("succeeded", "succeeded_empty") else 1
        if action == "consolidate":
            version = await pipeline.consolidate_memory(args.team, args.channel)
            scope = f"channel:{args.channel}" if args.channel else "workspace"
            if version is None:
                print(f"{scope} of {args.team} is being consolidated by another worker")
                return 1
            print(f"{scope} of {args.team}: version {version.number}, {len(version.records)} records, "
                  f"{len(version.merged)} merged, {len(version.superseded)} superseded, {len(version.dropped)} dropped")
            return 0
        raise AssertionError(action)

    return asyncio.run(with_pipeline(settings, work, read_only=action in ("list", "show")))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("memory", help="memory across conversations: list, show, forget, switch, extract, consolidate")
    mem = p.add_subparsers(dest="memory_action", required=True)
    c = mem.add_parser("list", help="the live records (of one workspace or channel)")
    c.add_argument("--team", help="only this workspace's records (a Slack team id)")
    c.add_argument("--channel", help="only this channel's records (a channel id)")
    c.add_argument("--json", action="store_true", help="print the records as JSON")
    c = mem.add_parser("show", help="one record, every field")
    c.add_argument("record_id", help="the record's id (mem_…), as memory list shows it")
    c.add_argument("--team", help="look in this workspace only (a Slack team id)")
    c = mem.add_parser("forget", help="delete one record (or, with --all --team, a workspace's whole memory)")
    c.add_argument("record_id", nargs="?", help="the record's id (mem_…)")
    c.add_argument("--team", help="the workspace (a Slack team id); required with --all")
    c.add_argument("--all", action="store_true", help="delete every memory key of the workspace of --team")
    for name, text in (("enable", "turn memory on"), ("disable", "turn memory off")):
        c = mem.add_parser(name, help=f"{text} for a workspace, or one channel of it")
        c.add_argument("--team", required=True, help="the workspace (a Slack team id)")
        c.add_argument("--channel", help="only this channel (a channel id)")
    c = mem.add_parser("extract", help="extract a conversation's new messages now (idle or not)")
    c.add_argument("conversation_id", help="the conversation (slack:<team>:<channel>:<thread ts>)")
    c = mem.add_parser("consolidate", help="consolidate a channel's (or the workspace's) records now")
    c.add_argument("--team", required=True, help="the workspace (a Slack team id)")
    c.add_argument("--channel", help="this channel's scope (default: the workspace scope)")
    p.set_defaults(func=cmd_memory)
