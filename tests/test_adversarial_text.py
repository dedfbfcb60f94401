"""One message cannot freeze a worker: every text filter (redaction, instruction detection, the statement check, a
note, a model line's check, the artifacts a narrative cites) takes time in proportion to a message's length, also on
messages built to make a pattern read the same characters again and again, and a secret at the end of such a message
is still found.

Linear means a message ten times longer takes about ten times longer; a filter that rereads its input takes a
hundred times longer (a 40,000-character run of "api_key" ending in "=" took 43 s to redact). Each case times 4,000
and 40,000 characters, keeps the fastest of up to five runs, and fails only when 40,000 take 30 times as long or more."""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from threadkeeper.bench_data import ADVERSARIAL
from threadkeeper.services.safety import redact, redact_after, rejected, split_instructions, statements
from threadkeeper.services.text import extract, make_note

SHAPES = ADVERSARIAL
_created = itertools.count(1_700_000_000)
FILTERS: dict[str, Callable[[str], object]] = {
    "redaction": redact,
    "redaction after the author's previous message": lambda text: redact_after(text, text),
    "redaction after a name": lambda text: redact_after("token for the deploy bot:", text),
    "instruction detection": split_instructions,
    "statement check": statements,  # what record_state reads of a cited message: language, pasted material, shape
    "note": lambda text: make_note(text, float(next(_created))),  # a new time each call: notes are cached
    "model line check": lambda text: rejected(text, ["cited"]),
    "artifacts": extract.artifacts.__wrapped__,
    # (a new text each call: what it reads of the prose goes through the artifacts' cache)
    "reference check": lambda text: extract.holds_reference(f"{text} {next(_created)}"),
}
RATIO = 30
FLOOR = 0.005
"""A 4,000-character time below this counts as this much (a few milliseconds are mostly noise on a busy machine;
a filter that rereads its input still takes 0.5 s or more at 40,000)."""
SLOW = 5.0
"""A 40,000-character time no busy machine explains: one such run settles it (a quadratic filter took 19-43 s)."""
RUNS = 5


def _seconds(run: Callable[[str], object], text: str) -> float:
    gc.collect()
    gc.disable()  # the collector's passes depend on what else the process holds, not on this text
    try:
        start = time.perf_counter()
        run(text)
        return time.perf_counter() - start
    finally:
        gc.enable()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", FILTERS)
def test_a_filter_takes_time_in_proportion_to_the_message(name: str, shape: str) -> None:
    run, make = FILTERS[name], SHAPES[shape]
    small, large = make(4_000), make(40_000)
    smalls: list[float] = []
    larges: list[float] = []
    for _ in range(RUNS):  # the fastest of each, taken in turn: a busy machine slows runs, never speeds one up
        smalls.append(_seconds(run, small))
        larges.append(_seconds(run, large))
        bound = RATIO * max(FLOOR, min(smalls))
        if min(larges) < bound or larges[-1] > max(10 * bound, SLOW):
            break  # linear, or so far past the bound that no load explains it (a quadratic filter takes minutes)
    assert min(larges) < bound, f"{name} of {shape!r}: 40,000 characters took {min(larges):.3f} s, " \
                                f"{min(larges) / max(FLOOR, min(smalls)):.0f} times as long as 4,000"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_secret_at_the_end_of_a_long_message_is_still_redacted(shape: str) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    text = SHAPES[shape](40_000) + f"\nDB_PASSWORD=hunter2xyz9 and {token}\nthe password is Zq8rT5vw"
    out = redact(text)
    assert "hunter2xyz9" not in out and token not in out and "Zq8rT5vw" not in out
    assert len(out) > 39_000, "the rest of the message is kept"


@pytest.mark.parametrize("shape", SHAPES)
def test_a_secret_split_after_a_long_message_is_still_redacted(shape: str) -> None:
    long = SHAPES[shape](40_000)
    _, out = redact_after(long + "\nthe staging db password is", "Xq9-vB7mKt2w " + long)
    assert "Xq9-vB7mKt2w" not in out and len(out) > 39_000


def test_redacting_a_stated_password_reads_only_the_small_word_lists() -> None:
    """Whether the word after "the password is" is a common word is asked of six languages; with ``wordfreq``'s large
    lists that one message cost a worker 218 MB (its small lists: 20 MB)."""
    probe = ("import resource\n"
             "from threadkeeper.services.safety import redact\n"
             "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             "assert redact('the password for staging is hunter2xyz') == 'the password for staging is [REDACTED]'\n"
             "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 80, f"redacting one stated password grew the process by {done.stdout.strip()} MB"
