"""What a regular expression cannot match without, read from the expression itself, so that a text which lacks it is
never scanned by it.

Python's ``re`` tries a pattern at every place in a text unless the pattern starts with a literal it can look for; a
pattern that ignores case, or starts with a look-behind or ``\\b``, is tried everywhere, at some 100 ns a character
for an alternation of words. Redaction runs dozens of such patterns over every message, so what decides its cost is
how many of them run and where:

- :func:`needs`: strings every match holds one of each of (``AKIA``, ``xox``, ``cl`` + ``key``…, ``=`` or ``:``):
  a text that lacks one cannot match, and the pattern is not run on it.
- :func:`leading` and :class:`Anchored`: strings every match starts with (``password``, ``api key``, ``bearer``):
  the pattern is tried only where one of them starts, found by a case-sensitive search for those strings in the
  text folded to lower case, which ``re`` runs as a fast scan.

Both are read with the parser behind ``re`` itself, and only its ASCII literals are used. A pattern that ignores case
has them in lower case, looked for in :func:`folded` text, which folds every character ``re`` matches to an ASCII
letter when ignoring case to that letter. Nothing here changes what a pattern matches, only where it is tried.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from typing import Any

_MOST = 64
"""The most strings one requirement lists; a pattern whose alternatives multiply past it is read less closely."""

_parser = importlib.import_module("re._parser")  # the parser behind ``re``: what it reads is what re matches
_c = importlib.import_module("re._constants")
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT)
_ZERO_WIDTH = (_c.AT, _c.ASSERT, _c.ASSERT_NOT)


def _times(left: set[str], right: set[str]) -> set[str]:
    return {a + b for a in left for b in right}


def _union(alternatives: Iterable[Any], read: Callable[[Any], set[str] | None]) -> set[str] | None:
    """What ``read`` finds in each of a branch's alternatives, together (None when one of them reads None)."""
    out: set[str] = set()
    for alternative in alternatives:
        one = read(alternative)
        if one is None:
            return None
        out |= one
    return out


def _exact(items: Iterable[Any]) -> set[str] | None:
    """The strings a sequence of the parsed pattern matches, when it matches only literal ASCII text (at most
    :data:`_MOST` of them)."""
    out = {""}
    for op, av in items:
        one = _exact_one(op, av)
        if one is None or len(out) * len(one) > _MOST:
            return None
        out = _times(out, one)
    return out


def _exact_one(op: Any, av: Any) -> set[str] | None:
    if op is _c.LITERAL:
        return {chr(av)} if av < 128 else None
    if op is _c.IN:
        return {chr(a) for _, a in av} if all(o is _c.LITERAL and a < 128 for o, a in av) else None
    if op is _c.SUBPATTERN:
        return _exact(av[3]) if not av[1] and not av[2] else None  # a group that changes no flag
    if op is _c.BRANCH:
        return _union(av[1], _exact)
    if op in _REPEATS and av[1] <= 4:
        body = _exact(av[2])
        if body is None:
            return None
        out, power = set(), {""}
        for n in range(av[1] + 1):
            if n >= av[0]:
                out |= power
            if len(out) > _MOST or len(power) * len(body) > _MOST:
                return None
            power = _times(power, body)
        return out
    return None


def _contained(items: Iterable[Any]) -> list[frozenset[str]]:
    """What a sequence's matches hold: its runs of exact items joined, and what each other item holds."""
    out: list[frozenset[str]] = []
    run = {""}
    for op, av in items:
        one = _exact_one(op, av)
        if one is not None and len(run) * len(one) <= _MOST:
            run = _times(run, one)
            continue
        out.extend(_fewest(run))
        run = {""} if one is None else one
        if one is not None:
            continue
        if op is _c.SUBPATTERN and not av[1] and not av[2]:
            out.extend(_contained(av[3]))
        elif op is _c.ATOMIC_GROUP:
            out.extend(_contained(av))
        elif op in _REPEATS and av[0] >= 1:
            out.extend(_contained(av[2]))
        elif op is _c.BRANCH:
            best = [max(_contained(alternative), key=lambda s: min(map(len, s)), default=None)
                    for alternative in av[1]]
            if all(b is not None for b in best):
                out.extend(_fewest(set().union(*(b for b in best if b is not None))))
    out.extend(_fewest(run))
    return out


def _fewest(strings: set[str]) -> list[frozenset[str]]:
    """``strings`` as one requirement: none when it holds the empty string; else the strings that hold no other of
    them (a text that holds ``cl_key`` holds ``cl``, so ``cl`` says as much)."""
    if "" in strings:
        return []
    kept: list[str] = []
    for s in sorted(strings, key=len):
        if not any(k in s for k in kept):
            kept.append(s)
    return [frozenset(kept)]


