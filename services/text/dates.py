"""The days a question names: "on 31 Dec 2023", "January 6, 2024", "10.01.2024", "in March", "last week".

Recall scores the day a message was sent as a field of its own (see :mod:`services.recall`): a question that names a
day finds what was said that day, also when no other word of the question is in it. Dates are read in English
(month names and their three-letter forms; day before month or month before day; ISO ``2024-01-10``; a dotted
``10.01.2024`` as day, month, year); relative phrases ("yesterday", "last week", "3 days ago") are resolved by the
one rule notes use (:func:`services.text.notes.resolve_dates`), seen from when the question was asked, in the
asker's time zone. A bare year names no day: it is a word of the question already.

A question may also place what it asks about against an event of the thread ("before the launch", "after the
outage", "since the migration"): :func:`named_events` gives each such event's terms and on which side of it the
question looks; recall finds when the thread first spoke of the event and scores the messages sent on that side."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta, tzinfo
from datetime import timezone as _timezone

from .notes import _RELATIVE, _resolve
from .search import search_terms

_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH = r"(?P<{0}>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|" \
         r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
_ORDINAL = r"(?:st|nd|rd|th)?"
_ABSOLUTE = re.compile(
    r"\b(?:(?P<y1>\d{4})-(?P<m1>\d{1,2})-(?P<d1>\d{1,2})"
    r"|(?P<d2>\d{1,2})\.(?P<m2>\d{1,2})\.(?P<y2>\d{4})"
    rf"|(?P<d3>\d{{1,2}}){_ORDINAL}(?: of)? {_MONTH.format('n3')}(?:,? (?P<y3>\d{{4}}))?"
    rf"|{_MONTH.format('n4')} (?:the )?(?P<d4>\d{{1,2}}){_ORDINAL}\b(?:,? (?P<y4>\d{{4}}))?"
    rf"|in {_MONTH.format('n5')}(?: (?P<y5>\d{{4}}))?)\b",
    re.IGNORECASE)
_SPAN = re.compile(r"(?:(?P<kind>week|weekend) of )?(?P<year>\d{4})(?:-(?P<month>\d{2})(?:-(?P<day>\d{2}))?)?")


def _month(name: str) -> int:
    name = name.lower().rstrip(".")
    return next(i for i, full in enumerate(_MONTHS, start=1) if full.startswith(name[:3]))


def _verb(name: str) -> bool:
    """Whether a month's name written in lowercase is more likely the word it also is ("may", "march")."""
    return name.lower().rstrip(".") in ("may", "mar", "march") and not name[0].isupper()


def _month_span(year: int, month: int) -> tuple[date, date]:
    first = date(year, month, 1)
    return first, (date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1))


def _latest(month: int, day: int | None, today: date) -> int:
    """The year of the latest such day (or month) not after ``today``: "on 3 March" asked in January is last
    year's."""
    year = today.year
    if (month, day or 1) > (today.month, today.day):
        year -= 1
    return year


def named_days(text: str, asked_at: float, tz: tzinfo | None = None) -> list[tuple[date, date]]:
    """The spans of days (first, last) ``text`` names, seen from ``asked_at`` (a Unix time) in time zone ``tz``
    (UTC when None), in the order they are named; a date that does not exist names nothing."""
    today = datetime.fromtimestamp(asked_at, tz=tz or _timezone.utc).date()
    found: list[tuple[int, tuple[date, date]]] = []
    for m in _ABSOLUTE.finditer(text):
        try:
            if m.group("y1"):
                day = date(int(m.group("y1")), int(m.group("m1")), int(m.group("d1")))
                found.append((m.start(), (day, day)))
            elif m.group("y2"):
                day = date(int(m.group("y2")), int(m.group("m2")), int(m.group("d2")))
                found.append((m.start(), (day, day)))
            elif _verb(m.group("n3") or m.group("n4") or m.group("n5")):
                continue
            elif m.group("n5"):
                month = _month(m.group("n5"))
                year = int(m.group("y5")) if m.group("y5") else _latest(month, None, today)
                found.append((m.start(), _month_span(year, month)))
            else:
                name, number, year_text = (m.group("n3"), m.group("d3"), m.group("y3")) if m.group("n3") else \
                    (m.group("n4"), m.group("d4"), m.group("y4"))
                month, number_ = _month(name), int(number)
                year = int(year_text) if year_text else _latest(month, number_, today)
                day = date(year, month, number_)
                found.append((m.start(), (day, day)))
        except ValueError:  # (31 February, month 13)
            continue
    for m in _RELATIVE.finditer(text):
        span = _SPAN.fullmatch(_resolve(m, today))
        if span is None or not span.group("month") and not span.group("kind"):
            continue  # ("last year", "next year": a year names no day)
        if span.group("kind"):
            first = date.fromisoformat(span.group(0).split(" of ")[1])
            found.append((m.start(), (first, first + timedelta(days=6 if span.group("kind") == "week" else 1))))
        elif span.group("day"):
            day = date.fromisoformat(span.group(0))
            found.append((m.start(), (day, day)))
        else:
            found.append((m.start(), _month_span(int(span.group("year")), int(span.group("month")))))
    return [span for _, span in sorted(found, key=lambda x: x[0])]


EVENT_TERMS = 3
"""An event is named by at most this many terms (the first of the phrase after its preposition): "the public launch",
"the database migration"; the rest of a long clause is what the question asks, not what it dates by."""
_EVENT = re.compile(r"\b(?P<side>before|after|since|until|till|prior to|following|ever since)\s+(?P<what>[^?.!,;:()\n]+)",
                    re.IGNORECASE)
_CLAUSE_END = re.compile(r"\b(?:and|or|but|so|because|while|when|whereas|than|then|which|who|where|how|what)\b",
                         re.IGNORECASE)
_AFTER = frozenset(["after", "since", "following", "ever since"])


def named_events(text: str, asked_at: float = 0.0, tz: tzinfo | None = None) -> list[tuple[bool, tuple[str, ...]]]:
    """The events ``text`` places its question against, in order: per event, whether the question looks after it
    ("after", "since", "following") rather than before it ("before", "until", "prior to"), and the event's search
    terms (at most :data:`EVENT_TERMS`). A phrase that names a day or a time ("before 7 Jan", "after 7 PM", "since
    then") names no event: days are :func:`named_days`' to read."""
    out: list[tuple[bool, tuple[str, ...]]] = []
    for m in _EVENT.finditer(text):
        what = m.group("what")
        what = what[:end.start()] if (end := _CLAUSE_END.search(what)) else what  # ("since when": none)
        first = what.split()[0] if what.split() else ""
        if not first or any(c.isdigit() for c in first) or named_days(what, asked_at, tz) or _RELATIVE.search(what):
            continue
        found = tuple(dict.fromkeys(search_terms(what)))[:EVENT_TERMS]
        if found:
            out.append((m.group("side").lower() in _AFTER, found))
    return out
