"""Notes: what each message said, as its most informative sentences, compressed.

A note is computed once, when the message's turn commits, and stored with the message. It keeps a
message's most informative sentences with filler and function words dropped, while names, numbers,
identifiers, URLs, paths, quantities and dates stay verbatim, and relative dates ("yesterday", "next
Friday", "3 days ago") are resolved against the message's own time. Function words come from the
stopword lists of the message's language (detected from those same lists), so the rule is not
English-only; text in scripts without spaces (Japanese, Chinese, Korean) is kept as written.

:func:`terms` gives the words a note is ranked by (see :mod:`services.notebook`).
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from collections.abc import Sequence
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from types import ModuleType

import Stemmer

from ..lexicon import zipf
from ..safety import redact
from . import extract as x

NOTE_MAX_WORDS = 40
"""A note keeps at most about this many words of a message: all of an ordinary message's content words, the
best sentences of a long one (names, numbers and identifiers always)."""



def _bm25s_stopwords() -> ModuleType:
    """bm25s's stopword lists (a file of word tuples), read from its own file: importing the ``bm25s`` package for
    them would import numpy too (10 MB), which a turn that searches nothing never uses."""
    spec = importlib.util.find_spec("bm25s")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("bm25s is not installed")
    path = os.path.join(list(spec.submodule_search_locations)[0], "stopwords.py")
    lists = importlib.util.spec_from_file_location("threadkeeper_bm25s_stopwords", path)
    if lists is None or lists.loader is None:
        raise ImportError(f"bm25s's stopword lists are not at {path}")
    module = importlib.util.module_from_spec(lists)
    lists.loader.exec_module(module)
    return module


_sw = _bm25s_stopwords()
_CONTRACTIONS = frozenset("""i'm i've i'll i'd you've you'll you'd he's she's we're we've we'll we'd they're they've
    they'll they'd that's there's here's what's who's where's how's let's it'll that'll""".split())
STOPWORDS: dict[str, frozenset[str]] = {
    "en": frozenset(_sw.STOPWORDS_EN_PLUS) | _CONTRACTIONS, "de": frozenset(_sw.STOPWORDS_GERMAN),
    "es": frozenset(_sw.STOPWORDS_SPANISH), "fr": frozenset(_sw.STOPWORDS_FRENCH),
    "it": frozenset(_sw.STOPWORDS_ITALIAN), "pt": frozenset(_sw.STOPWORDS_PORTUGUESE),
    "nl": frozenset(_sw.STOPWORDS_DUTCH), "sv": frozenset(_sw.STOPWORDS_SWEDISH),
    "da": frozenset(_sw.STOPWORDS_DANISH), "no": frozenset(_sw.STOPWORDS_NORWEGIAN),
    "ru": frozenset(_sw.STOPWORDS_RUSSIAN), "tr": frozenset(_sw.STOPWORDS_TURKISH),
}
_KEEP = frozenset("""no not nor never none nothing nobody without against before after until during more most
    few only again once than don't didn't doesn't isn't aren't wasn't weren't won't wouldn't can't cannot couldn't
    shouldn't mustn't hasn't haven't hadn't nicht kein keine keinen nie niemals ohne nunca nada sin jamais pas
    rien sans non mai senza nao não nunca niet geen nooit inte aldrig ikke ingen не нет никогда""".split())
"""Words that change what a sentence means (negation, order, comparison): never dropped as filler."""
_FILLER = frozenset("""lol lmao lmfao rofl haha hahaha hahahaha hehe hihi jaja jajaja mdr xd hmm hm hmmm mm uh um
    umm uhh oh ohh ah ahh aw aww awww ooh wow omg yeah yea yep yup ya yah yes ok okay okk k kk alright hey hi
    hello heya hiya yo thanks thank thx ty please pls plz btw tbh imo idk ikr gonna wanna gotta kinda sorta
    really actually basically literally just like well so anyway anyways totally definitely sure cool nice
    great awesome haha! lol! ja jo gracias merci danke bitte oui si sí vale genial""".split())
"""Conversational filler in several languages; it carries no information once out of its moment."""

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_ASCII_RUN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_./:@#-]*[A-Za-z0-9])?")
"""A run of Latin letters, digits and identifier punctuation: how an identifier sits inside CJK text."""
_EDGE = "\"'“”‘’«»()[]{}<>*_~`,;:!?.…"
_ALNUM = re.compile(r"[^\W_]").search
"""A letter or a digit (what ``str.isalnum`` says of a character, found in one pass)."""
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_CODE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_ERROR_LINE = re.compile(r"^[^\S\n]*+(?:[\w.]+(?:Error|Exception|Panic|Fault)\b.*|.*\b(?:FATAL|panic:)\s.*)$", re.MULTILINE)
"""An error line of a pasted block, read from its own start (its indent taken once: blank lines before it are not
part of it, so a block of 40,000 blank lines costs its length once)."""
_URLISH = re.compile(r"^<?https?://|^[\w.-]+/[\w./-]+$")
_has_digit = re.compile(r"\d").search
_has_alnum = re.compile(r"[^\W_]").search


MAX_INFO = 8.0
"""The information of a word no general word list knows (a name, a rare term, a typo)."""


@lru_cache(maxsize=100_000)
def information(word: str, lang: str = "en") -> float:
    """How much a word says, from how rare it is in general use: ``8 - Zipf frequency`` in its language or
    in English, whichever knows it better ("the" about 0.3, "cooking" 3.5, "melatonin" 5, a name 8)."""
    low = word.lower().strip(_EDGE).replace("’", "'")
    frequency = max(zipf(low, "en"), zipf(low, lang) if lang != "en" else 0.0)
    return max(0.25, MAX_INFO - frequency)


_LANGUAGES_OF: dict[str, tuple[str, ...]] = {}
for _lang, _words in STOPWORDS.items():
    for _w in _words:
        _LANGUAGES_OF[_w] = (*_LANGUAGES_OF.get(_w, ()), _lang)


def language(words: list[str]) -> str:
    """The language whose function words the text uses most (English when nothing stands out)."""
    hits: dict[str, int] = {}
    for w in words:
        for lang in _LANGUAGES_OF.get(w.lower(), ()):
            hits[lang] = hits.get(lang, 0) + 1
    best = max(hits.items(), key=lambda kv: (kv[1], kv[0] == "en"), default=("en", 0))
    return best[0] if best[1] else "en"


# -- relative dates ----------------------------------------------------------------------------

_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_RELATIVE = re.compile(
    r"\b(?:(?P<fixed>the day before yesterday|the day after tomorrow|yesterday|tomorrow|today|tonight|"
    r"this morning|this afternoon|this evening|vorgestern|gestern|übermorgen|heute|anteayer|ayer|pasado mañana|"
    r"hoy|avant-hier|après-demain|demain|aujourd'hui)|"
    r"(?P<mod>last|next|this|coming|past) (?P<unit>week|month|year|weekend|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|ten) (?P<span>days?|weeks?|months?) "
    r"(?P<dir>ago|from now)|in (?P<n2>\d{1,3}|a|an|one|two|three|four|five|six|seven|ten) (?P<span2>days?|weeks?))\b",
    re.IGNORECASE)
_FIXED = {"the day before yesterday": -2, "vorgestern": -2, "anteayer": -2, "avant-hier": -2, "yesterday": -1,
          "gestern": -1, "ayer": -1, "today": 0, "tonight": 0, "this morning": 0, "this afternoon": 0,
          "this evening": 0, "heute": 0, "hoy": 0, "aujourd'hui": 0, "tomorrow": 1, "demain": 1,
          "the day after tomorrow": 2, "übermorgen": 2, "pasado mañana": 2, "après-demain": 2}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "ten": 10}


def _iso(d: date) -> str:
    return d.isoformat()


def _resolve(match: re.Match[str], today: date) -> str:
    fixed = match.group("fixed")
    if fixed:
        return _iso(today + timedelta(days=_FIXED[fixed.lower()]))
    if match.group("mod"):
        mod, unit = match.group("mod").lower(), match.group("unit").lower()
        step = -1 if mod in ("last", "past") else 1 if mod in ("next", "coming") else 0
        if unit in _WEEKDAYS:
            delta = _WEEKDAYS.index(unit) - today.weekday()
            if step < 0:
                delta = delta - 7 if delta >= 0 else delta
            elif step > 0:
                delta = delta + 7 if delta <= 0 else delta
            else:
                delta = delta if delta >= 0 else delta + 7
            return _iso(today + timedelta(days=delta))
        if unit in ("week", "weekend"):
            monday = today - timedelta(days=today.weekday()) + timedelta(weeks=step)
            return f"{unit} of {_iso(monday if unit == 'week' else monday + timedelta(days=5))}"
        if unit == "month":
            month = today.month + step
            year = today.year + (month - 1) // 12
            return f"{year}-{(month - 1) % 12 + 1:02d}"
        return str(today.year + step)
    raw = (match.group("n") or match.group("n2") or "1").lower()
    n = int(raw) if raw.isdigit() else _NUMBERS.get(raw, 1)
    span = (match.group("span") or match.group("span2") or "days").lower()
    days = n * (7 if span.startswith("week") else 30 if span.startswith("month") else 1)
    sign = -1 if (match.group("dir") or "").lower() == "ago" else 1
    return _iso(today + timedelta(days=sign * days))


def resolve_dates(text: str, created_at: float, *, own_day: str | None = None) -> str:
    """Relative date phrases replaced by the dates they mean, seen from ``created_at`` (UTC).

    ``own_day`` replaces a phrase that means the message's own day ("today", "tonight"): a note sits under
    its day's heading, so the date would only repeat it."""
    if not _RELATIVE.search(text):
        return text
    today = datetime.fromtimestamp(created_at, tz=timezone.utc).date()

    def resolved(match: re.Match[str]) -> str:
        value = _resolve(match, today)
        return own_day if own_day is not None and value == _iso(today) else value

    return _RELATIVE.sub(resolved, text)


