"""Deterministic text analysis shared by the ledger and the extractive narrative.

Regular expressions for artifacts (URLs, Slack links, ticket keys, commit SHAs, file paths, numbers
with units, dates) and for ask / decision / constraint cues, plus sentence splitting.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache


class _Cue:
    """A case-insensitive cue pattern, matched on the lowercased text (much faster than re.IGNORECASE)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = re.compile(pattern)

    def search(self, text: str) -> re.Match[str] | None:
        return self.pattern.search(text.lower())


URL = re.compile(r"<?(https?://[^\s<>|]+)(?:\|[^>]*)?>?")
BARE_URL = re.compile(r"https?://[^\s<>|]+")
"""A link as the artifacts take it (without Slack's ``<…|label>`` around it)."""
TICKET = re.compile(r"(?<![0-9A-Za-z_])[A-Z][A-Z0-9]{1,9}-\d{1,6}(?![0-9A-Za-z_])")
SHA = re.compile(r"(?<![0-9A-Za-z_])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
"""Ticket keys and commit SHAs are bounded by ASCII letters and digits only: written into text without spaces
(Japanese ``…についてINFRA-5382を起票…``) they are found too."""
PATH = re.compile(r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]+\.\w{1,6}\b|"
                  r"(?:(?<![\w-])|(?<=(?<![\w-])-)|(?<=(?<![\w-])--))\b[\w-]+\.(?:py|js|ts|tsx|go|rs|java|kt|rb|"
                  r"yaml|yml|json|toml|cfg|ini|sql|sh|md|tf|proto|csv|log|lock)\b")
"""A path ("deploy/values.yaml", "~/.ssh/config.toml") or a file name ("main.py", "--config.yaml"), read from where its
run of name characters starts (after at most two dashes), so a run of 40,000 ``a-a-…`` costs its length once."""
NUMBER_UNIT = re.compile(r"(?<![\w.])\$?\d+(?:[.,]\d+)?\s?(?:ms|s|sec|secs|seconds?|minutes?|mins?|hours?|hrs?|days?|weeks?|"
                         r"GB|MB|KB|TB|GiB|MiB|KiB|%|USD|EUR|req/s|rps|qps|RPS|QPS|k|K|M|x|vCPU|cores?|nodes?|"
                         r"replicas|pods|users|tokens)(?![\w])")
DATE = re.compile(r"\b(?:\d{4}-\d{2}-\d{2}|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.? \d{1,2}"
                  r"(?:st|nd|rd|th)?(?:,? \d{4})?|\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{4}|"
                  r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day)\b")
NUMBER = re.compile(r"\b\d+(?:[.,]\d+)?\b")

ASK = _Cue(r"\b(?:can|could|would|will) (?:you|someone|somebody|anyone|we|u)\b|\bplease\b|"
                 r"\b(?:we|i) need\b|\bneeds? to be\b|\baction item\b|\btodo\b|\bcan i get\b|\blet me know\b|"
                 r"\bmake sure\b|\bfollow up\b")
SUPERSEDE = _Cue(r"\b(?:instead|scratch that|never ?mind|nvm|ignore (?:my|that|the) (?:last|previous|earlier)|"
                       r"change of plans?|disregard (?:my|that|the)|forget (?:my|that|the) (?:last|previous|earlier))\b")
RESOLVE = _Cue(r"\b(?:done|fixed|resolved|shipped|merged|deployed|closed|completed|answered|sorted|handled)\b")
DECISION = _Cue(r"\b(?:we(?:'ve| have)? decided|decision:|decided:|let'?s go with|we(?:'ll| will) go with|going with|"
                      r"agreed:|we agreed|we(?:'ll| will) use|final call:|approved:)")
REVERSAL = _Cue(r"\b(?:revers\w*|revert\w*|no longer|overturn\w*|changed? (?:our|my) minds?|roll(?:ing)? back the "
                      r"decision|switch(?:ing)? back)\b")
CONSTRAINT = _Cue(r"\b(?:must(?: not)?|mustn't|never|always|required?|requirement|deadline|budget|at most|at least|"
                        r"no later than|prefer\w*|do not|don't|should(?:n't| not)?|constraint|limit)\b")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(<@])|\n+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'-]{3,}")
