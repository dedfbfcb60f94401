"""Language-level rules every capability shares: words, stopwords by language, how informative a word is,
compression, the terms search indexes and queries by, relative dates resolved, and the cues (asks, decisions,
constraints, identifiers) a message carries."""

from .dates import named_days, named_events
from .index import (
    AUTHOR_WEIGHT,
    DAY_WEIGHT,
    OFF_LOOP,
    TermIndex,
    Unread,
    author_gain,
    field_gain,
    fuse,
    length,
    name_words,
    postings,
    speaks_of_self,
)
from .notes import STOPWORDS, compress, information, language, make_note, reply_additions, resolve_dates, terms, words
from .search import search_terms, word_parts

__all__ = [
    "AUTHOR_WEIGHT",
    "DAY_WEIGHT",
    "OFF_LOOP",
    "STOPWORDS",
    "TermIndex",
    "Unread",
    "author_gain",
    "field_gain",
    "fuse",
    "compress",
    "information",
    "language",
    "length",
    "make_note",
    "name_words",
    "named_days",
    "named_events",
    "postings",
    "reply_additions",
    "resolve_dates",
    "search_terms",
    "speaks_of_self",
    "terms",
    "word_parts",
    "words",
]
