"""Language-level rules every capability shares: words, stopwords by language, how informative a word is,
compression, relative dates resolved, and the cues (asks, decisions, constraints, identifiers) a message carries."""

from .notes import STOPWORDS, compress, information, language, make_note, reply_additions, resolve_dates, terms, words

__all__ = [
    "STOPWORDS",
    "compress",
    "information",
    "language",
    "make_note",
    "reply_additions",
    "resolve_dates",
    "terms",
    "words",
]
