"""Public-benchmark continuity evals: loaders, evidence normalizing, benchmark grading and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from threadkeeper.evals import (BenchmarkInputError, Case, grade_questions, keep_newest, load_benchmark, normalize_evidence,
                   present_ids, run_matrix, summarize)
from threadkeeper.evals.benchmarks import load_beam, load_locomo
from threadkeeper.evals.graders import answer_recall, content_words
from threadkeeper.services.context import ContextEntry
from threadkeeper.settings import Settings

from test_budget_and_cli import cli

DATA = Path(__file__).parent / "data"
REALTALK = DATA / "realtalk"
BEAM = DATA / "beam"


@pytest.mark.parametrize(("raw", "ids"), [
    ("D1:6", ["D1:6"]),
    ("D12:3-D12:5", ["D12:3", "D12:4", "D12:5"]),
    ("D12:3-5", ["D12:3", "D12:4", "D12:5"]),
    ("D5:12;D5:16", ["D5:12", "D5:16"]),
    ("D11:17; D16:1", ["D11:17", "D16:1"]),
    ("D13:4. D14:4", ["D13:4", "D14:4"]),
    ("D13:45:D20:19", ["D13:45", "D20:19"]),
    ("D 2:18", ["D2:18"]),
    ("D5:3.", ["D5:3"]),
    ("D17;39", ["D17:39"]),
    ("D12:11-D12:12;D13:25-D13:26", ["D12:11", "D12:12", "D13:25", "D13:26"]),
    ("D3:9-D4:2", ["D3:9", "D4:2"]),
    ("D1:2, D1:2", ["D1:2"]),
    ("D:56", []),
    ("D58", []),
    ("", []),
    ("23:29", []),
])
def test_evidence_normalizer_reads_messy_dia_ids(raw: str, ids: list[str]) -> None:
    assert normalize_evidence(raw) == ids


def test_locomo_loader_maps_evidence_to_replay_ids_and_counts_skipped_questions() -> None:
    bench = load_benchmark("realtalk", REALTALK)
    [case] = bench.cases
    messages = case.data["messages"]
    assert len(messages) == 30 and all(m["reply"] is False and m["id"] == m["ts"] for m in messages)
    ids = [m["id"] for m in messages]
    assert ids == sorted(ids, key=float) and len(set(ids)) == 30
    dia = {f"D{s}:{t}": messages[(s - 1) * 10 + t - 1]["id"] for s in (1, 2, 3) for t in range(1, 11)}
    assert messages[0]["id"] == "1706983381.000000"  # 03.02.2024, 18:03:01 UTC
    assert messages[20]["text"].endswith(" [shares an image: a shop sign with blue letters above a glass door]")
    assert messages[0]["author"] == "Ines" and messages[1]["author"] == "Tomas"
    by_q = {q["question"]: q for q in case.questions}
    assert by_q["What did Pistachio do and what did they plan?"]["evidence"] == [dia["D1:6"], dia["D1:7"], dia["D1:8"]]
    assert by_q["Who is the morning helper?"]["evidence"] == [dia["D3:6"]]
    assert by_q["Where is the new mill?"]["evidence"] == [dia["D2:7"]]
    assert by_q["What is the colour of the sign?"]["evidence"] == [dia["D3:1"], dia["D3:2"]]
    assert by_q["Where does Carla live?"]["evidence"] == [dia["D1:9"]]
    assert by_q["When does the bakery open?"]["kind"] == "temporal"
    assert {q["kind"] for q in case.questions} == {"multi-hop", "temporal", "commonsense"}
    assert len(case.questions) == 7 and bench.skipped == {"no resolvable evidence": 2}


def test_locomo_loader_accepts_a_list_of_conversation_dicts(tmp_path: Path) -> None:
    chat = json.loads((REALTALK / "Chat_1_Ines_Tomas.json").read_text())
    qa = chat.pop("qa")
    (tmp_path / "sample.json").write_text(json.dumps([{"sample_id": "s-1", "conversation": chat, "qa": qa},
                                                      {"sample_id": "s-2", "conversation": chat, "qa": qa[:2]}]))
    bench = load_locomo(tmp_path)
    assert [c.name for c in bench.cases] == ["s-1", "s-2"]
    assert [len(c.questions) for c in bench.cases] == [7, 2]
    assert len(load_locomo(tmp_path, limit=1).cases) == 1


def test_loaders_name_the_file_and_field_of_bad_input(tmp_path: Path) -> None:
    chat = json.loads((REALTALK / "Chat_1_Ines_Tomas.json").read_text())
    del chat["session_2"][3]["speaker"]
    (tmp_path / "bad.json").write_text(json.dumps(chat))
    with pytest.raises(BenchmarkInputError, match=r"bad\.json: session_2\[3\]: field 'speaker' is missing"):
        load_locomo(tmp_path)
    with pytest.raises(BenchmarkInputError, match="--path is required with --benchmark beam"):
        load_benchmark("beam", None)
    with pytest.raises(BenchmarkInputError, match="no BEAM chat folders"):
        load_beam(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BenchmarkInputError, match=r"--path .*empty: no LoCoMo-format JSON files"):
        load_benchmark("realtalk", empty)
    (empty / "broken.json").write_text("{")
    with pytest.raises(BenchmarkInputError, match=r"broken\.json: not valid JSON"):
        load_benchmark("realtalk", empty)


def test_beam_loader_reads_both_question_places_and_flattens_source_ids() -> None:
    bench = load_benchmark("beam", BEAM)
    assert [c.name for c in bench.cases] == ["beam-1", "beam-2"]
    one, two = bench.cases
    msgs = one.data["messages"]
    assert [m["author"] for m in msgs[:2]] == ["user", "assistant"]
    assert msgs[0]["id"] == "1710460800.000000"  # March-15-2024, 00:00 UTC
    assert msgs[1]["ts"] == "1710460860.000001"  # one minute per message
    assert msgs[8]["ts"] == "1712016000.000008"  # the April-02-2024 anchor resets the clock
    ids = [float(m["ts"]) for m in msgs]
    assert ids == sorted(ids)
    by_kind = {q["kind"]: q for q in one.questions}
    assert by_kind["knowledge_update"]["evidence"] == [msgs[2]["id"], msgs[8]["id"]]
    assert by_kind["event_ordering"]["evidence"] == [msgs[4]["id"], msgs[14]["id"], msgs[15]["id"]]
    assert by_kind["contradiction_resolution"]["answer"] == "No, you ruled out cloud services."
    assert by_kind["instruction_following"]["answer"] == ""
    assert "abstention" not in by_kind and "temporal_reasoning" not in by_kind
    assert {q["kind"] for q in two.questions} == {"information_extraction", "summarization"}
    assert bench.skipped == {"no source ids": 2, "no resolvable evidence": 1}
    assert len(load_beam(BEAM / "2").cases) == 1 and len(load_beam(BEAM, limit=1).cases) == 1


def _entry(text: str, source_ids: list[str], tokens: int = 10, role: str = "user") -> ContextEntry:
    return ContextEntry(role=role, text=text, source_ids=source_ids, tokens=tokens)


def test_a_handoff_cites_an_id_only_inside_brackets_and_whole() -> None:
    handoff = _entry("[Threadkeeper handoff: generation 2]\n- [D1:60] Emi: moved to Oslo\n- [decision 170.1] ok\n"
                     "- [ask a,170.5;b] something\nmentions D1:7 and 170.9 outside brackets", ["x", "D1:6"])
    present = present_ids([_entry("system prompt [D1:8]", [], role="system"), handoff])
    assert {"D1:60", "170.1", "170.5"} <= present
    assert not {"D1:6", "170.12", "D1:7", "170.9", "D1:8", "x"} & present
    verbatim = present_ids([_entry("Emi: [not a citation 170.3]", ["170.2"])])
    assert verbatim == {"170.2"}


def test_grade_questions_checks_evidence_recall_and_keep_newest_at_the_same_spend() -> None:
    messages = [("1.000000", "Ana: the launch code is ZX-81", 10), ("2.000001", "Bo: lunch at noon", 10),
                ("3.000002", "Ana: moving the launch to Friday", 10), ("4.000003", "Bo: fine", 10)]
    assert keep_newest([(m, t) for m, _, t in messages], 25) == ["3.000002", "4.000003"]
    assert keep_newest([(m, t) for m, _, t in messages], 9) == []
    context = [_entry("system", [], tokens=50, role="system"),
               _entry("[Threadkeeper handoff]\n- [1.000000] Ana: the launch code is ZX-81", ["1.000000", "2.000001"]),
               _entry("Ana: moving the launch to Friday", ["3.000002"])]
    questions = [{"id": "q1", "kind": "multi-hop", "answer": "The code is ZX-81, launch on Friday",
                  "evidence": ["1.000000", "3.000002"]},
                 {"id": "q2", "kind": "temporal", "answer": "at noon", "evidence": ["2.000001"]},
                 {"id": "q3", "kind": "temporal", "answer": "", "evidence": ["4.000003"]}]
    r1, r2, r3 = grade_questions(questions, context, messages, spend=25)
    assert (r1.evidence_kept, r2.evidence_kept, r3.evidence_kept) == (True, False, False)
    assert (r1.newest_kept, r2.newest_kept, r3.newest_kept) == (False, False, True)
    assert r1.answer_recall == 1.0 and r1.newest_recall == pytest.approx(2 / 4)  # code, zx, launch, friday
    assert r2.answer_recall == 0.0 and r3.answer_recall is None


def test_answer_recall_counts_content_words_and_numbers() -> None:
    assert content_words("The 3 cats and a Dog at 10:30") == {"3", "cats", "dog", "10", "30"}
    assert answer_recall("the and of", {"x"}) is None
    assert answer_recall("Cats in Lyon", content_words("lyon is far")) == 0.5


async def test_benchmark_cases_run_through_the_pipeline_and_report_against_keep_newest(redis_client) -> None:
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None)
    cases = load_benchmark("realtalk", REALTALK).cases
    rows = summarize(await run_matrix(settings, cases, ["recency", "threadkeeper"], [4000], turn_every=5,
                                      client=redis_client))
    assert [(r["strategy"], r["window"]) for r in rows] == [("recency", 4000), ("threadkeeper", 4000)]
    for row in rows:  # the synthetic chat fits the window: everything is kept, as by keep-newest
        assert row["evidence_retention"]["overall"] == 1.0 and row["keep_newest"]["evidence_retention"] == 1.0
        assert row["ratio"] == 1.0 and row["questions"] == 7 and row["within_budget"]
        assert set(row["evidence_retention"]) == {"overall", "multi-hop", "temporal", "commonsense"}
        assert 0.5 < row["answer_recall"] <= 1.0


def test_case_sizes_messages_with_the_offline_tokenizer() -> None:
    case = Case("c", {"messages": [{"id": "1", "author": "Ana", "text": "hello there"},
                                   {"id": "2", "author": "Ana", "text": "x", "edits": "1"}]})
    [(mid, text, tokens)] = case.sized_messages()
    assert (mid, text) == ("1", "Ana: hello there") and 4 < tokens < 12


def test_eval_cli_runs_benchmarks_and_reports_rows(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = cli("eval", "continuity", "--benchmark", "beam", "--path", str(BEAM), "--windows", "4000",
                 "--strategies", "recency,threadkeeper", "--json", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["benchmark"] == "beam" and report["threads"] == ["beam-1", "beam-2"]
    assert report["questions_skipped"] == {"no source ids": 2, "no resolvable evidence": 1}
    assert [(r["strategy"], r["window"]) for r in report["results"]] == [("recency", 4000), ("threadkeeper", 4000)]
    for row in report["results"]:
        assert {"evidence_retention", "answer_recall", "keep_newest", "ratio", "context_tokens", "compactions",
                "within_budget", "questions", "threads", "seconds"} <= set(row)
        assert row["questions"] == 7 and row["threads"] == 2
    assert "keep-newest" in result.stdout and "questions skipped: 1 (no resolvable evidence), 2 (no source ids)" \
        in result.stdout


def test_eval_cli_needs_a_path_for_benchmarks() -> None:
    missing = cli("eval", "continuity", "--benchmark", "realtalk")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "threadkeeper: error: --path is required with --benchmark realtalk"


async def test_questions_asked_after_the_thread_are_graded_with_and_without_recall(redis_client) -> None:
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None)
    facts = ["I adopted a grey cat called Miso from the Lyon shelter.", "My sister Ines moved to Porto in March.",
             "The quilt I am sewing has 64 hexagon patches."]
    chatter = [f"day {i}: walked to the bakery, weather mild, read a chapter, cooked soup, slept early again"
               for i in range(260)]
    messages = [{"id": f"17000000{i:02d}.000100" if i < 100 else f"1700000{i:03d}.000100",
                 "author": ("Ana", "Ben")[i % 2], "text": text, "reply": False, "ts": f"{1_700_000_000 + 600 * i}.000100"}
                for i, text in enumerate([*facts, *chatter])]
    questions = [{"id": "q1", "question": "What is the name of the cat adopted from the shelter?", "answer": "Miso",
                  "evidence": [messages[0]["id"]], "kind": "single-hop"},
                 {"id": "q2", "question": "Which city did Ines move to?", "answer": "Porto",
                  "evidence": [messages[1]["id"]], "kind": "single-hop"},
                 {"id": "q3", "question": "How many hexagon patches does the quilt have?", "answer": "64",
                  "evidence": [messages[2]["id"]], "kind": "single-hop"}]
    case = Case("asked", {"conversation_id": "asked", "messages": messages, "questions": questions})
    [row] = summarize(await run_matrix(settings, [case], ["recency"], [4000], turn_every=5, ask=True,
                                       client=redis_client))
    assert row["evidence_retention"]["overall"] == 0.0, "the standing context lost the facts"
    asked = row["asked"]
    assert asked["evidence_retention"]["overall"] == 1.0 and asked["without_recall"] == 0.0
    assert asked["keep_newest"]["evidence_retention"] == 0.0 and asked["questions"] == 3
    assert asked["context_tokens"] <= 4000
