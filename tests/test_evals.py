"""The continuity eval, small: the product's strategy beats recency and keeps every planted identifier at 16k."""

from __future__ import annotations

import json
from pathlib import Path

import fakeredis
import pytest
from test_budget_and_cli import cli

from threadkeeper.evals import generate_thread, grade, load_cases, run_matrix, summarize
from threadkeeper.root import build_pipeline, build_stores
from threadkeeper.services import parse_thread, replay
from threadkeeper.settings import Settings


def test_generator_is_deterministic_and_probes_cite_real_messages() -> None:
    one, two = generate_thread(3, messages=400), generate_thread(3, messages=400)
    assert one.as_dict() == two.as_dict()
    ids = {m["id"] for m in one.messages}
    kinds = {p["kind"] for p in one.probes}
    assert {"identifier", "decision", "constraint", "pinned", "suspect"} <= kinds
    assert all(set(p["evidence"]) <= ids for p in one.probes)
    assert generate_thread(4, messages=400).as_dict() != one.as_dict()


def _ids(n: int) -> list[str]:
    return [f"17000000{i:02d}.{i:06d}" for i in range(1, n + 1)]


def test_graders_distinguish_kept_lost_and_stale() -> None:
    m = _ids(13)
    originals = {m[0]: "Filed OPS-1234 for the billing timeouts.", m[1]: "@threadkeeper can you draft the runbook?",
                 m[2]: "@threadkeeper can you draft the rollback checklist?",
                 m[3]: "@threadkeeper scratch that, instead the capacity plan",
                 m[4]: "@threadkeeper summarize OPS-1234?",
                 m[5]: "Done: summary posted.", m[6]: "We decided to go with Kafka for billing.",
                 m[7]: "Reversing the decision on billing: we go with NATS instead of Kafka.",
                 m[8]: "The public rate limit for search is 450 req/s.",
                 m[9]: "The public rate limit for checkout is 300 req/s.",
                 m[10]: "Reminder: billing changes must not ship on Fridays.", m[11]: "@threadkeeper plan the offsite?",
                 m[12]: "We decided to go with Terraform for ledger."}
    probes = [{"id": "ident", "kind": "identifier", "answer": "OPS-1234", "evidence": [m[0]]},
              {"id": "open", "kind": "open_ask", "answer": "runbook", "evidence": [m[1]]},
              {"id": "gone", "kind": "open_ask", "answer": "rollback checklist", "evidence": [m[2]]},
              {"id": "superseded", "kind": "superseded_ask", "answer": "no", "evidence": [m[2], m[3]]},
              {"id": "answered", "kind": "open_ask", "answer": "summary", "evidence": [m[4]]},
              {"id": "resolved", "kind": "resolved_ask", "answer": "no", "evidence": [m[4], m[5]]},
              {"id": "decision", "kind": "decision", "answer": "go with Kafka for billing", "evidence": [m[6]]},
              {"id": "reversed", "kind": "reversed_decision", "answer": "go with Kafka", "evidence": [m[6], m[7]]},
              {"id": "edited", "kind": "suspect", "answer": originals[m[8]], "evidence": [m[8]], "change": "edited"},
              {"id": "deleted", "kind": "suspect", "answer": originals[m[9]], "evidence": [m[9]], "change": "deleted"},
              {"id": "constraint", "kind": "constraint", "answer": originals[m[10]], "evidence": [m[10]]},
              {"id": "current", "kind": "open_ask", "answer": "offsite", "evidence": [m[11]]},
              {"id": "decision2", "kind": "decision", "answer": "go with Terraform for ledger", "evidence": [m[12]]}]
    header = ("[Threadkeeper handoff · generation 2 · covers 40 earlier messages from 2023-11-14 to 2023-11-15] "
              "This stands in for the earlier part of the thread; [ids] are message ids.")
    kept = "\n".join([
        header,
        f"Current ask [{m[11]}] erin: plan the offsite?",
        "Asks to the assistant:",
        f"- [ask {m[1]}] alice, open: draft the runbook",
        f"- [ask {m[2]}] bob, superseded by [{m[3]}]: draft the rollback checklist",
        f"- [ask {m[4]}] carol, answered by [{m[5]}]: summarize OPS-1234",
        "Decisions:",
        f"- [decision {m[6]}] alice, reversed by [{m[7]}]: We decided to go with Kafka for billing.",
        "Suspect (edited or deleted after it was written; confirm before relying on it):",
        f"- SUSPECT [{m[8]}] dan (edited after it was written; current text): The public rate limit for search "
        "is 225 req/s.",
        "Notes (the most informative things said, by day):",
        "2023-11-14",
        f"- alice: [{m[0]}] filed OPS-1234 billing timeouts; [{m[6]},{m[7]}] decided go Kafka billing",
        f"- carol: [{m[10]}] billing changes must not ship Fridays; [{m[12]}] decided go Terraform ledger",
    ])
    graded = {r.id: (r.kept, r.error) for r in grade(probes, [kept], originals)}
    assert graded == {k: (k != "gone", False) for k in graded}, graded  # a superseded ask is not kept open

    stale = "\n".join([
        header,
        f"- [ask {m[2]}] bob, open: draft the rollback checklist",     # superseded, shown as open
        f"- [ask {m[4]}] carol, open: summarize the incident",         # resolved, shown as open
        f"- [decision {m[6]}] alice: We decided to go with Kafka for billing.",  # reversed, shown as active
        f"- dan: [{m[8]}] public rate limit search 450 req/s",         # edited: old value, not marked
        f"- dan: [{m[9]}] public rate limit checkout 300 req/s",       # deleted, still presented
        f"- carol: [{m[10]}0] billing Fridays; [{m[12]}] go ledger; Terraform chosen",  # id prefix only
        f"- bob: [{m[1]}] go NATS payments; [{m[0]}] Kafka billing timeouts",  # no ask line, no OPS key
    ])
    graded = {r.id: (r.kept, r.error) for r in grade(probes, [stale], originals)}
    assert graded == {"ident": (False, False), "open": (False, False), "gone": (True, False),
                      "superseded": (False, True), "answered": (True, False), "resolved": (False, True),
                      "decision": (True, False), "reversed": (False, True), "edited": (False, True),
                      "deleted": (False, True), "constraint": (False, False), "current": (False, False),
                      "decision2": (False, False)}, graded

    # the old ask verbatim is kept open; a superseded one is not, even when its message is there verbatim
    verbatim = grade(probes[1:3], [originals[m[1]], originals[m[2]] + f"\n- [ask {m[2]}] bob, superseded by "
                                   f"[{m[3]}]: x"], originals)
    assert [r.kept for r in verbatim] == [True, False]