def _first_strings(items: Iterable[Any]) -> set[str] | None:
    """Strings one of which a match of the sequence starts with, after any assertion before its first character."""
    run = {""}
    for op, av in items:
        if op in _ZERO_WIDTH and run == {""}:
            continue
        one = _exact_one(op, av)
        if one is not None and len(run) * len(one) <= _MOST:
            run = _times(run, one)
            continue
        if run == {""}:  # the first item that reads a character is no literal: what each of its ways starts with
            if op is _c.SUBPATTERN and not av[1] and not av[2]:
                return _first_strings(av[3])
            if op in _REPEATS and av[0] >= 1:
                return _first_strings(av[2])
            if op is _c.BRANCH:
                return _union(av[1], _first_strings)
            return None
        break
    return None if "" in run else run


def _lower(pattern: re.Pattern[str], strings: Iterable[str]) -> list[str]:
    return [s.lower() for s in strings] if pattern.flags & re.IGNORECASE else list(strings)


def needs(pattern: re.Pattern[str]) -> tuple[frozenset[str], ...]:
    """Strings every match of ``pattern`` holds one of each of: its literal text (``AKIA``), its alternatives
    (``cloudant_key``, ``cl-pwd``, … read as ``cl`` and ``key``) and the signs it cannot match without (``=``, ``:``
    or a space in ``(?:=|:| +)``); the most telling first. Lower case when the pattern ignores case (look for them
    in :func:`folded` text). Empty when nothing can be read (a character class and repeats only)."""
    found = {frozenset(_lower(pattern, strings)) for strings in _contained(_parser.parse(pattern.pattern, pattern.flags))}
    return tuple(sorted(found, key=lambda strings: (-min(map(len, strings)), sorted(strings))))


def leading(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Strings one of which every match of ``pattern`` starts with (after ``\\b`` or a look-behind), none of them
    starting another; lower case when the pattern ignores case. None when a match may start otherwise."""
    starts = _first_strings(_parser.parse(pattern.pattern, pattern.flags))
    if starts is None:
        return None
    kept: list[str] = []
    for s in sorted(set(_lower(pattern, starts)), key=lambda s: (len(s), s)):
        if not any(s.startswith(k) for k in kept):
            kept.append(s)
    return tuple(kept)


_DENSE = 8
_APART = 16
"""Past :data:`_DENSE` places tried with fewer than :data:`_APART` characters apart on average, :class:`Anchored` lets
``re`` scan the rest: trying a place from Python costs about what ``re`` spends scanning a dozen characters."""

_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s"}
"""The characters ``re`` matches to an ASCII letter when ignoring case whose lower case is not that letter (``İ``,
``ı``, the long ``ſ``); the Kelvin sign's lower case is ``k`` already."""


def fold(text: str) -> str:
    """``text`` in lower case, with every character ``re`` takes for an ASCII letter when ignoring case folded to that
    letter: a literal of :func:`needs` that a pattern ignoring case matches in ``text`` is in it."""
    return (text if text.isascii() else text.translate(_FOLD)).lower()


def folded(text: str) -> str | None:
    """:func:`fold` place for place: None when lower case changes the length of ``text`` (a letter whose lower case
    is two characters), so that places in the two cannot be compared."""
    out = fold(text)
    return out if len(out) == len(text) else None


class Anchored:
    """A pattern tried only where a string every match of it starts with begins (:func:`leading`), found in the text
    folded by :func:`folded`; the same matches as the pattern's own ``search`` and ``finditer``. A pattern none can be
    read from, or a text that cannot be folded place for place, is searched as usual."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self._folds = bool(pattern.flags & re.IGNORECASE)

    @cached_property
    def _starts(self) -> re.Pattern[str] | None:
        """The strings every match starts with, as one search (read on first use, not when a module loads)."""
        starts = leading(self.pattern)
        return None if starts is None else re.compile("|".join(map(re.escape, starts)))

    def search(self, text: str, fold: str | None, pos: int = 0) -> re.Match[str] | None:
        """The first match starting at ``pos`` or later (``fold`` is ``folded(text)``)."""
        where = fold if self._folds else text
        starts = self._starts
        if starts is None or where is None:
            return self.pattern.search(text, pos)
        start = starts.search(where, pos)
        tried = 0
        while start is not None:
            at = start.start()
            tried += 1
            if tried > _DENSE and at - pos < tried * _APART:  # starts close together: re's own scan costs less
                return self.pattern.search(text, at)
            match = self.pattern.match(text, at)
            if match is not None:
                return match
            start = starts.search(where, at + 1)
        return None

    def finditer(self, text: str, fold: str | None) -> Iterator[re.Match[str]]:
        """The matches ``finditer`` gives: each the first after the end of the one before."""
        if self._starts is None or (self._folds and fold is None):
            yield from self.pattern.finditer(text)
            return
        match = self.search(text, fold)
        while match is not None:
            yield match
            match = self.search(text, fold, max(match.end(), match.start() + 1))
