"""Operator commands: ``bench``, ``forget`` and ``compact`` (the internal compaction command)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from threadkeeper.persistence import ThreadkeeperError

from .logs import quiet_turn_lines, stderr_console
from .settings import Settings
from .stores import Stores, with_pipeline, with_stores

if TYPE_CHECKING:
    from threadkeeper.services import Pipeline


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from .bench import peer_note, run_bench, targets

    console = stderr_console()
    quiet_turn_lines(settings.threadkeeper_log_level)  # thousands of turns: the table says what happened

    async def work() -> tuple[dict[str, float], str]:
        with console.status("benchmarking") as status:
            metrics = await run_bench(settings, quick=args.quick, progress=lambda text: status.update(text))
        return metrics, await peer_note(settings)

    metrics, peer = asyncio.run(work())
    table = Table(title="threadkeeper bench" + (" (quick)" if args.quick else ""))
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target")
    table.add_column("")
    checked = targets(metrics)
    for key, value in metrics.items():
        target, met = checked.get(key, ("", True))
        table.add_row(key, f"{value:,}", target, ("met" if met else "MISSED") if target else "")
    Console(width=120).print(table)
    missed = [k for k, (_, met) in checked.items() if not met]
    print(f"targets: {len(checked) - len(missed)} of {len(checked)} met" + (f"; missed: {', '.join(missed)}" if missed
                                                                            else ""))
    print(f"langgraph-checkpoint-redis not measured: {peer}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(metrics, fh, indent=2)
    return 0


async def _conversation_memory(stores: Stores, conversation_id: str) -> int:
    """Delete the memory records derived from a conversation (before its messages go)."""
    from threadkeeper.services import Tokenizer
    from threadkeeper.services.memory import Memory

    memory = Memory(stores.memory, stores.checkpoints, stores.notes, Tokenizer("gpt-4o"))
    return await memory.forget_conversation(conversation_id)


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores) -> int:
        if args.team:
            cids = await stores.forget.conversations_of_team(args.target)
            if not args.yes:
                print(f"would delete {len(cids):,} conversations of workspace {args.target} and its memory; "
                      "run again with --yes to delete them")
                return 1
            deleted, busy = await stores.forget.team(args.target)
            deleted += await stores.memory.forget_workspace(args.target)  # and every record derived from them
            print(f"deleted {deleted:,} keys of {len(cids) - len(busy):,} conversations of workspace {args.target}"
                  + (f"; {len(busy)} have a turn running, run again once it has finished" if busy else ""))
            return 0 if not busy else 3
        found = await stores.forget.keys_of(args.target)
        if not found:
            raise ThreadkeeperError(f"no conversation {args.target!r} in this store (prefix "
                                    f"{settings.threadkeeper_key_prefix!r}); check the id and THREADKEEPER_KEY_PREFIX")
        if not args.yes:
            print(f"would delete {len(found):,} keys of {args.target} (its whole history, every checkpoint); "
                  "run again with --yes to delete them")
            return 1
        memory = await _conversation_memory(stores, args.target)
        print(f"deleted {await stores.forget.conversation(args.target):,} keys of {args.target}"
              + (f" and {memory:,} memory records derived from it" if memory else ""))
        return 0

    return asyncio.run(with_stores(settings, work))


REASONS = ("manual", "handoff", "model-upgrade")


def cmd_compact(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores, pipeline: Pipeline) -> int:
        report = await pipeline.compact(args.conversation_id, dry_run=args.dry_run, reason=args.reason,
                                        with_model=args.with_model)
        if args.json:
            keys = ("conversation_id", "previous_checkpoint_id", "new_checkpoint_id", "tokens_before", "tokens_after",
                    "kept_messages", "dropped_messages", "summary_tokens", "headroom_tokens", "strategy",
                    "duration_ms")
            data = report.as_dict()
            out = {k: data[k] for k in keys}
            out.update({"reason": report.reason, "generation": report.generation, "tightened": report.tightened,
                        "carried": report.carried, "dry_run": report.dry_run, "superseded": report.superseded,
                        "notes": report.notes})
            print(json.dumps(out, indent=2))
        else:
            print(report.line() + (" (dry run: nothing written)" if report.dry_run else "")
                  + (" (the head moved meanwhile: the fork was superseded)" if report.superseded else ""))
        return 1 if report.superseded else 0

    return asyncio.run(with_pipeline(settings, work, model=args.target_model))