async def test_threadkeeper_beats_recency_and_keeps_identifiers_at_16k(redis_client) -> None:
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None)
    cases = load_cases(None, threads=1, seed=5, messages=700)
    rows = summarize(await run_matrix(settings, cases, ["recency", "threadkeeper"], [4000, 16000], turn_every=5,
                                      client=redis_client))
    by = {(r["strategy"], r["window"]): r for r in rows}
    for window in (4000, 16000):
        assert by[("threadkeeper", window)]["retention"]["overall"] > by[("recency", window)]["retention"]["overall"]
        assert by[("threadkeeper", window)]["within_budget"] and by[("threadkeeper", window)]["compaction_loops"] == 0
    assert by[("threadkeeper", 16000)]["retention"]["identifier"] == 1.0
    assert by[("threadkeeper", 16000)]["compactions"] >= 1


async def test_an_eval_run_leaves_nothing_of_its_conversation_behind(redis_client, monkeypatch) -> None:
    """What an eval run's turns leave running (a compaction planned ahead) ends before the run removes its keys: none
    is left under its prefix, also when the planning outlasts the replay."""
    import asyncio
    import uuid

    from threadkeeper.services.handoff.compactor import Compactor

    real = Compactor._prepare
    planned: list[str] = []

    async def slow(self, conversation_id, checkpoint_id, budget):  # type: ignore[no-untyped-def]
        planned.append(checkpoint_id)
        await asyncio.sleep(0.3)
        return await real(self, conversation_id, checkpoint_id, budget)

    monkeypatch.setattr(Compactor, "_prepare", slow)
    own = uuid.uuid4()  # (the run's prefix known here, and its own: another run may share the Redis)
    monkeypatch.setattr(uuid, "uuid4", lambda: own)
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None)
    await run_matrix(settings, load_cases(None, threads=1, seed=6, messages=400), ["threadkeeper"], [4000],
                     turn_every=5, client=redis_client)
    assert planned, "a compaction was planned ahead"
    left = [t for t in asyncio.all_tasks() if t.get_name().startswith("prepare:")]
    await asyncio.gather(*left)
    assert not left and not [k async for k in redis_client.scan_iter(match=f"tkeval-{own.hex[:10]}:*")]


