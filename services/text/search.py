"""The one term rule of search: what a message, a memory record or a question is indexed and queried by.

Recall, memory and the search tool all call :func:`search_terms`, so a word is found the same way wherever it
was said."""

from __future__ import annotations

import re
from functools import lru_cache

from .notes import STOPWORDS, language, stem, words

_SEPARATED = re.compile(r"\w[-_./:@#]+\w").search
_PARTS = re.compile(r"[^\W_]+").findall
_STOP_PARTS = frozenset(["http", "https", "www", "com", "org", "net", "io"]) | STOPWORDS["en"]


def word_parts(word: str) -> list[str]:
    """The parts a compound token (URL, path, ticket key, hyphenated name) is also found by, as search engines'
    word-delimiter filters split it: "auth-gateway-overview" answers "auth-gateway" and "overview". Parts of one
    letter and the parts every web address has (``https``, ``www``, ``com``) are left out; a plain word has none."""
    if not _SEPARATED(word):
        return []
    return [p for p in _PARTS(word) if len(p) > 1 and p not in _STOP_PARTS]


@lru_cache(maxsize=50_000)
def search_terms(text: str) -> tuple[str, ...]:
    """The terms a text is indexed and queried by: its content words (function words of its own language
    dropped), stemmed."""
    found = words(text)
    lang = language(text.lower().split())
    if lang != "en":
        stop = STOPWORDS[lang]
        found = [w for w in found if w not in stop]
    parts = [p for w in found for p in word_parts(w)]
    return tuple(stem(found + parts))
