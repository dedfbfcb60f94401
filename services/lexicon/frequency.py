"""Word frequencies on the Zipf scale (a word seen once per million words is 3, "the" about 7.7), from ``wordfreq``'s
*small* lists only: each holds the words seen at least once per million words (Zipf 3 and above). A word the small
list lacks is rarer than Zipf 3, which is all a rule here needs to know of it.

The lists are read from ``wordfreq``'s own files into a compact table per language (its words in one byte string,
each word's frequency band in two bytes, a hash table of their positions): six languages cost a process about 4 MB,
where ``wordfreq``'s dictionaries of the same lists cost it 37 MB. The answers are ``wordfreq``'s: a word is read as
``wordfreq`` reads it (case folded; a word it splits, "well-known", as rare as the combination of its parts; digits
grouped), the plain words of the six languages (Latin letters and digits, hyphenated or not) without importing
``wordfreq`` at all, any other through ``wordfreq``'s tokenizer."""

from __future__ import annotations

import gzip
import importlib.util
import io
import math
import os
import re
import unicodedata
import zlib
from array import array
from functools import lru_cache

LANGUAGES = ("en", "de", "fr", "es", "pt", "it")
"""The languages :func:`common` asks by default: those the safety rules and the ledger know."""

_CODES = {"no": "nb"}
"""Language codes of the stopword lists that ``wordfreq`` spells otherwise."""

_LEAST = 10**0.0 / 1e9
"""``wordfreq``'s floor for a word it does not know (Zipf 0, as a frequency)."""

_PLAIN = re.compile(r"[0-9a-z\u00df-\u00f6\u00f8-\u024f\u1e00-\u1eff]+(?:-[0-9a-z\u00df-\u00f6\u00f8-\u024f\u1e00-\u1eff]+)*")
"""A plain word: runs of Latin letters and digits joined by single hyphens. ``wordfreq`` splits it at its hyphens
and nowhere else (Unicode keeps letters and digits together in one word), so its tokens are its parts."""
_MULTI_DIGIT = re.compile(r"\d[\d.,]+")
"""Where ``wordfreq`` groups digits (``wordfreq.numbers``): a word with none looks itself up."""


def _data() -> str:
    """``wordfreq``'s data folder, found without importing ``wordfreq``."""
    spec = importlib.util.find_spec("wordfreq")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("wordfreq is not installed")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


@lru_cache(maxsize=1)
def _available() -> frozenset[str]:
    return frozenset(name[len("small_"):-len(".msgpack.gz")] for name in os.listdir(_data())
                     if name.startswith("small_") and name.endswith(".msgpack.gz"))


def _code(lang: str) -> str | None:
    code = _CODES.get(lang, lang)
    return code if code in _available() else None