# -- compression -------------------------------------------------------------------------------

def _core(token: str) -> str:
    return token.strip(_EDGE)


def _keep_token(token: str, core: str, stop: frozenset[str], digit: bool) -> bool:
    if not core:
        return False
    if digit or "/" in token and _URLISH.match(token) or not core.isascii() and _CJK.search(core):
        return True
    low = core.lower().replace("’", "'")
    if low in _KEEP:
        return True
    if low in _FILLER or low in stop:
        return False
    return core.isalpha() or bool(_has_alnum(core))


def compress(sentence: str, stop: frozenset[str]) -> str:
    """A sentence without filler and function words; identifiers, numbers and names kept verbatim."""
    out: list[str] = []
    after_number = False
    for token in sentence.split():
        url = x.URL.match(token) if "http" in token else None
        if url:
            out.append(url.group(1).rstrip(".,);>"))
            after_number = False
            continue
        core = _core(token)
        digit = not core.isalpha() and bool(_has_digit(core))
        if _keep_token(token, core, stop, digit) or (after_number and len(core) == 1 and core.isalpha()):
            out.append(core)  # a letter right after a number is its unit ("30 s", "5 m")
        after_number = digit
    return " ".join(out)


def _sentences(text: str) -> list[str]:
    """Sentences of prose; a pasted block contributes only its error lines."""
    errors = [m.group(0).strip() for block in _CODE.findall(text) for m in _ERROR_LINE.finditer(block)]
    prose = _CODE.sub("\n", text)
    out = []
    for piece in _SENTENCE_END.split(prose):
        piece = " ".join(piece.split())
        if piece and not x.looks_like_log(piece):
            out.append(piece)
    return out + [" ".join(e.split())[:200] for e in dict.fromkeys(errors)][:2]


