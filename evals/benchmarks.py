"""Public long-conversation benchmarks as continuity-eval cases.

Two layouts load into the same shape, a :class:`~evals.continuity.Case` whose data holds replay
``messages`` (Slack-style ids and times, ``reply: false``: people talking among themselves) and a
``questions`` list whose evidence names those replay ids:

Each message also names its ``session`` (a LoCoMo-format session's number, a BEAM batch's index): the memory eval
replays each session as a thread of its own.

* **LoCoMo format** (REALTALK and LoCoMo itself): a file holding one conversation dict, a list of them, or
  dicts with a ``conversation`` sub-dict; sessions ``session_N`` of messages with ``dia_id`` ids
  (``D<session>:<turn>``) and a top-level ``qa`` list whose ``evidence`` names dia ids.
* **BEAM**: a folder per chat with ``chat.json`` (batches of turns with integer ids) and
  ``probing_questions.json`` (category → questions citing ``source_chat_ids``).

Evidence that cannot be resolved to a message is dropped; a question left without evidence is
skipped and counted by reason in :attr:`Benchmark.skipped`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from threadkeeper.persistence import ThreadkeeperError

from .continuity import Case

BENCHMARKS = ("realtalk", "beam")
NO_EVIDENCE = "no resolvable evidence"
NO_SOURCE_IDS = "no source ids"
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "commonsense"}
FALLBACK_START = datetime(2024, 1, 1, tzinfo=timezone.utc)
BEAM_ASKER = "user"
"""BEAM's questions are the user's, asked of the assistant about their own earlier sessions."""
MAX_RANGE = 500
"""A range of evidence ids longer than this is taken as its two ends only."""


class BenchmarkInputError(ThreadkeeperError):
    """A benchmark file is missing, malformed or lacks a field the loader needs."""


@dataclass
class Benchmark:
    """The cases of one benchmark plus what was left out of them."""

    name: str
    cases: list[Case]
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def questions(self) -> int:
        return sum(len(c.data["questions"]) for c in self.cases)


_DIA = re.compile(r"D(\d+):(\d+)(?:\s*-\s*(?:D(\d+):)?(\d+))?")


def normalize_evidence(raw: str) -> list[str]:
    """Canonical dia ids (``D<session>:<turn>``) named by one messy evidence string, in order.

    Handles lists joined by ``;``, ``,`` or ``. ``, ranges (``D12:3-D12:5`` expands), two ids glued
    by a colon, a space after ``D``, a trailing dot and ``D17;39`` for ``D17:39``. Anything else
    (``D:56``, ``D58``, ``23:29``) names nothing and yields no id.
    """
    text = re.sub(r"D\s+(?=\d)", "D", raw)
    text = re.sub(r"D(\d+);\s*(\d+)", r"D\1:\2", text)
    out: list[str] = []
    for m in _DIA.finditer(text):
        session, start = int(m.group(1)), int(m.group(2))
        if m.group(4) is None:
            out.append(f"D{session}:{start}")
            continue
        end_session, end = int(m.group(3) or session), int(m.group(4))
        if end_session == session and 0 <= end - start <= MAX_RANGE:
            out.extend(f"D{session}:{turn}" for turn in range(start, end + 1))
        else:
            out.extend([f"D{session}:{start}", f"D{end_session}:{end}"])
    return list(dict.fromkeys(out))


def replay_id(epoch: float, index: int) -> str:
    """A Slack-style id (and ``ts``) for the message at ``index``: unique, and sorting in time order."""
    return f"{int(epoch)}.{index:06d}"


def _natural(path: Path) -> list[Any]:
    return [int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", path.name)]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchmarkInputError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise BenchmarkInputError(f"{path}: not valid JSON: {exc}") from None


def _object(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise BenchmarkInputError(f"{where}: expected a JSON object, got {type(item).__name__}")
    return item


def _require(item: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = _object(item, where).get(key)
    if not isinstance(value, kind):
        problem = "is missing" if value is None else f"is a {type(value).__name__}"
        raise BenchmarkInputError(f"{where}: field {key!r} {problem}")
    return value


def _question(qid: str, question: str, answer: Any, evidence: list[str], kind: str,
              asker: str | None = None) -> dict[str, Any]:
    out = {"id": qid, "question": question, "answer": str(answer) if isinstance(answer, (str, int, float)) else "",
           "evidence": evidence, "kind": kind}
    if asker:
        out["asker"] = asker  # who asks it: a person of the conversation, whose "I" and "my" it uses
    return out


# LoCoMo format -------------------------------------------------------------------------------------------

def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    for fmt in ("%d.%m.%Y, %H:%M:%S", "%d.%m.%Y, %H:%M", "%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(value.strip(), fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


def _sessions(conversation: dict[str, Any]) -> list[tuple[int, list[Any]]]:
    found = [(int(m.group(1)), v) for k, v in conversation.items()
             if (m := re.fullmatch(r"session_(\d+)", k)) and isinstance(v, list)]
    return sorted(found, key=lambda s: s[0])


def _locomo_case(item: Any, name: str, where: str, skipped: Counter[str]) -> Case:
    conversation = _object(item.get("conversation") if isinstance(item, dict) and "conversation" in item else item,
                           where)
    _require(conversation, "session_1", list, where)
    qa = _require(item, "qa", list, where)
    messages: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    clock = FALLBACK_START
    for number, session in _sessions(conversation):
        start = _parse_time(conversation.get(f"session_{number}_date_time"))
        clock = max(clock, start) if start else clock
        for turn, raw in enumerate(session):
            label = f"{where}: session_{number}[{turn}]"
            dia = _require(raw, "dia_id", str, label)
            author = _require(raw, "speaker", str, label)
            text = raw.get("clean_text", raw.get("text"))
            if not isinstance(text, str):
                raise BenchmarkInputError(f"{label}: field 'clean_text' (or 'text') is missing")
            caption = raw.get("blip_caption")
            if isinstance(caption, str) and caption.strip():
                text += f" [shares an image: {caption.strip()}]"
            own = _parse_time(raw.get("date_time"))
            when = own or (start if turn == 0 and start else clock + timedelta(minutes=1 if messages else 0))
            clock = max(clock, when)
            rid = replay_id(when.timestamp(), len(messages))
            ids[dia.replace(" ", "")] = rid
            messages.append({"id": rid, "author": author, "text": text, "ts": rid, "reply": False,
                             "session": number})
    if not messages:
        raise BenchmarkInputError(f"{where}: the conversation has no messages")
    questions = []
    for index, q in enumerate(qa):
        label = f"{where}: qa[{index}]"
        question = _require(q, "question", str, label)
        evidence = q.get("evidence")
        if evidence is None:
            raise BenchmarkInputError(f"{label}: field 'evidence' is missing")
        raw_ids = [evidence] if isinstance(evidence, str) else evidence
        if not isinstance(raw_ids, list):
            raise BenchmarkInputError(f"{label}: field 'evidence' is a {type(evidence).__name__}")
        found = [ids[d] for r in raw_ids if isinstance(r, str) for d in normalize_evidence(r) if d in ids]
        if not found:
            skipped[NO_EVIDENCE] += 1
            continue
        category = q.get("category")
        kind = LOCOMO_CATEGORIES.get(category, f"category-{category}") if isinstance(category, int) else "other"
        questions.append(_question(f"{name}:q{index}", question, q.get("answer"), list(dict.fromkeys(found)), kind))
    return Case(name, {"conversation_id": name, "messages": messages, "questions": questions})


def load_locomo(path: str | Path, *, limit: int | None = None) -> Benchmark:
    """LoCoMo-format conversations from one file or a folder of ``*.json`` files (natural order)."""
    root = Path(path)
    files = sorted(root.glob("*.json"), key=_natural) if root.is_dir() else [root] if root.is_file() else []
    if not files:
        raise BenchmarkInputError(f"--path {root}: no LoCoMo-format JSON files there")
    out = Benchmark("realtalk", [])
    for file in files:
        data = _read_json(file)
        items = data if isinstance(data, list) else [data]
        for i, item in enumerate(items):
            if limit is not None and len(out.cases) >= limit:
                return out
            where = str(file) if len(items) == 1 else f"{file} [{i}]"
            sample = item.get("sample_id") if isinstance(item, dict) else None
            name = str(sample) if sample else file.stem if len(items) == 1 else f"{file.stem}-{i}"
            out.cases.append(_locomo_case(item, name, where, out.skipped))
    return out


# BEAM ----------------------------------------------------------------------------------------------------

def _anchor(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value.strip(), "%B-%d-%Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _flatten(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _flatten(v)
    elif isinstance(value, list):
        for v in value:
            yield from _flatten(v)
    elif value is not None:
        yield value


def _beam_questions_file(folder: Path) -> Path:
    for candidate in (folder / "probing_questions.json", folder / "probing_questions" / "probing_questions.json"):
        if candidate.is_file():
            return candidate
    raise BenchmarkInputError(f"{folder}: no probing_questions.json (nor probing_questions/probing_questions.json)")


def _beam_case(folder: Path, skipped: Counter[str]) -> Case:
    chat_file = folder / "chat.json"
    batches = _read_json(chat_file)
    if not isinstance(batches, list):
        raise BenchmarkInputError(f"{chat_file}: expected a list of batches, got {type(batches).__name__}")
    name = f"beam-{folder.name}"
    messages: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    base, since, last = FALLBACK_START, 0, 0.0
    for b, batch in enumerate(batches):
        turns = _require(batch, "turns", list, f"{chat_file}: batch {b}")
        if (anchor := _anchor(batch.get("time_anchor"))) is not None:
            base, since = anchor, 0
        for t, turn in enumerate(turns):
            for m, raw in enumerate(turn if isinstance(turn, list) else [turn]):
                label = f"{chat_file}: batch {b} turn {t} message {m}"
                role = _require(raw, "role", str, label)
                content = _require(raw, "content", str, label)
                source = raw.get("id")
                if not isinstance(source, (int, str)) or isinstance(source, bool):
                    raise BenchmarkInputError(f"{label}: field 'id' is missing")
                if (anchor := _anchor(raw.get("time_anchor"))) is not None:
                    base, since = anchor, 0
                epoch = max(base.timestamp() + 60 * since, last + 60 if messages else 0.0)
                since, last = since + 1, epoch
                rid = replay_id(epoch, len(messages))
                ids[str(source)] = rid
                messages.append({"id": rid, "author": role, "text": content, "ts": rid, "reply": False,
                                 "session": b})
    if not messages:
        raise BenchmarkInputError(f"{chat_file}: the chat has no messages")
    questions_file = _beam_questions_file(folder)
    data = _read_json(questions_file)
    if not isinstance(data, dict):
        raise BenchmarkInputError(f"{questions_file}: expected an object of category → questions")
    questions = []
    for category, items in data.items():
        if not isinstance(items, list):
            raise BenchmarkInputError(f"{questions_file}: field {category!r} is not a list of questions")
        for index, q in enumerate(items):
            label = f"{questions_file}: {category}[{index}]"
            question = _require(q, "question", str, label)
            sources = list(_flatten(q.get("source_chat_ids")))
            if not sources:
                skipped[NO_SOURCE_IDS] += 1
                continue
            found = [ids[str(s)] for s in sources if str(s) in ids]
            if not found:
                skipped[NO_EVIDENCE] += 1
                continue
            answer = next((q[k] for k in ("answer", "ideal_answer", "ideal_response", "ideal_summary")
                           if isinstance(q.get(k), str)), "")
            questions.append(_question(f"{name}:{category}:{index}", question, answer,
                                       list(dict.fromkeys(found)), category, asker=BEAM_ASKER))
    return Case(name, {"conversation_id": name, "messages": messages, "questions": questions})


def load_beam(path: str | Path, *, limit: int | None = None) -> Benchmark:
    """BEAM chats from one chat folder (holding ``chat.json``) or a folder of them (e.g. ``100K``)."""
    root = Path(path)
    if (root / "chat.json").is_file():
        folders = [root]
    elif root.is_dir():
        folders = sorted((p for p in root.iterdir() if (p / "chat.json").is_file()), key=_natural)
    else:
        folders = []
    if not folders:
        raise BenchmarkInputError(f"--path {root}: no BEAM chat folders there (a folder with chat.json, "
                                  "or a folder of them)")
    out = Benchmark("beam", [])
    for folder in folders[:limit]:
        out.cases.append(_beam_case(folder, out.skipped))
    return out


def load_benchmark(name: str, path: str | Path | None, *, limit: int | None = None) -> Benchmark:
    """Load ``realtalk`` (any LoCoMo-format source) or ``beam`` cases from ``path``."""
    if name not in BENCHMARKS:
        raise BenchmarkInputError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    if not path:
        raise BenchmarkInputError(f"--path is required with --benchmark {name}")
    return load_locomo(path, limit=limit) if name == "realtalk" else load_beam(path, limit=limit)


def skipped_text(skipped: Counter[str]) -> str:
    """``questions skipped: N (reason), …`` for a report."""
    parts = ", ".join(f"{n} ({reason})" for reason, n in sorted(skipped.items()) if n)
    return f"questions skipped: {parts or 0}"


__all__ = ["BENCHMARKS", "Benchmark", "BenchmarkInputError", "load_beam", "load_benchmark",
           "load_locomo", "normalize_evidence", "replay_id", "skipped_text"]
