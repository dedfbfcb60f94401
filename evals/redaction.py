"""Redaction measured on secrets this project did not write: the samples of the gitleaks rule set
(``cmd/generate/config/rules/*.go``: each rule's true positives, generated from the regexes its maintainers wrote, and
its false positives), read from a checkout at run time and never stored here.

Each true positive's secret is put in chat messages the way people write them (named, after a colon, in a code block,
in inline code with no secret word, in another language, in passing) and run through :func:`redact`, the function the
bot applies before anything is stored, folded or sent to a model. A secret counts as removed when no 8 characters of it
survive. The negatives are text that must come through unchanged: the rules' descriptions (prose full of the words
"key" and "token"), the generic rule's false positives (real lines of code and config that name a key or a credential
and hold none) and, when the checkout has its git history, commit subjects beside commit hashes, as people paste them.
The vendor rules' own false positives (a prefix with the wrong length, placeholders) are reported beside them but not
counted: removing one costs a reader little. A plain entropy rule is measured beside the bot's redaction, at the lowest
threshold that leaves as many negatives intact.

Vendors are split by rule file, alphabetically: the first half is where rules may be tuned, the second half is held
out and reported on its own.

Each secret is also split over two messages of one person (:data:`SPLIT_PHRASINGS`) and scored redacted alone and
through :func:`redact_after`, the seam a turn applies with the author's previous message in view; the negatives, and
the messages of conversations people wrote (:func:`chat_pairs`), follow a message ending in a secret's name to see
what that context costs ordinary text."""

from __future__ import annotations

import importlib
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from threadkeeper.persistence.errors import ThreadkeeperError
from threadkeeper.services.safety import redact, redact_after

from .checkout import Checkout, CheckoutError

RULES = "cmd/generate/config/rules"
HARD = "identifiers near secret words"
"""The generic rule's false positives: lines of real code and config that name a key, a token or a credential and
hold no secret (``credentialsId: '<uuid>'``, ``MantleAPI_version=<hash>``)."""
LOOK_ALIKE = "near-miss keys"
"""The vendor rules' false positives: a vendor's prefix with the wrong length or case, placeholders
(``AKIAXXXXXXXXXXXXXXXX``), random blobs in an odd place. Removing one costs a reader little, so it is reported but not
counted in the share of negatives kept."""
SOURCES = ("gitleaks",)


class RedactionInputError(ThreadkeeperError):
    """The checkout given to the redaction eval is missing or holds no rule files."""


@dataclass(frozen=True)
class Secret:
    vendor: str
    """The rule file it comes from, without ``.go`` (``aws``, ``github``)."""
    value: str


@dataclass(frozen=True)
class Negative:
    kind: str
    text: str


@dataclass
class Corpus:
    secrets: list[Secret]
    negatives: list[Negative]
    vendors: list[str]
    skipped: Counter[str] = field(default_factory=Counter)

    def held_out(self, vendor: str) -> bool:
        """Whether ``vendor`` is in the second half of the rule files, alphabetically."""
        return self.vendors.index(vendor) >= (len(self.vendors) + 1) // 2


# ---- reading the checkout: a work tree or a bare git directory

class _Checkout:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.checkout = Checkout(path, needs=RULES)
        except CheckoutError as exc:
            raise RedactionInputError(f"{exc}: give a gitleaks checkout") from exc

    def rule_files(self) -> list[tuple[str, str]]:
        try:
            return [(Path(n).stem, self.checkout.read(n)) for n in self.checkout.files(RULES, ".go")]
        except CheckoutError as exc:
            raise RedactionInputError(str(exc)) from exc

    def commits(self, limit: int) -> list[tuple[str, str]]:
        """(hash, subject) of the newest commits, when the checkout has its history."""
        if self.checkout.tree and not (self.path / ".git").exists():
            return []
        try:
            out = self.checkout.git("log", f"-{limit}", "--no-merges", "--format=%H %s")
        except CheckoutError:
            return []
        return [(line[:40], line[41:]) for line in out.splitlines() if len(line) > 41]


# ---- Go expressions of the rule files

