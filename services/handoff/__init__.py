"""The handoff: what replaces a history that outgrew its budget. The compactor plans and writes it as a forked
checkpoint; the ledger (asks, decisions, facts, notes) accumulates from generation to generation; the narrative
comes from the summarizer when a model is configured; the view renders it all within its caps; ``record_state``
lets a model propose validated ledger entries."""

from .compaction import CompactionReport, Narrated, Plan, RunningFold, changes_of, fold, foldable, suspects
from .compactor import Compactor
from .ledger import Ask, Decision, Ledger, LedgerBuilder, ModelFact, NarrativeEntry, load_ledger, prose
from .narrative import Summarizer, extractive
from .notebook import NoteEntry, TermStats, is_identifier, note_cost, select, whole_cost
from .state_tool import record_state_tool, validate_entry
from .view import render_handoff

__all__ = [
    "is_identifier",
    "Ask",
    "changes_of",
    "CompactionReport",
    "Compactor",
    "Decision",
    "extractive",
    "fold",
    "foldable",
    "Ledger",
    "LedgerBuilder",
    "load_ledger",
    "ModelFact",
    "Narrated",
    "NarrativeEntry",
    "note_cost",
    "NoteEntry",
    "Plan",
    "prose",
    "record_state_tool",
    "render_handoff",
    "RunningFold",
    "select",
    "Summarizer",
    "suspects",
    "TermStats",
    "validate_entry",
    "whole_cost",
]