STOPWORDS = frozenset("""this that with from have will would could should there their about what when which where
    your they them then than been were just also into only some more very like over after before because while
    does doing done here need needs want wants make made sure please thanks thank okay yeah going think know
    still really maybe today tomorrow yesterday let's lets it's that's can't don't won't isn't aren't""".split())


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Artifact:
    kind: str
    value: str


_CODE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_PROSE_ONLY = frozenset({"sha", "quantity", "date"})
"""Artifact kinds not taken from code blocks: pasted logs are full of trace ids, timings and timestamps."""


_ANY = re.compile("|".join(f"(?P<{name}>{pattern.pattern})" for name, pattern in (
    ("url", BARE_URL), ("ticket", TICKET), ("sha", SHA), ("path", PATH),
    ("quantity", NUMBER_UNIT), ("date", DATE))))


@lru_cache(maxsize=50_000)
def artifacts(text: str) -> tuple[Artifact, ...]:
    """Artifacts in order of first appearance, without duplicates (one pass over the text)."""
    code_spans = [(m.start(), m.end()) for m in _CODE.finditer(text)] if "```" in text else []
    out: list[Artifact] = []
    seen: set[str] = set()
    for m in _ANY.finditer(text):
        kind = m.lastgroup or ""
        if kind in _PROSE_ONLY and code_spans and any(a <= m.start() < b for a, b in code_spans):
            continue
        value = m.group(0).strip()
        if kind == "url":
            value = value.rstrip(".,);>")
            kind = "slack link" if "slack.com/archives" in value else "url"
        if value not in seen:
            seen.add(value)
            out.append(Artifact(kind, value))
    return tuple(out)


REFERENCE_KINDS = frozenset({"url", "slack link", "ticket", "sha", "path"})
"""Artifacts that point at something kept elsewhere (a link, a ticket, a commit, a file): a later question names what
one belongs to ("where is the checkout dashboard?"), rarely the reference itself, so no search by the question's
words can be relied on to find the message that gave it."""


_REFERENCE = re.compile("|".join(pattern.pattern for pattern in (BARE_URL, TICKET, SHA, PATH)))


def holds_reference(text: str) -> bool:
    """Whether the prose of ``text`` (code blocks and pasted log lines left out) gives a reference
    (:data:`REFERENCE_KINDS`)."""
    if not _REFERENCE.search(text):  # (most messages: one pass over the text, for these kinds only)
        return False
    return any(a.kind in REFERENCE_KINDS for a in artifacts(" ".join(sentences(text))))


def sentences(text: str) -> list[str]:
    """Sentences and lines of prose; code blocks and log-like lines are skipped."""
    prose = re.sub(r"```.*?(```|$)", " ", text, flags=re.DOTALL)
    out = []
    for piece in _SENTENCE.split(prose):
        piece = " ".join(piece.split())
        if len(piece) < 12 or looks_like_log(piece):
            continue
        out.append(piece)
    return out


_LOG = re.compile(r"^(?:\d{4}-\d{2}-\d{2}[T ][\d:.]+|\[?(?:ERROR|WARN|WARNING|INFO|DEBUG|TRACE)\]?\b|at [\w.$]+\(|"
                  r"File \"|Traceback|\s*\w+(?:Error|Exception):)")


def looks_like_log(line: str) -> bool:
    return bool(_LOG.match(line.strip()))


CUE_WORDS = frozenset("""decided decide decision decisions reversing reverse reversed reverting revert instead going
    agreed scratch never mind ignore done fixed resolved shipped merged deployed closed completed""".split())


def terms(text: str) -> set[str]:
    """Content words: no stopwords and no ask / decision cue words (they would match every decision)."""
    return {w.lower() for w in _WORD.findall(text) if w.lower() not in STOPWORDS and w.lower() not in CUE_WORDS}


def is_ask(text: str) -> bool:
    """An ask: a request cue in a message of five words or more, or a question of seven words or more."""
    words = len(text.split())
    if words < 5:
        return False
    if ASK.search(text):
        return True
    return text.rstrip().endswith("?") and words >= 7


def overlap(a: set[str], b: set[str]) -> int:
    return len(a & b)