_TOKEN = re.compile(r'\s+|//[^\n]*|"(?:\\.|[^"\\\n])*"|`[^`]*`|[A-Za-z_][\w.]*|\d+|\.\.\.|:=|[(){}\[\],+=]')
_PATTERNS: dict[str, Callable[..., str]] = {
    "utils.Numeric": lambda n: f"[0-9]{{{n}}}",
    "utils.Hex": lambda n: f"[a-f0-9]{{{n}}}",
    "utils.AlphaNumeric": lambda n: f"[a-z0-9]{{{n}}}",
    "utils.AlphaNumericExtendedShort": lambda n: f"[a-z0-9_-]{{{n}}}",
    "utils.AlphaNumericExtended": lambda n: f"[a-z0-9=_\\-]{{{n}}}",
    "utils.AlphaNumericExtendedLong": lambda n: f"[a-z0-9\\/=_\\+\\-]{{{n}}}",
    "utils.Hex8_4_4_4_12": lambda: "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
}
_SAMPLE_CALLS = ("utils.GenerateSampleSecrets", "utils.GenerateSampleSecret")


class _Unsupported(Exception):
    pass


def _tokens(text: str) -> list[str]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            out.append(text[pos])
            pos += 1
            continue
        if not (m.group().isspace() or m.group().startswith("//")):
            out.append(m.group())
        pos = m.end()
    return out