class _Table:
    """One language's small list: its words' UTF-8 bytes one after another in one byte string (with their offsets),
    each word's band (``wordfreq``'s frequency in centibels below 1: band ``b`` is a frequency of ``10 ** (-b / 100)``,
    Zipf ``9 - b / 100``), and a hash table of their positions (open addressing on CRC-32). The list is read as a
    stream, one word at a time, so no word is ever held as an object of its own."""

    __slots__ = ("bands", "offsets", "slots", "words")

    def __init__(self, packed: io.BufferedIOBase) -> None:
        import msgpack

        reader = msgpack.Unpacker(packed, raw=True)
        buckets = reader.read_array_header() - 1
        header = reader.unpack()
        if not isinstance(header, dict) or header.get(b"format") != b"cB" or header.get(b"version") != 1:
            raise ValueError(f"wordfreq's small list is not in the format it reads: {header!r}")
        words, self.offsets, self.bands = bytearray(), array("I", [0]), array("H")
        for band in range(buckets):
            for _ in range(reader.read_array_header()):
                words += reader.unpack()
                self.offsets.append(len(words))
                self.bands.append(band)
        self.words = bytes(words)
        self.slots = array("I", bytes(4 * (1 << (len(self.bands) * 3 // 2).bit_length())))
        for i in range(len(self.bands)):
            slot = self._slot(self.words[self.offsets[i]:self.offsets[i + 1]])
            self.slots[slot] = i + 1  # a word listed twice keeps its last band, as wordfreq's dict does

    def _slot(self, key: bytes) -> int:
        """Where ``key`` is in the hash table, or the empty slot where it would go."""
        mask = len(self.slots) - 1
        slot = zlib.crc32(key) & mask
        while (held := self.slots[slot]) and self.words[self.offsets[held - 1]:self.offsets[held]] != key:
            slot = (slot + 1) & mask
        return slot

    def band(self, word: str) -> int | None:
        """The band of ``word`` as it is spelled, or None when the list lacks it."""
        held = self.slots[self._slot(word.encode(errors="surrogatepass"))]
        return self.bands[held - 1] if held else None


@lru_cache(maxsize=32)
def _table(code: str) -> _Table:
    with gzip.open(os.path.join(_data(), f"small_{code}.msgpack.gz"), "rb") as packed:
        return _Table(packed)


@lru_cache(maxsize=1024)
def _zipf_of_band(band: int) -> float:
    return math.log10(10 ** (-band / 100)) + 9.0


def zipf(word: str, lang: str = "en") -> float:
    """How common ``word`` (one lowercased token, looked up as it is) is in ``lang``: its Zipf frequency, 0 when the
    small list lacks it or ``lang`` has none."""
    code = _code(lang)
    band = _table(code).band(word) if code is not None else None
    return 0.0 if band is None else _zipf_of_band(band)


def common(word: str, at_least: float = 3.0, languages: tuple[str, ...] = LANGUAGES) -> bool:
    """Whether ``word`` is at least ``at_least`` on the Zipf scale in one of ``languages``, as ``wordfreq`` reads a
    word (case folded; a word it splits, "well-known", as rare as the combination of its parts; digits grouped).
    3.0, the default, is "a word of the language"; 5.5 is among its few hundred most common words."""
    for lang in languages:
        code = _code(lang)
        if code is not None and _zipf_frequency(word, code) >= at_least:
            return True
    return False


_READ_PLAINLY = frozenset({"en", "de", "fr", "es", "pt", "it"})
"""The languages whose words ``wordfreq`` reads as this module does a plain word: Unicode-normalized (NFC), case
folded, cut by its general tokenizer."""


def _zipf_frequency(word: str, code: str) -> float:
    """``wordfreq.zipf_frequency(word, code, wordlist="small")``, from the compact table."""
    if code not in _READ_PLAINLY:
        from wordfreq import zipf_frequency

        return float(zipf_frequency(word, code, wordlist="small"))
    if _PLAIN.fullmatch(word) and word.casefold() == word and unicodedata.is_normalized("NFC", word):
        tokens = word.split("-")
    else:
        from wordfreq.tokens import lossy_tokenize

        tokens = lossy_tokenize(word, code)
    return round(math.log(_frequency(tokens, _table(code)), 10) + 9, 2)


def _frequency(tokens: list[str], table: _Table) -> float:
    """The frequency ``wordfreq`` gives a word made of ``tokens`` (``wordfreq._word_frequency`` for a language cut
    by its general tokenizer): the parts' frequencies combined as ``1/f = 1/f1 + 1/f2 + …``, the floor when one is
    missing, rounded to three significant digits."""
    if not tokens:
        return _LEAST
    one_over = 0.0
    for token in tokens:
        looked_up, share = _digits(token)
        band = table.band(looked_up)
        if band is None:
            return _LEAST
        one_over += 1.0 / (10 ** (-band / 100) * share)
    unrounded = max(1.0 / one_over, _LEAST)
    return round(unrounded, math.floor(-math.log(unrounded, 10)) + 3)


def _digits(token: str) -> tuple[str, float]:
    """``token`` as ``wordfreq`` looks it up (each group of digits as zeros) and the share of that entry its own
    digits have (1 for a token without a group)."""
    if not _MULTI_DIGIT.search(token):
        return token, 1.0
    from wordfreq.numbers import digit_freq, smash_numbers

    looked_up = smash_numbers(token)
    return looked_up, (digit_freq(token) if looked_up != token else 1.0)


def load(languages: tuple[str, ...] = LANGUAGES) -> None:
    """Read the lists of ``languages`` now (each takes tens of milliseconds the first time a word of it is asked
    about), and import ``wordfreq``'s tokenizer, which reads the words that are not plain (a fifth of a second): a
    worker does so before it serves, so no acknowledgement or turn waits for it."""
    for lang in languages:
        code = _code(lang)
        if code is not None:
            _table(code)
    import wordfreq  # noqa: F401 - its tokenizer and digit rules, imported here rather than in a turn
