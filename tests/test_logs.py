"""Structured logs: one line per turn and per compaction, with the conversation id and the turn's trace id."""

from __future__ import annotations

import io
import json
import logging

import pytest
from fakes import Step, pipeline, scripted

from threadkeeper.logs import configure

CONV = "slack:T1:C9:1700000000.000777"


@pytest.fixture
def restore_logging():
    """The root logger as it was, and the turn and compaction loggers at their default level while the test runs
    (a command run in-process earlier, such as the console, quiets them: ``quiet_turn_lines``)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    quieted = {name: logging.getLogger(name).level for name in ("threadkeeper.turn", "threadkeeper.compaction")}
    for name in quieted:
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, was in quieted.items():
        logging.getLogger(name).setLevel(was)


async def test_each_turn_and_compaction_is_one_json_line_sharing_the_turns_trace_id(prefix, client,
                                                                                   restore_logging) -> None:
    model = scripted()
    model.default = Step(text="noted")
    out = io.StringIO()
    configure("INFO", "json", out)
    p, _ = pipeline(prefix, client, context_window=4096)
    for i in range(60):
        await p.submit(CONV, f"status {i}: the migration of shard {i % 7} is halfway, build {900 + i} is green "
                             "and nobody is blocked right now; the dashboards look normal, the queue drains, reviews are "
                             "pending on two pull requests and the release notes are half written", author="alice", id=f"1700.{i:06d}")
        await p.run(CONV)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    turns = [r for r in lines if r.get("event") == "turn"]
    compactions = [r for r in lines if r.get("event") == "compaction"]
    assert len(turns) == 60 and compactions, "one line per turn, one per compaction"
    assert all(r["conversation_id"] == CONV and r["level"] == "info" and r["logger"] == "threadkeeper.turn"
               and len(r["trace_id"]) == 12 and r["status"] == "completed" and r["input_tokens"] > 0
               for r in turns)
    assert len({r["trace_id"] for r in turns}) == 60, "every turn has its own trace id"
    by_trace = {r["trace_id"]: r for r in turns}
    for c in compactions:  # a compaction a turn started carries that turn's trace id, and the turn names it
        assert by_trace[c["trace_id"]]["compaction"] == c["checkpoint_id"]
        assert c["conversation_id"] == CONV and c["tokens_after"] < c["tokens_before"]


def test_text_lines_are_logfmt(restore_logging) -> None:
    out = io.StringIO()
    configure("INFO", "text", out)
    logging.getLogger("threadkeeper.turn").info("turn", extra={"conversation_id": "c 1", "trace_id": "abc"})
    line = out.getvalue().strip()
    assert line.startswith("timestamp=") and " level=info logger=threadkeeper.turn event=turn " in line
    assert 'conversation_id="c 1"' in line and "trace_id=abc" in line