def _string(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1]
    return bytes(token[1:-1], "utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


class _Expr:
    """Evaluates the string expressions the rule files build samples with: literals, ``+``, the pattern helpers of
    ``utils``, ``secrets.NewSecret`` (a random string its regex matches) and the sample wrappers (their secret)."""

    def __init__(self, tokens: list[str], variables: dict[str, list[str]], rng: random.Random) -> None:
        self.t, self.i, self.variables, self.rng = tokens, 0, variables, rng

    def peek(self) -> str:
        return self.t[self.i] if self.i < len(self.t) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if expected is not None and token != expected:
            raise _Unsupported(f"expected {expected!r}, found {token!r}")
        self.i += 1
        return token

    def expr(self) -> str:
        value = self.term()
        while self.peek() == "+":
            self.take()
            value += self.term()
        return value

    def args(self) -> list[str]:
        self.take("(")
        out = []
        while self.peek() != ")":
            out.append(self.expr())
            if self.peek() == ",":
                self.take()
        self.take(")")
        return out

    def term(self) -> str:
        token = self.take()
        if token[:1] in "\"`":
            return _string(token)
        if token in _PATTERNS:
            return _PATTERNS[token](*self.args())
        if token == "secrets.NewSecret":
            return generate(self.args()[0], self.rng)
        if token in _SAMPLE_CALLS:
            return self.args()[1]
        if token == "fmt.Sprintf":
            template, *values = self.args()
            return re.sub(r"%[sd]", lambda _: values.pop(0) if values else "", template)
        if token in self.variables:
            return _Expr(self.variables[token], self.variables, self.rng).expr()
        raise _Unsupported(token)


def generate(pattern: str, rng: random.Random) -> str:
    """A string ``pattern`` (a gitleaks sample regex) matches, drawn with ``rng``."""
    sre_parse = importlib.import_module("re._parser")  # the parser behind ``re``: Go's sample regexes parse alike
    c = importlib.import_module("re._constants")

    def walk(items: Any) -> str:
        out = []
        for op, arg in items:
            if op is c.LITERAL:
                out.append(chr(arg))
            elif op is c.IN:
                out.append(pick(arg))
            elif op is c.ANY:
                out.append(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789"))
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
                low, high, sub = arg
                high = low + 8 if high == c.MAXREPEAT else high
                out.extend(walk(sub) for _ in range(rng.randint(low, high)))
            elif op is c.SUBPATTERN:
                out.append(walk(arg[-1]))
            elif op is c.BRANCH:
                out.append(walk(rng.choice(arg[1])))
            elif op is c.AT:
                continue
            elif op is c.CATEGORY:
                out.append(pick([(op, arg)]))
            else:
                raise _Unsupported(str(op))
        return "".join(out)

    def pick(members: Any) -> str:
        chars: list[str] = []
        for op, arg in members:
            if op is c.LITERAL:
                chars.append(chr(arg))
            elif op is c.RANGE:
                chars.extend(chr(x) for x in range(arg[0], arg[1] + 1))
            elif op is c.CATEGORY and arg is c.CATEGORY_DIGIT:
                chars.extend("0123456789")
            elif op is c.CATEGORY and arg is c.CATEGORY_WORD:
                chars.extend("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
            else:
                raise _Unsupported(str(op))
        return rng.choice(chars)

    return walk(sre_parse.parse(pattern))


def _blocks(tokens: list[str], name: str) -> Iterator[list[list[str]]]:
    """The items assigned or appended to the sample list ``name`` (``tps``, ``fps``), each as its tokens."""
    i = 0
    while i < len(tokens):
        if tokens[i] == name and i + 1 < len(tokens) and tokens[i + 1] in (":=", "="):
            j = i + 2
            if tokens[j] == "append":
                j += 4  # append ( name ,
                end_token = ")"
            elif tokens[j] == "[" and tokens[j + 1] == "]":
                j += 4  # [ ] string {
                end_token = "}"
            else:
                end_token = ""
            items: list[list[str]] = []
            current: list[str] = []
            depth = 0
            while j < len(tokens):
                tok = tokens[j]
                if depth == 0 and (tok == end_token or (not end_token and tok in ("}", ")") and not current)):
                    break
                if depth == 0 and tok == "," and end_token:
                    items.append(current)
                    current = []
                elif not end_token and depth == 0 and current and tok not in ("(", "+") and \
                        current[-1] not in ("(", "+", ","):
                    break  # one expression, then the next statement
                else:
                    depth += tok in "({[" and len(tok) == 1
                    depth -= tok in ")}]" and len(tok) == 1
                    current.append(tok)
                j += 1
            if current:
                items.append([t for t in current if t != "..."])
            yield items
            i = j  # the next statement starts here
            continue
        i += 1


def _variables(tokens: list[str]) -> dict[str, list[str]]:
    """``name := <expression>`` definitions a sample may use (one expression each)."""
    out: dict[str, list[str]] = {}
    for i, tok in enumerate(tokens[:-1]):
        if tokens[i + 1] == ":=" and tok not in ("tps", "fps", "r") and re.fullmatch(r"[a-z_]\w*", tok):
            j, depth = i + 2, 0
            expr: list[str] = []
            while j < len(tokens):
                t = tokens[j]
                if depth == 0 and expr and t not in ("(", "+") and expr[-1] not in ("(", "+"):
                    break
                depth += t in ("(", "[", "{")
                depth -= t in (")", "]", "}")
                expr.append(t)
                j += 1
            out[tok] = expr
    return out


_SNIPPET_VALUE = re.compile(r"[^\s\"'`,;=<>(){}\[\]:/@?&]+")


def _secret_of(item: list[str], value: str) -> str:
    """The secret in a sample: a wrapper's second argument as it is; in a literal snippet of code or config
    (``key = "…"``), its longest run of value characters."""
    if item and item[0] in _SAMPLE_CALLS or not re.search(r"[\s\"'`=<>(){}]", value):
        return value
    runs = _SNIPPET_VALUE.findall(value)
    mixed = [r for r in runs if any(c.isdigit() for c in r) and any(c.isalpha() for c in r)]
    return max(mixed or runs, key=len) if runs else value


def load_gitleaks(path: str | Path, *, seed: int = 1, commits: int = 200) -> Corpus:
    """Every true-positive secret and false-positive sample of the gitleaks rule files in ``path`` (a work tree or
    a bare git directory), with the rules' descriptions and, when there is history, its commits as ordinary text."""
    checkout = _Checkout(Path(path))
    rng = random.Random(seed)
    secrets: list[Secret] = []
    negatives: list[Negative] = []
    skipped: Counter[str] = Counter()
    vendors: list[str] = []
    for vendor, text in checkout.rule_files():
        tokens = _tokens(text)
        variables = _variables(tokens)
        found = False
        for kind in ("tps", "fps"):
            for items in _blocks(tokens, kind):
                for item in items:
                    try:
                        value = _Expr(item, variables, rng).expr()
                    except (_Unsupported, IndexError, ValueError, re.error):
                        skipped[f"{kind} sample not evaluated"] += 1
                        continue
                    if kind == "tps":
                        secret = _secret_of(item, value)
                        if len(secret) < 8:
                            skipped["secret shorter than 8 characters"] += 1
                            continue
                        secrets.append(Secret(vendor, secret))
                        found = True
                    elif value.strip():
                        negatives.append(Negative(HARD if vendor == "generic" else LOOK_ALIKE, value))
        for m in re.finditer(r'Description:\s*("(?:\\.|[^"\\])*")', text):
            negatives.append(Negative("rule description", _string(m.group(1))))
        if found:
            vendors.append(vendor)
    if not vendors:
        raise RedactionInputError(f"no rule samples found under {path}: is it a gitleaks checkout?")
    for i, (sha, subject) in enumerate(checkout.commits(commits)):
        negatives.append(Negative("commit", (f"deployed {sha} to staging: {subject}", f"{subject} (reverted in "
                                             f"{sha[:12]})", f"can someone look at {sha[:7]}? {subject}")[i % 3]))
    return Corpus(secrets, negatives, vendors, skipped)


# ---- messages people write

PHRASINGS: dict[str, Callable[[str, str, int], str]] = {
    "named": lambda v, s, i: f"the {v} api key is {s}",
    "colon": lambda v, s, i: f"{v} token: {s}",
    "code block": lambda v, s, i: f"this works for me:\n```\nclient = {v.title()}Client(\"{s}\")\nclient.ping()\n```",
    "inline code": lambda v, s, i: f"why does `{s}` get a 401 from {v}?",
    "other language": lambda v, s, i: (f"der {v}-Schlüssel lautet {s}", f"la clé {v} est {s}",
                                       f"la clave de {v} es {s}", f"a chave do {v} é {s}",
                                       f"la chiave di {v} è {s}")[i % 5],
    "in passing": lambda v, s, i: f"for {v} use {s} until friday",
}


SPLIT_PHRASINGS: dict[str, Callable[[str, str, int], tuple[str, str]]] = {
    "named, the value next": lambda v, s, i: (f"the {v} api key is", s),
    "after a colon, the value next": lambda v, s, i: (f"{v} token:", f"{s} for the deploy"),
    "split in two": lambda v, s, i: (f"for {v} use {s[:len(s) // 2]}", s[len(s) // 2:]),
}
"""A secret over two messages of one person: the first names it and the second gives it, or each holds half of it."""

NAME_ENDINGS = ("my password is", "the api key is", "deploy token:", "API_KEY=", "der Schlüssel lautet",
                "le mot de passe est")
"""Messages that end in a secret's name, each followed by ordinary text to see what the name costs it."""

PairRedactor = Callable[[str, str], tuple[str, str]]


def alone(earlier: str, text: str) -> tuple[str, str]:
    """Two messages redacted each on its own (no context)."""
    return redact(earlier), redact(text)


def _pair_removed(secret: str, pair: tuple[str, str]) -> bool:
    return removed(secret, pair[0] + pair[1]) and removed(secret, pair[0] + " " + pair[1])


def split_scores(corpus: Corpus, pair: PairRedactor = redact_after) -> dict[str, Any]:
    """Secrets removed when split over two messages (each half, each split phrasing), and the negatives left as
    redaction alone leaves them after a message that ends in a secret's name."""
    by_phrasing: dict[tuple[str, str], Score] = {}
    for n, secret in enumerate(corpus.secrets):
        half = "held-out" if corpus.held_out(secret.vendor) else "tuning"
        for name, phrase in SPLIT_PHRASINGS.items():
            score = by_phrasing.setdefault((half, name), Score())
            score.secrets += 1
            score.removed += _pair_removed(secret.value, pair(*phrase(secret.vendor, secret.value, n)))
    after_name: dict[str, Score] = {}
    for n, neg in enumerate(x for x in corpus.negatives if x.kind != LOOK_ALIKE):
        score = after_name.setdefault(neg.kind, Score())
        score.secrets += 1
        score.removed += pair(NAME_ENDINGS[n % len(NAME_ENDINGS)], neg.text)[1] == redact(neg.text)
    return {"phrasings": by_phrasing, "after_name": after_name}


def chat_pairs(conversations: list[list[tuple[str, str]]], pair: PairRedactor = redact_after) -> dict[str, Any]:
    """On conversations people wrote, ``(author, text)`` in order: how many messages the context of their author's
    previous message changes beyond what redaction alone does (``consecutive``), and how many change when a message
    ending in a secret's name comes before them (``after a name``), of which how many lose more than their first word
    (``beyond_value``)."""
    consecutive, after, beyond = Score(), Score(), Score()
    examples: list[tuple[str, str, str]] = []
    n = 0
    for messages in conversations:
        last: dict[str, str] = {}
        for author, text in messages:
            alone_text = redact(text)
            if author in last:
                consecutive.secrets += 1
                before, now = pair(last[author], alone_text)
                consecutive.removed += now != alone_text or before != last[author]
            last[author] = alone_text
            ending = NAME_ENDINGS[n % len(NAME_ENDINGS)]
            n += 1
            after.secrets += 1
            beyond.secrets += 1
            _, now = pair(ending, alone_text)
            if now != alone_text:
                after.removed += 1
                rest = alone_text.lstrip().split(maxsplit=1)
                beyond.removed += len(rest) == 2 and not now.endswith(rest[1])
                if len(examples) < 20:
                    examples.append((ending, text[:120], now[:120]))
    return {"consecutive": consecutive, "after_name": after, "beyond_value": beyond, "examples": examples}


def removed(secret: str, clean: str) -> bool:
    """Whether no 8 characters of ``secret`` (the whole of a shorter one) survive in ``clean``."""
    n = min(8, len(secret))
    return not any(secret[i:i + n] in clean for i in range(len(secret) - n + 1))


_BASELINE_RUN = re.compile(r"[A-Za-z0-9+/=_.-]{16,}")


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(k / len(token) * math.log2(k / len(token)) for k in counts.values())


def entropy_baseline(bits: float) -> Callable[[str], str]:
    """The plain rule: a run of 16 or more token characters with at least ``bits`` of entropy per character."""
    def run(text: str) -> str:
        return _BASELINE_RUN.sub(lambda m: "[REDACTED]" if _entropy(m.group()) >= bits else m.group(), text)
    return run


@dataclass
class Score:
    removed: int = 0
    secrets: int = 0

    @property
    def share(self) -> float | None:
        return self.removed / self.secrets if self.secrets else None


def _score(corpus: Corpus, redactor: Callable[[str], str]) -> dict[str, Any]:
    halves = {"tuning": Score(), "held-out": Score()}
    by_phrasing: dict[tuple[str, str], Score] = {}
    by_vendor: dict[str, Score] = {}
    for n, secret in enumerate(corpus.secrets):
        half = "held-out" if corpus.held_out(secret.vendor) else "tuning"
        for name, phrase in PHRASINGS.items():
            gone = removed(secret.value, redactor(phrase(secret.vendor, secret.value, n)))
            for score in (halves[half], by_phrasing.setdefault((half, name), Score()),
                          by_vendor.setdefault(secret.vendor, Score())):
                score.secrets += 1
                score.removed += gone
    intact: dict[str, Score] = {}
    for neg in corpus.negatives:
        score = intact.setdefault(neg.kind, Score())
        score.secrets += 1
        score.removed += redactor(neg.text) == neg.text
    return {"halves": halves, "phrasings": by_phrasing, "vendors": by_vendor, "intact": intact}


def _intact_share(intact: dict[str, Score]) -> float:
    """The share of negatives left intact, near-miss keys aside."""
    kept = [s for kind, s in intact.items() if kind != LOOK_ALIKE]
    return sum(s.removed for s in kept) / max(1, sum(s.secrets for s in kept))


def evaluate(corpus: Corpus, redactor: Callable[[str], str] = redact) -> dict[str, Any]:
    """Shares of secrets removed (each half, each phrasing, each vendor) and of negatives left intact, for
    ``redactor`` and for the entropy baseline at the lowest threshold that leaves as many negatives intact."""
    ours = _score(corpus, redactor)
    target = _intact_share(ours["intact"])
    baseline, bits = None, 0.0
    for step in range(20, 61):  # 2.0 to 6.0 bits per character
        bits = step / 10
        candidate = _score(corpus, entropy_baseline(bits))
        if _intact_share(candidate["intact"]) >= target:
            baseline = candidate
            break
    return {"ours": ours, "baseline": baseline, "baseline_bits": bits, "intact_target": target}


def report(result: dict[str, Any]) -> dict[str, Any]:
    """The result as plain numbers (for JSON and the tables)."""
    def shares(scores: dict[Any, Score]) -> dict[str, Any]:
        return {(k if isinstance(k, str) else " / ".join(k)): {"share": s.share, "n": s.secrets}
                for k, s in scores.items()}
    out: dict[str, Any] = {"baseline_bits": result["baseline_bits"], "intact_target": result["intact_target"]}
    for who in ("ours", "baseline"):
        r = result[who]
        if r is None:
            out[who] = None
            continue
        out[who] = {key: shares(r[key]) for key in ("halves", "phrasings", "vendors", "intact")}
    return out


def load_source(source: str, path: str | Path, *, seed: int = 1) -> Corpus:
    if source not in SOURCES:
        raise RedactionInputError(f"unknown --source {source!r}; choose from {', '.join(SOURCES)}")
    return load_gitleaks(path, seed=seed)


__all__ = ["HARD", "LOOK_ALIKE", "NAME_ENDINGS", "PHRASINGS", "SOURCES", "SPLIT_PHRASINGS", "Corpus", "Negative",
           "RedactionInputError", "Secret", "alone", "chat_pairs", "entropy_baseline", "evaluate", "generate",
           "load_gitleaks", "load_source", "removed", "report", "split_scores"]
