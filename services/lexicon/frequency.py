"""Word frequencies on the Zipf scale (a word seen once per million words is 3, "the" about 7.7), from ``wordfreq``'s
*small* lists only: each holds the words seen at least once per million words (Zipf 3 and above). Asking six
languages about one word costs a process 20 MB and 0.14 s with them, 218 MB and 1.7 s with the large lists (redacting
"the password for staging is …" in a fresh process). A word the small list lacks is rarer than Zipf 3, which is
all a rule here needs to know of it."""

from __future__ import annotations

import math
from functools import lru_cache

from wordfreq import available_languages, get_frequency_dict, zipf_frequency

LANGUAGES = ("en", "de", "fr", "es", "pt", "it")
"""The languages :func:`common` asks by default: those the safety rules and the ledger know."""

_CODES = {"no": "nb"}
"""Language codes of the stopword lists that ``wordfreq`` spells otherwise."""
_AVAILABLE = frozenset(available_languages("small"))


def _code(lang: str) -> str | None:
    code = _CODES.get(lang, lang)
    return code if code in _AVAILABLE else None


@lru_cache(maxsize=32)
def _table(lang: str) -> dict[str, float]:
    code = _code(lang)
    if code is None:
        return {}
    return {w: math.log10(f) + 9.0 for w, f in get_frequency_dict(code, wordlist="small").items()}


def zipf(word: str, lang: str = "en") -> float:
    """How common ``word`` (one lowercased token, looked up as it is) is in ``lang``: its Zipf frequency, 0 when the
    small list lacks it or ``lang`` has none."""
    return _table(lang).get(word, 0.0)


def common(word: str, at_least: float = 3.0, languages: tuple[str, ...] = LANGUAGES) -> bool:
    """Whether ``word`` is at least ``at_least`` on the Zipf scale in one of ``languages``, as ``wordfreq`` reads a
    word (case folded; a word it splits, "well-known", as rare as the combination of its parts; digits grouped).
    3.0, the default, is "a word of the language"; 5.5 is among its few hundred most common words."""
    for lang in languages:
        code = _code(lang)
        if code is not None and zipf_frequency(word, code, wordlist="small") >= at_least:
            return True
    return False
