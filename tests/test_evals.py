"""The continuity eval, small: the product's strategy beats recency and keeps every planted identifier at 16k."""

from __future__ import annotations

import json
from pathlib import Path

from evals import generate_thread, grade, load_cases, run_matrix, summarize
from threadkeeper.settings import Settings

from test_budget_and_cli import cli


def test_generator_is_deterministic_and_probes_cite_real_messages() -> None:
    one, two = generate_thread(3, messages=400), generate_thread(3, messages=400)
    assert one.as_dict() == two.as_dict()
    ids = {m["id"] for m in one.messages}
    kinds = {p["kind"] for p in one.probes}
    assert {"identifier", "decision", "constraint", "pinned", "suspect"} <= kinds
    assert all(set(p["evidence"]) <= ids for p in one.probes)
    assert generate_thread(4, messages=400).as_dict() != one.as_dict()


def test_graders_distinguish_kept_lost_and_stale() -> None:
    probes = [{"id": "a", "kind": "identifier", "answer": "OPS-1", "evidence": ["m1"]},
              {"id": "b", "kind": "resolved_ask", "answer": "no", "evidence": ["m2", "m3"]},
              {"id": "c", "kind": "suspect", "answer": "limit is 5 req/s.", "evidence": ["m4"]}]
    originals = {"m1": "see OPS-1", "m2": "can you do X?", "m3": "Done: X", "m4": "limit is 5 req/s."}
    lost = grade(probes, ["- [ask m2] bob: can you do X?", "dan: limit is 5 req/s."], originals)
    assert [(r.kept, r.error) for r in lost] == [(False, False), (False, True), (False, True)]
    kept = grade(probes, ["see OPS-1\n- [resolved by m3; ask m2] bob: can you do X?\n- SUSPECT [fact m4] limit is "
                          "5 req/s. (edited)"], originals)
    assert [(r.kept, r.error) for r in kept] == [(True, False), (True, False), (True, False)]


async def test_threadkeeper_beats_recency_and_keeps_identifiers_at_16k() -> None:
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None)
    cases = load_cases(None, threads=1, seed=5, messages=700)
    rows = summarize(await run_matrix(settings, cases, ["recency", "threadkeeper"], [4000, 16000], turn_every=5))
    by = {(r["strategy"], r["window"]): r for r in rows}
    for window in (4000, 16000):
        assert by[("threadkeeper", window)]["retention"]["overall"] > by[("recency", window)]["retention"]["overall"]
        assert by[("threadkeeper", window)]["within_budget"] and by[("threadkeeper", window)]["compaction_loops"] == 0
    assert by[("threadkeeper", 16000)]["retention"]["identifier"] == 1.0
    assert by[("threadkeeper", 16000)]["compactions"] >= 1


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
    bad = cli("eval", "continuity", "--strategies", "nope", "--threads", "1", "--messages", "100")
    assert bad.returncode == 2 and "unknown strategies" in bad.stderr
