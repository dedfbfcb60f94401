"""Public-benchmark continuity evals: loaders, evidence normalizing, benchmark grading and the CLI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from test_budget_and_cli import cli

from threadkeeper.evals import (
    BenchmarkInputError,
    Case,
    grade_questions,
    keep_newest,
    load_benchmark,
    misses,
    normalize_evidence,
    present_ids,
    run_matrix,
    summarize,
)
from threadkeeper.evals.baselines import MessagePool
from threadkeeper.evals.benchmarks import load_beam, load_locomo
from threadkeeper.evals.continuity import RunResult
from threadkeeper.evals.graders import Question, QuestionResult, content_words, held_text, holds
from threadkeeper.services.context import ContextEntry
from threadkeeper.settings import Settings

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


def test_what_a_context_holds_for_a_message_is_its_verbatim_text_or_the_notes_and_lines_citing_it() -> None:
    handoff = _entry("[Threadkeeper handoff · generation 2] This stands in for the earlier part of the thread.\n"
                     "Notes (the most informative things said, by day; compressed):\n2024-01-03\n"
                     "- Ana: [1.000000] launch code ZX-81 confirmed; [2.000001] lunch noon\n"
                     "- Bo: [3.000002,4.000003] moving launch Friday", ["1.000000", "2.000001", "3.000002"])
    recall = _entry("[recalled from earlier in this thread: …]\n2024-01-05:\n[5.000004] Cy: the pager is 555-0100",
                    ["5.000004"], role="system")
    verbatim = _entry("[#7] Ana: the rollout starts at 09:00", ["7.000006"])
    context = [handoff, recall, verbatim]
    assert held_text(context, ["1.000000"]) == "2024-01-03 - Ana: [1.000000] launch code ZX-81 confirmed"
    assert held_text(context, ["2.000001"]) == "2024-01-03 - Ana: [2.000001] lunch noon", "the note, not its line"
    assert held_text(context, ["4.000003"]) == "2024-01-03 - Bo: [3.000002,4.000003] moving launch Friday"
    assert held_text(context, ["5.000004"]) == "2024-01-05: [5.000004] Cy: the pager is 555-0100"
    assert held_text(context, ["7.000006"]) == "[#7] Ana: the rollout starts at 09:00"
    assert held_text(context, ["9.000009"]) == ""


def test_a_question_is_kept_only_when_what_the_context_holds_for_its_evidence_has_the_answer() -> None:
    texts = {"1.000000": "Ana: the launch code is ZX-81 and the pad is B7", "2.000001": "Bo: lunch at noon",
             "3.000002": "Cy: nice"}
    code = Question.of({"id": "q1", "question": "What is the launch code and pad?", "answer": "ZX-81, pad B7",
                        "evidence": ["1.000000"]}, texts)
    assert code.answerable and code.answer == {"81", "pad", "b7"}  # "zx": too short to be a content word
    brief = [_entry("[Threadkeeper handoff]\n- Ana: [1.000000] launch code", ["1.000000"])]
    full = [_entry("[Threadkeeper handoff]\n- Ana: [1.000000] launch code ZX-81 pad B7", ["1.000000"])]
    elsewhere = [_entry("[Threadkeeper handoff]\n- Ana: [1.000000] launch code; [2.000001] ZX-81 pad B7",
                        ["1.000000", "2.000001"])]
    assert not code.kept_in(brief), "citing the message in a few words is not holding its answer"
    assert code.kept_in(full)
    assert not code.kept_in(elsewhere), "the answer must be in what cites the evidence"
    assert code.kept_among(["1.000000", "2.000001"], texts) and not code.kept_among(["2.000001"], texts)
    inferred = Question.of({"id": "q2", "question": "Was Cy happy?", "answer": "Yes, delighted",
                            "evidence": ["3.000002"]}, texts)
    assert not inferred.answerable, "an answer its evidence does not state is not graded"
    assert holds({"a1", "b2", "c3", "d4"}, "a1 b2 c3") and not holds({"a1", "b2", "c3"}, "a1 b2")  # 70%


def test_grade_questions_grades_the_context_and_the_baselines_at_the_same_spend() -> None:
    messages = [("1.000000", "Ana: the launch code is ZX-81", 10), ("2.000001", "Bo: lunch at noon", 10),
                ("3.000002", "Ana: moving the launch to Friday", 10), ("4.000003", "Bo: fine", 10)]
    assert keep_newest([(m, t) for m, _, t in messages], 25) == ["3.000002", "4.000003"]
    assert keep_newest([(m, t) for m, _, t in messages], 9) == []
    context = [_entry("system", [], tokens=50, role="system"),
               _entry("[Threadkeeper handoff]\n- Ana: [1.000000] the launch code is ZX-81\n- Bo: [2.000001] lunch",
                      ["1.000000", "2.000001"]),
               _entry("Ana: moving the launch to Friday", ["3.000002"])]
    questions = [{"id": "q1", "kind": "multi-hop", "question": "What is the launch code?", "answer": "ZX-81",
                  "evidence": ["1.000000"]},
                 {"id": "q2", "kind": "temporal", "question": "When is lunch?", "answer": "at noon",
                  "evidence": ["2.000001"]},
                 {"id": "q3", "kind": "temporal", "question": "When is the launch?", "answer": "Friday",
                  "evidence": ["3.000002"]}]
    r1, r2, r3 = grade_questions(questions, context, messages, spend=25, pool=MessagePool(messages))
    assert (r1.kept, r2.kept, r3.kept) == (True, False, True)
    assert (r1.cited, r2.cited, r3.cited) == (True, True, True), "lunch is cited but its answer is not there"
    assert (r1.newest, r2.newest, r3.newest) == (False, False, True)
    assert (r1.bm25, r2.bm25, r3.bm25) == (True, True, True)
    assert r1.recent_bm25 and r3.recent_bm25


def test_the_bm25_baseline_picks_whole_messages_best_first_within_the_spend() -> None:
    messages = [("a", "Ana: the launch code is ZX-81", 10), ("b", "Bo: launch launch, the launch is today", 12),
                ("c", "Cy: lunch at noon", 10), ("d", "Di: the launch of the rocket is delayed by a week", 30)]
    pool = MessagePool(messages)
    assert pool.ranked("what about the launch?")[0] == "b" and "c" not in pool.ranked("what about the launch?")
    assert set(pool.bm25("the launch", 25)) == {"b", "a"}, "the best that fit; what no longer fits is skipped"
    assert pool.bm25("the launch", 25, first=["c"]) == ["c", "b"]
    assert pool.bm25("nothing matches", 100) == [] and MessagePool([]).bm25("x", 10) == []
    assert pool.bm25("rocket", 60, neighbours=True) == ["d", "c"], "a hit, then the message before it (none after)"
    assert pool.bm25("noon", 25, neighbours=True) == ["c", "b"], "the one after it no longer fits"


def test_answer_words_are_content_words_and_numbers() -> None:
    assert content_words("The 3 cats and a Dog at 10:30") == {"3", "cats", "dog", "10", "30"}
    assert holds(content_words("Cats in Lyon"), "lyon is far, cats are near")
    assert not holds(set(), "anything")


async def test_benchmark_cases_run_through_the_pipeline_and_report_against_the_baselines(redis_client) -> None:
    settings = Settings(_env_file=None, ai_model="offline", redis_url=None)
    cases = load_benchmark("realtalk", REALTALK).cases
    rows = summarize(await run_matrix(settings, cases, ["recency", "threadkeeper"], [4000], turn_every=5,
                                      ask=True, client=redis_client))
    assert [(r["strategy"], r["window"]) for r in rows] == [("recency", 4000), ("threadkeeper", 4000)]
    for row in rows:  # the synthetic chat fits the window: every answerable question is kept, as by the baselines
        standing, asked = row["standing"], row["asked"]
        assert standing["questions"] == 7 and 0 < standing["answerable"] < 7 and row["within_budget"]
        assert standing["content"] == standing["keep_newest"] == 1.0 and standing["over_baseline"] == 1.0
        assert asked["content"] == 1.0 and asked["bm25"] > 0 and asked["keep_newest"] > 0
        assert set(standing["by_kind"]) <= {"multi-hop", "temporal", "commonsense"}


def test_case_sizes_messages_with_the_offline_tokenizer() -> None:
    case = Case("c", {"messages": [{"id": "1", "author": "Ana", "text": "hello there"},
                                   {"id": "2", "author": "Ana", "text": "x", "edits": "1"}]})
    [(mid, text, tokens)] = case.sized_messages()
    assert (mid, text) == ("1", "Ana: hello there") and 4 < tokens < 12


def test_eval_cli_runs_benchmarks_and_reports_rows(tmp_path: Path) -> None:
    out, svg, missed = tmp_path / "out.json", tmp_path / "plot.svg", tmp_path / "misses.jsonl"
    result = cli("eval", "continuity", "--benchmark", "beam", "--path", str(BEAM), "--windows", "4000",
                 "--strategies", "recency,threadkeeper", "--json", str(out), "--plot", str(svg),
                 "--misses", str(missed))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["benchmark"] == "beam" and report["threads"] == ["beam-1", "beam-2"]
    assert report["questions_skipped"] == {"no source ids": 2, "no resolvable evidence": 1}
    assert [(r["strategy"], r["window"]) for r in report["results"]] == [("recency", 4000), ("threadkeeper", 4000)]
    for row in report["results"]:
        assert {"standing", "asked", "context_tokens", "compactions", "within_budget", "threads", "seconds"} <= set(row)
        assert {"content", "cited", "keep_newest", "over_baseline", "answerable", "questions"} <= set(row["standing"])
        assert {"content", "bm25", "recent_bm25", "keep_newest", "without_recall"} <= set(row["asked"])
        assert row["standing"]["questions"] == 7 and row["threads"] == 2
    assert "keep-newest" in result.stdout and "BM25 pick" in result.stdout and "questions skipped: 1 (no resolvable evidence), 2 (no source ids)" \
        in result.stdout
    drawn = ["".join(t.itertext()) for t in ET.parse(svg).iter("{http://www.w3.org/2000/svg}text")]
    ours = next(r for r in report["results"] if r["strategy"] == "threadkeeper")
    assert {"threadkeeper", "recency", "BM25 pick (at threadkeeper's spend)", "4,000"} <= set(drawn)
    assert f"{ours['asked']['content']:.0%}" in drawn and f"plot written to {svg}\n" in result.stderr
    rows = [json.loads(line) for line in missed.read_text().splitlines()]
    for row in report["results"]:  # one line per answerable question each strategy missed
        asked = row["asked"]
        assert len([r for r in rows if r["strategy"] == row["strategy"]]) == \
            round(asked["answerable"] * (1 - asked["content"]))
    assert f"{len(rows)} questions missed, written to {missed}" in result.stderr


def test_misses_name_each_answerable_question_the_context_missed_with_its_evidence_and_baselines() -> None:
    questions = [{"id": "q1", "question": "Where did Ana move?", "answer": "Porto", "evidence": ["m1"]},
                 {"id": "q2", "question": "What is the cat called?", "answer": "Miso", "evidence": ["m2", "m3"]},
                 {"id": "q3", "question": "What did Ben cook?", "answer": "soup", "evidence": ["m4"]}]
    case = Case("chat", {"messages": [], "questions": questions})
    asked = [QuestionResult("q1", "single-hop", True, True, True, False, True, True, True, False),
             QuestionResult("q2", "multi-hop", True, False, False, False, False, False, True, False),
             QuestionResult("q3", "single-hop", False, False, False, False, False, False, False, False)]
    run = RunResult("threadkeeper", 8000, "chat", [], 0, 0, 0, 0, benchmark=True, asked=asked)
    assert misses([run], [case]) == [{
        "thread": "chat", "strategy": "threadkeeper", "window": 8000, "id": "q2", "kind": "multi-hop",
        "question": "What is the cat called?", "answer": "Miso", "evidence": ["m2", "m3"], "bm25": False,
        "recent_bm25": False, "bm25_neighbours": True, "without_recall": False}]


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
    assert row["standing"]["content"] == 0.0, "the standing context lost the facts"
    asked = row["asked"]
    assert asked["content"] == 1.0 and asked["without_recall"] == 0.0 and asked["bm25"] == 1.0
    assert asked["keep_newest"] == 0.0 and asked["questions"] == asked["answerable"] == 3
    assert asked["context_tokens"] <= 4000
