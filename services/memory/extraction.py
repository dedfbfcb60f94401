"""Extraction, memory's first phase: a conversation's new messages become records, once it has been idle a while.

One worker holds the conversation's extraction lease (renewed while it works); only the messages after the job's
watermark are read; they are folded into a ledger (:mod:`services.handoff`), whose decisions, closed asks,
model-recorded entries and notes (all of them by default, see ``MemoryConfig.notes_share``) become records. With a
real model configured, one validated model call may add records (each cites real message ids and states no number
its sources lack); never more than one per extraction and never past a daily cap. Every record is redacted and
carries no instruction to the assistant. The sweep finds the idle conversations, extracts a bounded number of them,
and has the scopes that changed consolidated.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal, TypeGuard, get_args

from threadkeeper.persistence.memory import Kind

from ..handoff import is_identifier
from ..safety import redact, without_instructions
from ..text import extract as x
from ..text import terms

EVERYONE = re.compile(r"\bremember (?:this|that|it)? ?(?:for|to) (?:everyone|everybody|all|the (?:whole )?"
                      r"(?:workspace|company|team))\b", re.IGNORECASE)
"""The stated rule by which a record reaches workspace scope: its source message asks for it, in a public channel."""


@dataclass
class Extraction:
    conversation_id: str
    outcome: Literal["succeeded", "succeeded_empty", "failed", "disabled", "busy", "waiting"]
    records: int = 0
    messages: int = 0
    model_calls: int = 0
    error: str | None = None


MEMORY_ID = "mem_"


def record_id(conversation_id: str, source: str, kind: str) -> str:
    """Stable per source: extracting the same message again rewrites the same record."""
    return MEMORY_ID + hashlib.sha1(f"{conversation_id}|{source}|{kind}".encode()).hexdigest()[:8]


def _is_kind(value: str) -> TypeGuard[Kind]:
    return value in get_args(Kind)


def _kind_of_note(text: str) -> Literal["fact", "constraint", "identifier"]:
    if x.CONSTRAINT.search(text):
        return "constraint"
    if any(is_identifier(t) for t in terms(text)):
        return "identifier"
    return "fact"


def clean(text: str) -> str:
    """What a record may say: no standing instruction to the assistant, no secret, one line."""
    return " ".join(redact(without_instructions(text)).split())[:2000]
