"""The ``threadkeeper`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone


from persistence import ThreadkeeperError, ping

from .root import Stores, build_stores
from .settings import Settings, load_settings

log = logging.getLogger("threadkeeper")


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


async def _with_stores(settings: Settings, work: Callable[[Stores], Awaitable[int]]) -> int:
    stores = build_stores(settings)
    try:
        await ping(stores.client, settings.redis_url or "(in-process)")
        return await work(stores)
    finally:
        await stores.close()


def cmd_history(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores) -> int:
        rows = await stores.checkpoints.lineage(args.conversation_id)
        if args.json:
            print(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
            return 0
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"lineage of {args.conversation_id}", show_lines=False)
        for col in ("", "checkpoint", "kind", "status", "parent", "forked_from", "messages", "tokens", "created"):
            table.add_column(col, justify="right" if col in ("messages", "tokens") else "left")
        for row in rows:
            table.add_row("HEAD" if row.is_head else "", row.id, row.kind.value, row.status.value, row.parent or "-",
                          row.forked_from or "-", f"{row.message_count:,}", f"{row.token_total:,}",
                          _stamp(row.created_at))
        Console(width=200).print(table)
        return 0

    return asyncio.run(_with_stores(settings, work))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="threadkeeper", description="A Slack bot that never loses the thread.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("history", help="show a conversation's checkpoint lineage, oldest first")
    p.add_argument("conversation_id")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_history)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        logging.basicConfig(level=settings.threadkeeper_log_level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        func: Callable[[argparse.Namespace, Settings], int] = args.func
        return func(args, settings)
    except ThreadkeeperError as exc:
        print(f"threadkeeper: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


