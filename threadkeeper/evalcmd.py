"""``threadkeeper eval continuity``: runs the continuity evals and prints their tables."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from .logs import WorkProgress, quiet_turn_lines, stderr_console
from .plots import check_plot
from .settings import Settings, SettingsError
from .stores import open_stores


def windows_list(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a comma-separated list of whole numbers") from None
    if not out or any(v < 1024 for v in out):
        raise argparse.ArgumentTypeError("windows must be whole numbers of at least 1024 tokens")
    return out


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    quiet_turn_lines(settings.threadkeeper_log_level)  # thousands of turns: the tables say what happened

    from threadkeeper.evals import (
        BENCHMARK_WINDOWS,
        DEFAULT_WINDOWS,
        load_benchmark,
        load_cases,
        misses,
        run_matrix,
        skipped_text,
        summarize,
    )
    from threadkeeper.evals.generator import MIN_MESSAGES, STYLES
    from threadkeeper.services import ModelClient

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    check_plot(args.plot)
    if args.model:
        settings = settings.model_copy(update={"ai_model": args.model})
    generated = args.benchmark == "generated"
    if generated and args.path:
        raise SettingsError("--path needs --benchmark realtalk or beam (generated threads use --dataset)")
    if not generated and args.dataset:
        raise SettingsError(f"--dataset is for generated threads; with --benchmark {args.benchmark} use --path")
    benchmark = None if generated else load_benchmark(args.benchmark, args.path, limit=args.limit)
    if generated and not args.dataset and args.messages < MIN_MESSAGES:
        raise SettingsError(f"--messages must be at least {MIN_MESSAGES} (a generated thread's room for its planted "
                            "facts)")
    styles = [st.strip() for st in args.styles.split(",") if st.strip()]
    unknown_styles = [st for st in styles if st not in STYLES]
    if unknown_styles or not styles:
        raise SettingsError(f"unknown --styles {', '.join(unknown_styles) or '(none)'}; choose from {', '.join(STYLES)}")
    cases = benchmark.cases if benchmark else load_cases(args.dataset, threads=args.threads, seed=args.seed,
                                                         messages=args.messages, styles=styles)[:args.limit]
    if args.windows is None:
        args.windows = list(DEFAULT_WINDOWS if generated else BENCHMARK_WINDOWS)
    judge = ModelClient(args.judge_model, timeout_seconds=settings.ai_timeout_seconds) if args.judge_model else None
    if judge and args.model is None:
        raise SettingsError("--judge-model needs --model: the offline model cannot answer the probes' questions")

    async def work() -> int:
        # Every run writes under a key prefix of its own and removes its keys afterwards.
        async with open_stores(settings) as stores:
            total = len(cases) * len(strategies) * len(args.windows)
            with WorkProgress("continuity eval", total) as bar:
                results = await run_matrix(settings, cases, strategies, args.windows, turn_every=args.turn_every,
                                           client=stores.client, judge=judge, ask=args.ask,
                                           progress=lambda label: bar.update(advance=1, what=label))
        rows = summarize(results)
        if benchmark is not None:
            heading = f"continuity on {args.benchmark}: {len(cases)} chats, {benchmark.questions} questions"
            _benchmark_table(rows, f"{heading}; the standing context, answers kept on content")
            print(skipped_text(benchmark.skipped))
        else:
            heading = f"continuity: {len(cases)} threads, {sum(len(c.probes) for c in cases)} probes"
            _probe_table(rows, heading)
        if any("asked" in r for r in rows):
            _asked_table(rows, "each question asked as the next message: the context built for it (recall included), "
                               "answers kept on content, baselines at the same spend")
        report = {"results": rows, "threads": [c.name for c in cases], "strategies": strategies,
                  "windows": args.windows, "turn_every": args.turn_every, "model": settings.ai_model,
                  "benchmark": args.benchmark}
        if benchmark is not None:
            report.update({"path": str(args.path), "questions": benchmark.questions,
                           "questions_skipped": dict(benchmark.skipped)})
        else:
            report.update({"seed": args.seed, "messages_per_thread": args.messages if not args.dataset else None})
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=2)
            stderr_console().print(f"results written to {args.json}")
        if args.misses:
            missed = misses(results, cases)
            with open(args.misses, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(row) + "\n" for row in missed)
            stderr_console().print(f"{len(missed)} questions missed, written to {args.misses}")
        if args.plot:
            from . import plots

            plots.continuity(rows, args.plot, title=f"{heading}, model {settings.ai_model}")
            stderr_console().print(f"plot written to {args.plot}")
        return 0

    return asyncio.run(work())


def _probe_table(rows: list[dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    kinds = sorted({k for r in rows for k in r["retention"] if k != "overall"})
    table = Table(title=title)
    for col in ["strategy", "window", "overall", *kinds, "superckpt err", "ctx tokens", "compactions"]:
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for r in rows:
        ret = r["retention"]
        table.add_row(r["strategy"], f"{r['window']:,}", f"{ret['overall']:.0%}",
                      *[f"{ret[k]:.0%}" if k in ret else "-" for k in kinds], str(r["supercheckpoint_errors"]),
                      f"{r['context_tokens']:,}", f"{r['compactions']:g}")
    Console(width=220).print(table)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _benchmark_table(rows: list[dict[str, Any]], title: str) -> None:
    """The standing context (no question yet): answers kept on content, against keep-newest at the same spend."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("strategy", "window", "answers kept", "keep-newest (same spend)", "ratio", "cited",
                "ctx tokens", "compactions", "answerable / questions"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for r in rows:
        st = r["standing"]
        table.add_row(r["strategy"], f"{r['window']:,}", _pct(st["content"]), _pct(st["keep_newest"]),
                      "-" if st["over_baseline"] is None else f"{st['over_baseline']:.2f}", _pct(st["cited"]),
                      f"{r['context_tokens']:,}", f"{r['compactions']:g}", f"{st['answerable']:,} / {st['questions']:,}")
    Console(width=220).print(table)


