"""Redaction runs a pattern only where it can match: what every match of a pattern holds, and what it starts with, is
read from the pattern itself (``services/safety/literals.py``), and looking only there finds every match the pattern
finds, on the maintained rule set's own patterns and on texts drawn from them."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadkeeper.services.safety import redact
from threadkeeper.services.safety.literals import Anchored, fold, folded, leading, needs


def _maintained() -> list[re.Pattern[str]]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    return [pattern for plugin in get_mapping_from_secret_type_to_class().values()
            if issubclass(plugin, RegexBasedDetector) for pattern in plugin().denylist]


PATTERNS = [
    *_maintained(),
    re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"),
    re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)"),
    re.compile(r"(?i)(?<!\w)(?:keys?|tokens?|clé|schlüssel)(?!\w)[^.!?;:\n]{0,60}?(?:\s(?:is|ist|est)\s*:?|:)"
               r"\s+[\"'`“«]?([^\s\"'`”»]{8,})"),
    re.compile(r"(?i)passw(?:or)?d|pwd|secret|api[_-]?key|(?:access|private)[_-]?key|token"),
    re.compile(r"(?:ab|c){2,3}d?e+(?:f|)g[hi]"),
]
"""The maintained rule set's patterns (what redaction runs), and patterns of the shapes redaction's own have: a word
boundary, ignoring case, a look-behind, words of other languages, repeats and empty alternatives."""

_AROUND = st.text(alphabet=st.sampled_from(list("aAkKsSıİſ _-=:'\"\n.xyz019é")), max_size=12)


def _spans(matches: object) -> list[tuple[int, int]]:
    return [m.span() for m in matches]  # type: ignore[attr-defined]


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.pattern[:40])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_a_pattern_is_skipped_only_where_it_cannot_match(pattern: re.Pattern[str], data: st.DataObject) -> None:
    """Every text a pattern matches (drawn from the pattern itself, in any case it matches, with text around it)
    holds one string of each of its :func:`needs`, and searching from the strings it starts with finds every match,
    in order, that ``finditer`` finds."""
    sample = data.draw(st.from_regex(pattern, fullmatch=True))
    text = data.draw(_AROUND) + sample + data.draw(_AROUND)
    anchored = Anchored(pattern)
    for case in (sample, text, text + " " + text.upper() + text):
        if pattern.search(case):
            haystack = fold(case) if pattern.flags & re.IGNORECASE else case
            for strings in needs(pattern):
                assert any(s in haystack for s in strings), (strings, case)
        assert _spans(anchored.finditer(case, folded(case))) == _spans(pattern.finditer(case))
    assert pattern.search(sample)


def test_what_a_pattern_needs_and_starts_with_is_read_from_it() -> None:
    """Literal text, alternatives joined, the signs an alternation cannot do without; nothing from a part that may be
    empty or from a look-behind; lower case for a pattern that ignores case."""
    assert needs(re.compile(r"\bAKIA[0-9A-Z]{16}")) == (frozenset({"AKIA"}),)
    assert needs(re.compile(r"(?i)(?<=\W)(?:\[|)(?:cloudant|cl)(?:_|-|)(?:key|pwd)(?: *)(?:=|:| +)(?: *)([0-9a-f]{64})")) \
        == (frozenset(f"{name}{sep}{word}" for name in ("cl", "cloudant") for sep in ("", "_", "-") for word in ("key", "pwd")),
            frozenset({"=", ":", " "}))
    assert needs(re.compile(r"[a-z0-9]{32}")) == ()
    assert needs(re.compile(r"(?:ab)?c+")) == (frozenset({"c"}),)
    assert leading(re.compile(r"(?i)\b(?:Bearer|token)\s+x")) == ("token", "bearer")
    assert leading(re.compile(r"(?i)(?:pass|password|pwd)")) == ("pwd", "pass")  # "password" starts where "pass" does
    assert leading(re.compile(r"(?:x|)y")) == ("y", "xy")
    assert leading(re.compile(r"[a-z]+key")) is None


def test_folding_reads_every_letter_re_takes_for_an_ascii_one() -> None:
    """Every character that a pattern ignoring case matches to an ASCII letter (the dotted and dotless i, the long s,
    the Kelvin sign as well as the other case) folds to that letter, place for place."""
    every = "".join(map(chr, range(0x110000)))
    for letter in "abcdefghijklmnopqrstuvwxyz":
        for char in set(re.findall(letter, every, re.IGNORECASE)):
            assert fold(char) == letter, (letter, char)
    assert folded("İstanbul") == "istanbul" and folded("paſſword") == "password"


def test_a_vendor_rule_that_ignores_case_still_names_an_upper_case_key() -> None:
    """A rule that ignores case is looked for in the folded text: an upper-case name gets the vendor's marker, not
    only the assignment rule's."""
    text = 'IBM_CLOUD_IAM_API_KEY = "' + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5hJ7kL9mN" + '"'
    assert "[REDACTED IBM CLOUD IAM KEY]" in redact(text)


def test_a_search_among_close_starts_finds_the_match_where_it_hands_over() -> None:
    """Past a few starts close together that do not match, the search lets ``re`` scan on from the start it reached,
    which is itself a match here."""
    pattern = re.compile(r"(?i)\bkey\b:")
    text = "keyx " * 8 + "KEY: value key: again"
    assert _spans(Anchored(pattern).finditer(text, folded(text))) == _spans(pattern.finditer(text)) == [(40, 44), (51, 55)]
