"""Word frequencies: the compact tables answer exactly as ``wordfreq``'s small lists do."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest
from wordfreq import get_frequency_dict, iter_wordlist, zipf_frequency

from threadkeeper.services.lexicon import LANGUAGES, common, zipf


def _sample(lang: str, count: int = 250) -> list[str]:
    words = list(iter_wordlist(lang, "small"))
    return words[:: max(1, len(words) // count)]


@pytest.mark.parametrize("lang", [*LANGUAGES, "nl", "ru", "ja"])
def test_zipf_is_the_small_lists_frequency_of_a_word(lang: str) -> None:
    listed = get_frequency_dict(lang, wordlist="small")
    for word in _sample(lang):
        assert zipf(word, lang) == math.log10(listed[word]) + 9.0, word
    assert zipf("qzxv-not-a-word", lang) == 0.0
    assert zipf("house", "xx") == 0.0  # a language with no list knows no word


@pytest.mark.parametrize("lang", LANGUAGES)
def test_common_reads_a_word_as_wordfreq_does(lang: str) -> None:
    """Plain words, their capitals, hyphenated pairs, digits, elisions and dots: ``common`` says yes at exactly the
    Zipf frequency ``wordfreq`` gives the word, and no a hundredth above it."""
    rng = random.Random(lang)
    words = _sample(lang)
    asked = list(words)
    for word in words[:120]:
        other = rng.choice(words)
        asked += [word.upper(), f"{word}-{other}", f"{word}{rng.randint(0, 99)}", str(rng.randint(0, 3000)),
                  f"{word}-{rng.randint(10, 9999)}", f"l'{word}", f"{word}.{other}", f"{word}_{other}", word + "ß",
                  f"{word} {other}"]
    known = 0
    for word in asked:
        theirs = zipf_frequency(word, lang, wordlist="small")
        known += theirs > 0
        if theirs > 0:
            assert common(word, theirs, (lang,)), (word, theirs)
        assert not common(word, round(theirs + 0.01, 2), (lang,)), (word, theirs)
    assert known > len(asked) // 2  # most of what was asked is a word the list knows, alone or combined


def test_a_plain_word_is_answered_without_importing_wordfreq() -> None:
    """The lists are read from ``wordfreq``'s files; its package (its tokenizer, language tags, text fixes) is
    imported only for a word that is not plain (an elision, a capital, a dot)."""
    probe = ("import sys\n"
             "from threadkeeper.services.lexicon import common, zipf\n"
             "print(common('xq9-vb7mkt2w'), common('well-known'), common('staging', 5.5), zipf('house') > 5,\n"
             "      'wordfreq' in sys.modules)\n"
             "print(common(\"l'heure\", languages=('fr',)), 'wordfreq' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "False", "True", "False", "True", "True"]