def test_eval_cli_writes_json_and_plot_from_a_dataset_file(tmp_path: Path) -> None:
    dataset = tmp_path / "threads.json"
    dataset.write_text(json.dumps(generate_thread(9, messages=250).as_dict()))
    out, png = tmp_path / "out.json", tmp_path / "plot.png"
    result = cli("eval", "continuity", "--dataset", str(dataset), "--strategies", "recency,threadkeeper",
                 "--windows", "4000,8000", "--json", str(out), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert {(r["strategy"], r["window"]) for r in report["results"]} == {
        ("recency", 4000), ("recency", 8000), ("threadkeeper", 4000), ("threadkeeper", 8000)}
    for row in report["results"]:
        assert 0 <= row["retention"]["overall"] <= 1 and "identifier" in row["retention"]
        assert isinstance(row["supercheckpoint_errors"], int) and row["context_tokens"] > 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "threadkeeper" in result.stdout
    assert f"results written to {out}\n" in result.stderr, "a path is printed whole, never wrapped"
    assert f"plot written to {png}\n" in result.stderr
    bad = cli("eval", "continuity", "--strategies", "nope", "--threads", "1", "--messages", "100")
    assert bad.returncode == 2 and "unknown strategies" in bad.stderr


# The messy style's long messages compact about every five turns: 250 of them give some 45 compactions (500 gave
# 106, at three times the CPU), each checked against the target; the work style needs 500 for a dozen.
@pytest.mark.parametrize(("style", "messages"), [("work", 500), ("messy", 250)])
async def test_replayed_context_never_exceeds_the_trigger_and_compactions_meet_the_target(style: str,
                                                                                         messages: int) -> None:
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None)
    stores = build_stores(settings, client=fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    pipeline = build_pipeline(settings, stores, context_window=8000)
    thread = parse_thread(json.dumps(generate_thread(11, messages=messages, style=style).as_dict()), style)
    result = await replay(pipeline, thread, conversation=f"trigger:{style}", turn_every=5)
    budget = pipeline.budget
    history = sum(e["tokens"] for e in result["context"] if e["role"] != "system")
    assert len(result["compactions"]) >= 10 and history <= budget.trigger_tokens
    assert all(c["tokens_after"] <= budget.target_tokens for c in result["compactions"])
    report = await pipeline.context(f"trigger:{style}")
    assert report.context_tokens - budget.fixed_prompt_tokens <= budget.trigger_tokens


def test_a_plot_without_matplotlib_is_refused_before_the_run(tmp_path: Path, monkeypatch, capsys) -> None:
    import importlib.util

    from threadkeeper.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    png = tmp_path / "plot.png"
    assert main(["eval", "continuity", "--threads", "1", "--messages", "100", "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib" in err and "threadkeeper-slack[plot]" in err and not png.exists()