def _asked_table(rows: list[dict[str, Any]], title: str) -> None:
    """Questions asked after the thread: answers kept in the context built for each, beside the baselines."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    benchmark = any("content" in r["asked"] for r in rows if "asked" in r)
    cols = ("strategy", "window", "answers kept", "BM25 pick", "recent + BM25", "BM25 ±1", "keep-newest",
            "over best baseline", "without recall", "cited", "ctx tokens", "answerable / questions") if benchmark \
        else ("strategy", "window", "kept", "identifiers", "ctx tokens", "probes")
    for col in cols:
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for r in rows:
        a = r.get("asked")
        if a is None:
            continue
        if benchmark:
            table.add_row(r["strategy"], f"{r['window']:,}", _pct(a["content"]), _pct(a["bm25"]),
                          _pct(a["recent_bm25"]), _pct(a.get("bm25_neighbours")), _pct(a["keep_newest"]),
                          "-" if a["over_baseline"] is None else f"{a['over_baseline']:.2f}",
                          _pct(a["without_recall"]), _pct(a["cited"]), f"{a['context_tokens']:,}",
                          f"{a['answerable']:,} / {a['questions']:,}")
        else:
            table.add_row(r["strategy"], f"{r['window']:,}", _pct(a["retention"]["overall"]),
                          _pct(a["retention"].get("identifier")), f"{a['context_tokens']:,}", f"{a['probes']:,}")
    Console(width=220).print(table)


def cmd_eval_memory(args: argparse.Namespace, settings: Settings) -> int:
    """``threadkeeper eval memory``: each session a thread of one channel, each question a new thread."""
    quiet_turn_lines(settings.threadkeeper_log_level)
    from rich.console import Console
    from rich.table import Table

    from threadkeeper.evals import load_benchmark, skipped_text
    from threadkeeper.evals.memory import run_memory, summarize_memory

    check_plot(args.plot)
    benchmark = load_benchmark(args.benchmark, args.path, limit=args.limit)

    async def work() -> int:
        async with open_stores(settings) as stores:
            with WorkProgress("memory eval", len(benchmark.cases) * len(args.windows)) as bar:
                results = await run_memory(settings, benchmark.cases, args.windows, client=stores.client,
                                           progress=lambda label: bar.update(advance=1, what=label))
        rows = summarize_memory(results)
        table = Table(title=f"memory across conversations on {args.benchmark}: {len(benchmark.cases)} chats, each "
                            "session a thread of one channel, each question asked in a new thread; answers kept on "
                            "content, baselines at the same spend")
        for col in ("window", "memory", "in records", "BM25 pick (other threads)", "BM25 ±1", "no memory", "over best baseline",
                    "tokens shown",
                    "records shown", "records", "extract ms / 1k msgs", "answerable / questions"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(f"{r['window']:,}", _pct(r["memory"]), _pct(r["in_records"]), _pct(r["bm25"]), _pct(r["bm25_neighbours"]),
                          _pct(r["no_memory"]), "-" if r["over_best"] is None else f"{r['over_best']:.2f}",
                          f"{r['mean_spend']:.0f}",
                          f"{r['mean_shown']:.1f}", f"{r['records']:,}", f"{r['extract_ms_per_1000_messages']:.0f}",
                          f"{r['answerable']:,} / {r['questions']:,}")
        Console(width=220).print(table)
        print(skipped_text(benchmark.skipped))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump({"benchmark": args.benchmark, "path": str(args.path), "windows": args.windows,
                           "results": rows, "chats": [c.name for c in benchmark.cases]}, fh, indent=2)
            stderr_console().print(f"results written to {args.json}")
        if args.plot:
            from . import plots

            chats = len(benchmark.cases)
            plots.memory(rows, args.plot, title=f"memory across conversations on {args.benchmark}, {chats} "
                                                f"chat{'' if chats == 1 else 's'}")
            stderr_console().print(f"plot written to {args.plot}")
        return 0

    return asyncio.run(work())


def cmd_eval_redaction(args: argparse.Namespace, settings: Settings) -> int:
    """``threadkeeper eval redaction``: secrets from a public rule set's samples, put in chat messages, through the
    redaction the bot applies before anything is stored; beside a plain entropy rule at the same false-positive rate."""
    from rich.console import Console
    from rich.table import Table

    from threadkeeper.evals.redaction import (
        PHRASINGS,
        SPLIT_PHRASINGS,
        alone,
        chat_pairs,
        evaluate,
        load_source,
        report,
        split_scores,
    )
    from threadkeeper.services.safety import redact_after

    corpus = load_source(args.source, args.path, seed=args.seed)
    result = report(evaluate(corpus))
    ours, base = result["ours"], result["baseline"]
    half = (len(corpus.vendors) + 1) // 2
    console = Console(width=160)
    table = Table(title=f"secrets removed, {args.source} samples from {args.path}: {len(corpus.secrets)} secrets of "
                        f"{len(corpus.vendors)} vendors, each in {len(PHRASINGS)} messages; tuning vendors "
                        f"{corpus.vendors[0]}…{corpus.vendors[half - 1]}, held out {corpus.vendors[half]}…"
                        f"{corpus.vendors[-1]}")
    for col in ("phrasing", "tuning", f"entropy ≥ {result['baseline_bits']:.1f} bits", "held-out",
                f"entropy ≥ {result['baseline_bits']:.1f} bits "):
        table.add_column(col, justify="left" if col == "phrasing" else "right")

    def cell(who: dict[str, Any] | None, group: str, key: str) -> str:
        return "-" if who is None or key not in who[group] else _pct(who[group][key]["share"])

    for name in PHRASINGS:
        table.add_row(name, *(cell(who, "phrasings", f"{h} / {name}") for h in ("tuning", "held-out")
                              for who in (ours, base)))
    table.add_row("all", *(cell(who, "halves", h) for h in ("tuning", "held-out") for who in (ours, base)))
    console.print(table)
    negatives = Table(title="negatives left intact (the baseline's threshold is the lowest that leaves as many)")
    for col in ("negatives", "count", "redaction", "entropy baseline"):
        negatives.add_column(col, justify="left" if col == "negatives" else "right")
    for kind, score in ours["intact"].items():
        negatives.add_row(kind, f"{score['n']:,}", _pct(score["share"]), cell(base, "intact", kind))
    console.print(negatives)
    if args.by_vendor:
        vendors = Table(title="secrets removed by vendor")
        for col in ("vendor", "half", "messages", "redaction", "entropy baseline"):
            vendors.add_column(col, justify="left" if col in ("vendor", "half") else "right")
        for vendor in corpus.vendors:
            score = ours["vendors"][vendor]
            vendors.add_row(vendor, "held-out" if corpus.held_out(vendor) else "tuning", f"{score['n']:,}",
                            _pct(score["share"]), cell(base, "vendors", vendor))
        console.print(vendors)
    split = {who: split_scores(corpus, pair) for who, pair in (("alone", alone), ("with context", redact_after))}
    splits = Table(title="a secret over two messages of one person: removed, each message redacted alone → with its "
                         "author's previous message")
    for col in ("phrasing", "tuning", "held-out"):
        splits.add_column(col, justify="left" if col == "phrasing" else "right")
    for name in SPLIT_PHRASINGS:
        splits.add_row(name, *(" → ".join(_pct(split[who]["phrasings"][(h, name)].share)
                                          for who in ("alone", "with context")) for h in ("tuning", "held-out")))
    for kind, score in split["with context"]["after_name"].items():
        splits.add_row(f"negatives intact after a message ending in a secret's name: {kind}", _pct(score.share),
                       f"n = {score.secrets:,}")
    console.print(splits)
    out_split: dict[str, Any] = {who: {"phrasings": {" / ".join(k): {"share": v.share, "n": v.secrets}
                                                     for k, v in r["phrasings"].items()},
                                       "after_name": {k: {"share": v.share, "n": v.secrets}
                                                      for k, v in r["after_name"].items()}}
                                 for who, r in split.items()}
    if args.pairs:
        from threadkeeper.evals.benchmarks import load_benchmark

        bench = load_benchmark(args.pairs_benchmark, args.pairs)
        chats = [[(m["author"], m["text"]) for m in case.data["messages"]] for case in bench.cases]
        pairs = chat_pairs(chats)
        print(f"conversations people wrote ({args.pairs}, {len(chats)} conversations):")
        for key, what in (("consecutive", "messages changed by their author's previous message"),
                          ("after_name", "messages changed after a message ending in a secret's name"),
                          ("beyond_value", "of those, changed beyond their first word")):
            score = pairs[key]
            print(f"  {what}: {score.removed:,} of {score.secrets:,}")
        for ending, text, now in pairs["examples"]:
            print(f"    {ending!r} then {text!r} -> {now!r}")
        out_split["pairs"] = {k: {"changed": v.removed, "n": v.secrets} for k, v in pairs.items() if k != "examples"}
        out_split["pairs"]["examples"] = pairs["examples"]
    skipped = ", ".join(f"{n} ({why})" for why, n in sorted(corpus.skipped.items()))
    print(f"samples skipped: {skipped or 0}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"source": args.source, "path": str(args.path), "seed": args.seed, "vendors": corpus.vendors,
                       "secrets": len(corpus.secrets), "negatives": len(corpus.negatives), **result,
                       "split": out_split}, fh, indent=2)
    return 0


def cmd_eval_instructions(args: argparse.Namespace, settings: Settings) -> int:
    """``threadkeeper eval instructions``: instructions aimed at an assistant, from a public prompt-injection set, and
    look-alike facts, each posted as a person's message through the ledger, the handoff and ``record_state``; beside
    a cue-word baseline at the same false-positive rate."""
    from rich.console import Console
    from rich.table import Table

    from threadkeeper.evals.instructions import FACT, KINDS, evaluate, load_source, report

    corpus = load_source(args.source, args.path, args.facts)
    with WorkProgress("instructions eval", len(corpus.items)) as bar:
        result = report(evaluate(corpus, progress=lambda done: bar.update(done)))
    console = Console(width=170)
    table = Table(title=f"where a person's words go: {len(corpus.items):,} texts from {', '.join(corpus.sources)}; "
                        f"cue-word baseline flags at ≥ {result['baseline_k']} cues (facts kept: bot "
                        f"{_pct(result['facts_kept'])}, baseline {_pct(result['baseline_facts_kept'])})")
    for col in ("texts", "half", "n", "as the assistant's own", "not recognised", "baseline: not flagged",
                "accepted by record_state", "baseline: accepted"):
        table.add_column(col, justify="left" if col in ("texts", "half") else "right")
    for kind in KINDS:
        for half in ("tuning", "held-out", "all"):
            row = result["groups"].get(f"{half} / {kind}")
            if row is None:
                continue
            fact = kind == FACT
            # for facts the columns read the other way: "not recognised" is a fact kept as a fact
            table.add_row(kind if half == "tuning" else "", half, f"{row['n']:,}", _pct(row["as_own"]),
                          _pct(row["not_recognised"]) + (" kept" if fact else ""),
                          _pct(row["baseline_not_flagged"]) + (" kept" if fact else ""),
                          _pct(row["accepted_by_record_state"]), _pct(row["baseline_not_flagged"]))
    console.print(table)
    if args.by_language:
        languages = Table(title="by language (all halves)")
        for col in ("language", "texts", "n", "as the assistant's own", "not recognised", "accepted by record_state",
                    "baseline: not flagged"):
            languages.add_column(col, justify="left" if col in ("language", "texts") else "right")
        for key, row in sorted(result["languages"].items()):
            language, kind = key.split(" / ", 1)
            languages.add_row(language, kind, f"{row['n']:,}", _pct(row["as_own"]), _pct(row["not_recognised"]),
                              _pct(row["accepted_by_record_state"]), _pct(row["baseline_not_flagged"]))
        console.print(languages)
    refused = {kind: result["groups"][f"all / {kind}"]["refused_because"] for kind in KINDS
               if f"all / {kind}" in result["groups"]}
    print("record_state refused, by reason: " + "; ".join(
        f"{kind}: " + (", ".join(f"{why} {n}" for why, n in sorted(reasons.items())) or "none")
        for kind, reasons in refused.items()))
    skipped = ", ".join(f"{n} ({why})" for why, n in sorted(corpus.skipped.items()))
    print(f"treebank sentences and files skipped: {skipped or 0}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"source": args.source, "path": str(args.path), "facts": [str(f) for f in args.facts],
                       "sources": corpus.sources, "texts": len(corpus.items), **result}, fh, indent=2)
    return 0
