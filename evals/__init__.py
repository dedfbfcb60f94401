"""Continuity evals: generated threads with planted items, baseline strategies, graders and reports."""

from .continuity import DEFAULT_WINDOWS, load_cases, plot, run_matrix, summarize
from .generator import generate_thread
from .graders import grade
from .strategies import STRATEGIES

__all__ = ["DEFAULT_WINDOWS", "STRATEGIES", "generate_thread", "grade", "load_cases", "plot", "run_matrix",
           "summarize"]
