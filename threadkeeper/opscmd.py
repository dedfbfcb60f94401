"""Operator commands: ``bench``, ``forget``, ``dead-letters`` and ``compact`` (the internal compaction command)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from threadkeeper.persistence import ThreadkeeperError

from .logs import WorkProgress, quiet_turn_lines, stderr_console
from .plots import check_plot
from .settings import Settings
from .stores import Stores, with_pipeline

if TYPE_CHECKING:
    from threadkeeper.services import Pipeline


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from rich.console import Console
    from rich.table import Table

    from .bench import checked, run_bench
    from .bench_peer import langgraph_redis_rows

    check_plot(args.plot)
    quiet_turn_lines(settings.threadkeeper_log_level)  # thousands of turns: the table says what happened

    notes: list[str] = []

    async def work() -> tuple[dict[str, float], str | None]:
        with WorkProgress("bench", None) as phases:
            metrics = await run_bench(settings, quick=args.quick, progress=lambda text: phases.update(what=text),
                                      notes=notes)
            peer = await langgraph_redis_rows(settings, quick=args.quick, progress=lambda text: phases.update(what=text))
        return {**metrics, **peer.rows}, peer.note

    metrics, peer = asyncio.run(work())
    table = Table(title="threadkeeper bench" + (" (quick)" if args.quick else ""))
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target")
    table.add_column("")
    rows = checked(metrics)
    by_metric = {t.metric: t for t in rows}
    for key, value in metrics.items():
        t = by_metric.get(key)
        table.add_row(key, f"{value:,}", t.shown if t else "", ("met" if t.met else "MISSED") if t else "")
    Console(width=120).print(table)
    missed = [t.metric for t in rows if not t.met]
    print(f"targets: {len(rows) - len(missed)} of {len(rows)} met" + (f"; missed: {', '.join(missed)}" if missed
                                                                      else ""))
    for note in [*notes, *([peer] if peer else [])]:
        print(note)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(metrics, fh, indent=2)
    if args.plot:
        from . import plots

        plots.bench(rows, args.plot, title="threadkeeper bench" + (" (quick)" if args.quick else ""))
        stderr_console().print(f"plot written to {args.plot}")
    return 0


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores, pipeline: Pipeline) -> int:
        if args.team:
            cids = await pipeline.conversations_of_workspace(args.target)
            if not args.yes:
                print(f"would delete {len(cids):,} conversations of workspace {args.target} and its memory; "
                      "run again with --yes to delete them")
                return 1
            deleted, busy = await pipeline.forget_workspace(args.target)
            print(f"deleted {deleted:,} keys of {len(cids) - len(busy):,} conversations of workspace {args.target}"
                  + (f"; {len(busy)} have a turn running, run again once it has finished" if busy else ""))
            return 0 if not busy else 3
        found = await pipeline.forgettable(args.target)
        if not found:
            raise ThreadkeeperError(f"no conversation {args.target!r} in this store (prefix "
                                    f"{settings.threadkeeper_key_prefix!r}); check the id and THREADKEEPER_KEY_PREFIX")
        if not args.yes:
            print(f"would delete {len(found):,} keys of {args.target} (its whole history, every checkpoint); "
                  "run again with --yes to delete them")
            return 1
        forgotten = await pipeline.forget(args.target)
        print(f"deleted {forgotten.keys:,} keys of {args.target}"
              + (f" and {forgotten.records:,} memory records derived from it" if forgotten.records else ""))
        return 0

    return asyncio.run(with_pipeline(settings, work, read_only=True))  # nothing stored: nothing to forget


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

    return asyncio.run(with_pipeline(settings, work, model=args.target_model, read_only=True))


def _dead_letter(raw: str) -> dict[str, object]:
    """One dead letter as ``dead-letters list`` shows it: why this version cannot read it (None: it can now, and
    ``retry`` queues it), and the start of what was stored."""
    from threadkeeper.persistence import why_unreadable

    return {"unreadable": why_unreadable(raw), "stored": raw if len(raw) <= 160 else raw[:157] + "..."}


def cmd_dead_letters(args: argparse.Namespace, settings: Settings) -> int:
    async def work(stores: Stores, pipeline: Pipeline) -> int:
        if args.action == "list":
            counts = await pipeline.dead_letter_counts()
            if args.conversation_id is not None:
                await pipeline.exists(args.conversation_id)  # (an id no conversation can have is refused here)
                counts = {c: n for c, n in counts.items() if c == args.conversation_id}
            listed = {cid: [_dead_letter(raw) for raw in await pipeline.dead_letters(cid)] for cid in counts}
            if args.json:
                print(json.dumps([{"conversation_id": cid, "items": items} for cid, items in listed.items()],
                                 indent=2))
                return 0
            if not listed:
                print("no dead letters")
                return 0
            for cid, items in listed.items():
                print(f"{cid}: {len(items)} dead letter{'s' if len(items) != 1 else ''}")
                for n, item in enumerate(items):
                    why = item["unreadable"] or "readable by this version: `retry` queues it again"
                    print(f"  [{n}] {why}\n      {item['stored']}")
            return 0
        if not args.conversation_id and not args.all:
            raise ThreadkeeperError("name a conversation to retry (threadkeeper dead-letters list shows them), "
                                    "or pass --all")
        targets = list(await pipeline.dead_letter_counts()) if args.all else [args.conversation_id]
        queued_total, kept_total = 0, 0
        for cid in targets:
            queued, kept = await pipeline.retry_dead_letters(cid)
            queued_total += queued
            kept_total += len(kept)
            print(f"{cid}: {queued} queued again" + (f", {len(kept)} still unreadable" if kept else ""))
            for why in kept:
                print(f"  kept: {why}")
        print(f"queued {queued_total} dead letters again; a worker's sweep answers them"
              + (f"; {kept_total} this version cannot read are kept" if kept_total else ""))
        return 0 if not kept_total else 3

    return asyncio.run(with_pipeline(settings, work, read_only=True))
