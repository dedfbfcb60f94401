"""Continuity evals: generated threads with planted items, public long-conversation benchmarks (LoCoMo-format
such as REALTALK, and BEAM), baseline strategies, graders and reports."""

from .benchmarks import (
           BENCHMARKS,
           Benchmark,
           BenchmarkInputError,
           load_benchmark,
           normalize_evidence,
           skipped_text,
)
from .continuity import (
           BENCHMARK_WINDOWS,
           DEFAULT_WINDOWS,
           Case,
           load_cases,
           misses,
           run_matrix,
           summarize,
)
from .generator import generate_thread
from .graders import grade, grade_questions, keep_newest, present_ids
from .strategies import STRATEGIES

__all__ = ["BENCHMARKS", "BENCHMARK_WINDOWS", "DEFAULT_WINDOWS", "STRATEGIES", "Benchmark", "BenchmarkInputError",
           "Case", "generate_thread", "grade", "grade_questions", "keep_newest", "load_benchmark", "load_cases",
           "misses", "normalize_evidence", "present_ids", "run_matrix", "skipped_text", "summarize"]