def _weight(short: str, lang: str) -> float:
    """How much a compressed sentence says: the information of its words, numbers counting double."""
    return sum(information(t, lang) * (2.0 if _has_digit(t) else 1.0) for t in short.split())


def make_note(text: str, created_at: float) -> str | None:
    """The note of a message: its best sentences (all of a short message), compressed; None if nothing is left."""
    return _note(text, created_at)[0]


@lru_cache(maxsize=4_096)
def _note(text: str, created_at: float) -> tuple[str | None, str]:
    """The note and the language it was made in (made from the text with its secrets redacted: a note travels
    into handoffs and the stored ledger, where only the person's own message may keep them)."""
    text = redact(text).strip()
    if not text:
        return None, "en"
    sentences = _sentences(resolve_dates(text, created_at, own_day=""))
    if not sentences:
        return None, "en"
    lang = language(" ".join(sentences).split())
    stop = STOPWORDS[lang]
    compressed = [(i, short) for i, short in ((i, compress(s, stop)) for i, s in enumerate(sentences))
                  if _informative(short)]
    if not compressed:
        return None, lang
    sizes = {i: len(short.split()) if not _CJK.search(short) else len(short) // 2 for i, short in compressed}
    if sum(sizes.values()) <= NOTE_MAX_WORDS:
        return "; ".join(short.rstrip(";") for _, short in compressed), lang
    chosen: list[tuple[int, str]] = []
    words = 0
    ranked = sorted(compressed, key=lambda c: (-_weight(c[1], lang) / (sizes[c[0]] + 3) ** 0.5, c[0]))
    for i, short in ranked:
        n = sizes[i]
        if chosen and words + n > NOTE_MAX_WORDS:
            continue
        if not chosen and n > NOTE_MAX_WORDS:
            short = _clip(short, NOTE_MAX_WORDS, lang)
            n = NOTE_MAX_WORDS
        chosen.append((i, short))
        words += n
    chosen.sort()
    return "; ".join(s.rstrip(";") for _, s in chosen), lang


_IDENTIFYING = re.compile(r"[\d/_@#]").search


def _essential(word: str) -> bool:
    """Numbers and identifiers: what a shortened note keeps whatever its length."""
    return bool(_IDENTIFYING(word))


def _unit(before: str, word: str) -> bool:
    """``word`` is the unit of the number before it ("250 ms", "3 GB", "5 m")."""
    return bool(_has_digit(before)) and bool(x.NUMBER_UNIT.fullmatch(f"{before} {word}".rstrip(";"))
                                              or len(word) == 1 and word.isalpha())


def _clip(text: str, words: int, lang: str = "en") -> str:
    """At most about ``words`` words, in their order: every number and identifier, then the most informative
    of the others (:func:`information`; names count as rare)."""
    if _CJK.search(text) and " " not in text.strip():  # no spaces: the opening characters, and every identifier
        end = words * 2
        cut = next((m for m in _ASCII_RUN.finditer(text) if m.start() < end < m.end()), None)
        end = cut.end() if cut else end  # never through the middle of an identifier
        rest = [run for run in _ASCII_RUN.findall(text[end:]) if _essential(run)]
        return " ".join([text[:end] + ("…" if end < len(text) else ""), *rest])
    parts = text.split()
    if len(parts) <= words:
        return text
    essential = [i for i, p in enumerate(parts) if _essential(p) or i and _unit(parts[i - 1], p)][: words * 2]
    others = sorted((i for i, p in enumerate(parts) if i not in essential),
                    key=lambda i: (-information(parts[i].rstrip(";"), lang), i))
    keep = sorted(essential + others[: max(1, words - len(essential))])  # and what the numbers are about
    return " ".join(parts[i] for i in keep).rstrip(";")


def _informative(text: str) -> bool:
    """Two words or more, or one that is a name, a number or an identifier (a lone "see" says nothing)."""
    words = text.split()
    if len(words) >= 2 or _CJK.search(text):
        return True
    return bool(words) and (words[0][:1].isupper() or any(c.isdigit() or c in "/-_.@#" for c in words[0]))


# -- terms -------------------------------------------------------------------------------------

def words(text: str) -> list[str]:
    """The words of ``text`` that carry content, in order and with repeats: lowercased words and numbers,
    filler and English function words dropped, character pairs for CJK text (notes and recall share it)."""
    out: list[str] = []
    english = STOPWORDS["en"]
    for token in text.lower().split():
        word = token.strip(_EDGE)
        if not word or (len(word) == 1 and not word.isdigit()):
            continue
        if not word.isascii() and _CJK.search(word):
            for run in _CJK_RUN.findall(word):
                out.extend(run[i:i + 2] for i in range(max(1, len(run) - 1)))
            out.extend(run for run in _ASCII_RUN.findall(word) if run not in english and run not in _FILLER)
            continue
        if word in _FILLER or word in english or not _ALNUM(word):
            continue
        out.append(word)
    return out


@lru_cache(maxsize=20_000)
def terms(text: str) -> frozenset[str]:
    """The words a note is ranked by (:func:`words`, as a set)."""
    return frozenset(words(text))


# -- what a reply adds -------------------------------------------------------------------------

_DIGITS = re.compile(r"\d+(?:[.,:]\d+)*")
_STEMMERS = threading.local()


def stem(found: Sequence[str]) -> list[str]:
    """``found`` stemmed by the one stemming rule for every text, English: a short query's language cannot be told,
    and a word must stem the same way in a question as in the message that answers it (other languages mostly lose
    only plural endings). One stemmer per thread: a PyStemmer object may be used by one thread at a time, and an
    index is built off the event loop (see :mod:`services.recall`)."""
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = Stemmer.Stemmer("english")
    return list(stemmer.stemWords(list(found)))


TEMPLATE_OVERLAP = 0.75
"""Two sentences whose words (stemmed, numbers masked) overlap this much are one form filled twice."""


def shape(sentence: str) -> frozenset[str]:
    """A sentence's form: its words stemmed, numbers masked, so one template filled with other counts ("1 reply",
    "2 replies") has one shape."""
    return frozenset(stem(list(terms(_DIGITS.sub("0", sentence)))))


_QUOTED = re.compile(r"\u201c[^\u201d]{1,2000}\u201d")
"""Words the reply quotes (between curly quotation marks): someone else's, kept by their own message's note."""


def reply_additions(reply: str, asked: Sequence[str], earlier_replies: Sequence[str]) -> str:
    """The sentences of the bot's reply that add something: not a form its earlier replies already took (a
    template filled with other counts is boilerplate), and with a word or number that neither the messages it
    answers nor its earlier replies hold (a quote of the question, or a repeat, adds nothing). What it quotes
    is left out first. What is left becomes the reply's note."""
    reply = _QUOTED.sub("\u201c\u201d", reply)
    seen = [shape(s) for text in earlier_replies for s in _sentences(_QUOTED.sub("\u201c\u201d", text))]
    known = frozenset().union(*(terms(text) for text in [*asked, *earlier_replies]))

    def repeated(form: frozenset[str]) -> bool:
        return any(len(form & old) >= TEMPLATE_OVERLAP * len(form | old) for old in seen)

    kept = [s for s in _sentences(reply) if not terms(s) <= known and not repeated(shape(s))]
    return " ".join(kept)
