"""The one search index: documents, each given as its search terms (:func:`.search.search_terms`), searched with BM25
(Lucene's variant, as ``bm25s`` scores it). Recall indexes a thread's messages with it, memory a workspace's records.

A document gets a position when it is added and keeps it; it becomes searchable when :meth:`TermIndex.searchable`
takes it into a segment (its terms' postings: positions and counts). Segments of similar size are merged as they come
(a log-structured index), so adding documents costs in proportion to what was added, not to what is held; a removed
document never scores again and leaves its segment at the segment's next merge. A term's weight comes from the
statistics of every live document (how many hold it, their average length), kept as documents come and go, so a
document scores the same whichever segment holds it: one written a moment ago ranks with the oldest.

A document may also carry a vector (its embedding, when an embedding model is configured): :meth:`TermIndex.ranked`
then fuses the BM25 ranking with the nearest vectors by reciprocal rank (:func:`fuse`), the one rule every search
that has a question's embedding ranks by. Without vectors it is BM25 alone, exactly."""

from __future__ import annotations

import heapq
import itertools
import math
import re
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
else:
    from .._numpy import np


K1, B = 1.5, 0.75
"""BM25's saturation and length normalization (``bm25s``'s defaults)."""

OFF_LOOP = 1_000
"""Work over more documents or messages than this at once (about 0.1 s or more) runs in a thread, off the worker's
event loop: indexing them (:mod:`services.recall`, :mod:`services.memory`) and folding them into a running ledger
(:mod:`services.handoff`)."""

RRF_K = 60
"""Reciprocal rank fusion's constant: a document's fused score is the sum over the rankings that hold it of
``1 / (RRF_K + rank)`` (rank from 1); 60 as in Cormack, Clarke and Büttcher (2009), where it was robust across
collections. Ranks, not scores, are fused, so BM25's unbounded scores and cosine similarities need no calibration."""

AUTHOR_WEIGHT = 3.0
"""The author field's weight beside the text's: a document by a person the question names gains this times the
field's inverse document frequency (:func:`author_gain`; about 2 when two people wrote the documents, more when the
person wrote few of many people's). Recall scores a thread's messages by it, memory a workspace's records. Measured
on REALTALK for recall (4k / 8k / 16k, questions whose evidence the context holds): the earlier rule, a named
person's matching messages first whatever their score, 137 / 170 / 194 of 232; weight 1: 132 / 171 / 195; 3:
138 / 171 / 194; 10 (with messages matching by author alone as direct hits): 156 at 8k. For memory at 8k (answers
in the records shown): the authors' names as words of each record's text, 148 of 232; the author field at weight 1,
151; at 3, 155; at 10 (authors' names still in the text), 146."""
DAY_WEIGHT = 3.0
"""The day field's weight beside the text's: a message sent on a day the question names (or the day after, when what
happened is told) gains this times the field's inverse document frequency (:func:`field_gain`)."""
_NAME_WORD = re.compile(r"[^\W\d_]{2,}")
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|ich|mich|mir|mein\w*|je|j'|moi|mon|ma|mes|yo|mí|mis?|"
                           r"io|mio|mia|miei|mie|eu|meu|minha)\b", re.IGNORECASE)
"""A person speaking of themselves (English, German, French, Spanish, Italian, Portuguese)."""


def name_words(text: str) -> list[str]:
    """The words of ``text`` that may be (part of) a person's name, lowercase: how an author's name and a question
    are matched for the author field."""
    return _NAME_WORD.findall(text.lower())


def speaks_of_self(text: str) -> bool:
    """Whether ``text``'s author speaks of themselves ("what did I say about…"): a question that names its own
    author for the author field."""
    return bool(_FIRST_PERSON.search(text))


def author_gain(written: int, total: int) -> float:
    """What a document by a person the question names gains: :data:`AUTHOR_WEIGHT` times the author field's inverse
    document frequency, the person having written ``written`` of the ``total`` documents (a rare author weighs
    more, as a rare word does)."""
    return field_gain(AUTHOR_WEIGHT, written, total)


def field_gain(weight: float, matching: int, total: int) -> float:
    """What a document whose field matches the question gains: the field's ``weight`` times its inverse document
    frequency (``matching`` of ``total`` documents match), as BM25 weighs a word."""
    return weight * math.log(1 + (total - matching + 0.5) / (matching + 0.5))


def length(terms: Sequence[str]) -> int:
    """A document's length as BM25 weighs it: its terms, at least 1."""
    return max(1, len(terms))


POSTING = "int32"
"""A posting's numbers, its document's position and how often it holds the term, as machine integers of 4 bytes: 8 bytes
a posting where 64-bit positions and float counts took 16 (a long thread's index holds millions). Scores are the same
to the last bit: the counts are whole numbers, weighed in 64-bit floats."""


def postings(documents: Iterable[tuple[int, Sequence[str]]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The postings of ``documents`` (position, terms), given in position order: per term, the positions of the
    documents holding it and how often each holds it. The one rule a segment is made by, held in memory
    (:meth:`TermIndex.searchable`, as :class:`Packed` holds them) or stored (a sealed epoch's,
    :mod:`services.recall.postings`)."""
    return dict(Packed.made(documents).items())


ENTRY_BYTES = 300
"""What a term's postings read from a segment kept elsewhere hold besides their numbers: the term's slot in the
segment's map, the pair of arrays and each array's header (:meth:`TermIndex.memory`)."""
SLOT_BYTES = 60
"""What a term of a segment built in memory (:class:`Packed`) holds besides its postings' numbers: its slot in the
segment's map, the number of that slot and where its postings start."""
VOCABULARY_BYTES = 40
"""What a term of the index's vocabulary holds besides its postings: its slot and count in :attr:`TermIndex.documents`
(the string is the documents' own)."""


COUNT_MAX = 255
"""A segment built in memory whose counts are all at most this keeps them in a byte each (:class:`Packed`): a term
is rarely held more than a few times by one message. Scores are the same to the last bit (whole numbers)."""


class Packed(Mapping[str, tuple[Any, Any]]):
    """The postings of a segment built in memory, by term, in three arrays: every term's positions one after another
    (each term's in position order), their counts beside them, and where each term's start. Reading a term's gives
    views of those. A term's pair of arrays of its own cost about 300 bytes besides its numbers (their headers, a
    tuple, a slot), more than the numbers of most terms: a thread's vocabulary runs to tens of thousands of terms,
    most of them held by one message or two."""

    __slots__ = ("counts", "positions", "slots", "starts")

    def __init__(self, slots: dict[str, int], starts: array[int], positions: np.ndarray, counts: np.ndarray) -> None:
        self.slots = slots
        """Term → its number: its postings are ``positions[starts[n]:starts[n + 1]]``."""
        self.starts = starts
        self.positions = positions
        self.counts = counts

    @classmethod
    def made(cls, documents: Iterable[tuple[int, Sequence[str]]]) -> Packed:
        """The postings of ``documents`` (position, terms), given in position order: per term, the positions of the
        documents holding it and how often each holds it (the rule :func:`postings` gives by term)."""
        slots: dict[str, int] = {}
        numbers: array[int] = array("i")
        positions: array[int] = array("q")
        counts: array[int] = array("i")
        for p, terms in documents:
            for term, n in Counter(terms).items():
                number = slots.get(term)
                if number is None:
                    number = slots[term] = len(slots)
                numbers.append(number)
                positions.append(p)
                counts.append(n)
        return cls.sorted(slots, np.frombuffer(numbers, dtype=np.int32), np.frombuffer(positions, dtype=np.int64),
                          np.frombuffer(counts, dtype=np.int32))

    @classmethod
    def joined(cls, parts: Sequence[Mapping[str, tuple[Any, Any]]], alive: Any = None) -> Packed:
        """``parts``' postings as one, in the order given (each holding later positions than the one before), without
        the documents ``alive`` (by position) says are removed; a term left with no posting is not held."""
        slots: dict[str, int] = {}
        numbers, positions, counts = [], [], []
        for part in parts:
            if isinstance(part, Packed):
                remap = np.fromiter((slots.setdefault(term, len(slots)) for term in part.slots), dtype=np.int32,
                                    count=len(part.slots))
                sizes: Any = np.diff(np.frombuffer(part.starts, dtype=np.int64))
                numbers.append(np.repeat(remap, sizes))
                positions.append(part.positions)
                counts.append(part.counts)
                continue
            held: list[int] = []
            lengths: list[int] = []
            for term, (ps, ns) in part.items():
                held.append(slots.setdefault(term, len(slots)))
                lengths.append(len(ps))
                positions.append(ps)
                counts.append(ns)
            numbers.append(np.repeat(np.asarray(held, dtype=np.int32), lengths))
        if not numbers:
            return cls.sorted({}, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))
        every, where, often = np.concatenate(numbers), np.concatenate(positions), np.concatenate(counts)
        if alive is not None:
            live = alive[where]
            if not live.all():
                every, where, often = every[live], where[live], often[live]
        return cls.sorted(slots, every, where, often)

    @classmethod
    def sorted(cls, slots: dict[str, int], numbers: Any, positions: Any, counts: Any) -> Packed:
        """Postings given as each one's term (its number in ``slots``), position and count, each term's in position
        order, arranged term after term."""
        order = np.argsort(numbers, kind="stable")
        sizes = np.bincount(numbers, minlength=len(slots))
        if len(sizes) and not sizes.all():  # (terms left with no posting: numbered again without them)
            held = sizes > 0
            renumber = np.cumsum(held) - 1
            slots = {term: int(renumber[n]) for term, n in slots.items() if held[n]}
            sizes = sizes[held]
        starts = array("q", bytes(8))
        starts.frombytes(np.cumsum(sizes, dtype=np.int64).tobytes())
        counts = np.asarray(counts)
        small = not len(counts) or int(counts.max()) <= COUNT_MAX
        return cls(slots, starts, np.asarray(positions, dtype=POSTING)[order],
                   counts.astype(np.uint8 if small else POSTING)[order])

    def get(self, term: str, default: Any = None) -> Any:  # (a search's hottest lookup: no KeyError raised)
        number = self.slots.get(term)
        if number is None:
            return default
        start, end = self.starts[number], self.starts[number + 1]
        return self.positions[start:end], self.counts[start:end]

    def __getitem__(self, term: str) -> tuple[Any, Any]:
        found = self.get(term)
        if found is None:
            raise KeyError(term)
        return found  # type: ignore[no-any-return]

    def __contains__(self, term: object) -> bool:
        return term in self.slots

    def __iter__(self) -> Iterator[str]:
        return iter(self.slots)

    def __len__(self) -> int:
        return len(self.slots)

    def bytes(self) -> int:
        """What it holds in memory (see :data:`SLOT_BYTES`)."""
        return self.positions.nbytes + self.counts.nbytes + SLOT_BYTES * len(self.slots)


class Unread(LookupError):
    """A stored segment's postings of a term were asked for before they were read (:meth:`TermIndex.take`)."""


@dataclass
class _Segment:
    positions: np.ndarray
    postings: Mapping[str, tuple[np.ndarray, np.ndarray]]
    """Term → the positions of the documents holding it and how often each holds it (:class:`Packed` for a segment
    built in memory, a dict of those read so far for one kept elsewhere)."""
    stored: str | None = None
    """For a segment kept elsewhere (:meth:`TermIndex.adopt`): the name it is kept under. Its postings are read term
    by term as queries ask for them (:meth:`TermIndex.take`); ``postings`` holds those read so far."""
    where: Any = None
    """For a segment kept elsewhere: per document of its stored form, the position it has here (-1: none)."""
    read: set[str] = field(default_factory=set)
    """For a segment kept elsewhere: the terms whose postings were read (one not in ``postings``: it holds none)."""
    whole: bool = False
    """For a segment kept elsewhere: every posting it holds was read."""
    weights: dict[str, tuple[tuple[int, int], np.ndarray]] = field(default_factory=dict)
    """Term → what it adds to the score of each document holding it, and the index's documents (added, removed) it
    was weighed at (a warm query weighs nothing again; any document added or removed changes the weights)."""
    scaled: dict[str, np.ndarray] = field(default_factory=dict)
    """Term → ``B`` times the length of each document holding it: the part of its weights no document added or
    removed changes (a document's length is fixed when it is added)."""
    held: int = 0
    """What its arrays hold in memory, in bytes, kept as they are made (:meth:`TermIndex.memory`)."""

    @classmethod
    def made(cls, positions: np.ndarray, found: Packed) -> _Segment:
        return cls(positions, found, held=positions.nbytes + found.bytes())

    def read_into(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The postings of a segment kept elsewhere, which those read are put in."""
        assert isinstance(self.postings, dict), "a segment built in memory holds all its postings"
        return self.postings


@dataclass
class TermIndex:
    """Documents by position, searchable once taken into a segment."""

    terms: list[tuple[str, ...] | None] = field(default_factory=list)
    """Per position: the document's search terms (None: not held, see :meth:`add_unread`)."""
    documents: Counter[str] = field(default_factory=Counter)
    """Per term, how many live documents contain it (its weight's rarity, and feedback's)."""
    segments: list[_Segment] = field(default_factory=list)
    stored: list[_Segment] = field(default_factory=list)
    """Segments kept elsewhere (:meth:`adopt`), never merged: their postings are read as queries ask for them."""
    pending: list[int] = field(default_factory=list)
    """Positions added and not searchable yet."""
    removed: set[int] = field(default_factory=set)
    _alive: Any = field(default_factory=lambda: np.ones(1024, dtype=bool))
    """Per position, whether the document is still searched (grown by doubling, as the arrays below)."""
    _lengths: Any = field(default_factory=lambda: np.ones(1024, dtype=np.float64))
    """Per position, the document's length in terms (at least 1)."""
    _length: int = 0
    """The live documents' lengths, summed."""
    _taken: Any = field(default_factory=lambda: np.zeros(1024, dtype=bool))
    """Per position, whether the document is in a segment (searchable)."""
    _embedded: Any = field(default_factory=lambda: np.zeros(1024, dtype=bool))
    """Per position, whether the document has a vector."""
    _vectors: Any = None
    """Per position, the document's vector (unit length, float32), once the first one is given."""
    _stale: int = 0
    """Removed documents still in a segment (they leave it at its next merge)."""
    _kept: int = 0
    """The documents of the segments kept elsewhere, summed (a cold worker adopts hundreds)."""
    _held_documents: int = 0
    _held_terms: int = 0
    """The documents whose terms are held, and their terms, summed (:meth:`memory`)."""
    _names: dict[str, _Segment] = field(default_factory=dict)
    """The segments kept elsewhere, by name (made again whenever they are not :attr:`stored`)."""

    def _room(self) -> None:
        """The per-document arrays doubled until they have a place for every document."""
        while len(self.terms) > len(self._alive):
            size = len(self._alive)
            self._alive = np.concatenate([self._alive, np.ones(size, dtype=bool)])
            self._lengths = np.concatenate([self._lengths, np.ones(size)])
            self._taken = np.concatenate([self._taken, np.zeros(size, dtype=bool)])
            self._embedded = np.concatenate([self._embedded, np.zeros(size, dtype=bool)])
            if self._vectors is not None:
                self._vectors = np.concatenate([self._vectors, np.zeros_like(self._vectors)])

    def add(self, terms: Sequence[str]) -> int:
        """A new document, pending until :meth:`searchable`; its position."""
        self.terms.append(tuple(terms))
        self._held_documents += 1
        self._held_terms += len(terms)
        position = len(self.terms) - 1
        self._room()
        self._lengths[position] = length(terms)
        self._length += length(terms)
        self.documents.update(set(terms))
        self.pending.append(position)
        return position

    def add_many(self, documents: Sequence[Sequence[str]], lengths: Sequence[int] | None = None) -> int:
        """New documents, as :meth:`add` adds them one by one, in bulk; the position of the first. ``lengths``: theirs
        (:func:`length` of each), when known already."""
        first = len(self.terms)
        self.terms.extend(tuple(terms) for terms in documents)
        self._held_documents += len(documents)
        self._held_terms += sum(map(len, documents))
        self._room()
        if lengths is None:
            lengths = [length(terms) for terms in documents]
        self._lengths[first:len(self.terms)] = lengths
        self._length += sum(lengths)
        self.documents.update(chain.from_iterable(map(set, documents)))
        self.pending.extend(range(first, len(self.terms)))
        return first

    def add_unread(self, lengths: Sequence[int]) -> int:
        """New documents whose terms are not held (what they count towards :attr:`documents` is added by whoever
        counted it: :mod:`services.recall.totals`), only their ``lengths``; searchable only through a segment kept
        elsewhere (:meth:`adopt`). The position of the first."""
        first = len(self.terms)
        self.terms.extend(itertools.repeat(None, len(lengths)))
        self._room()
        self._lengths[first:len(self.terms)] = lengths
        self._length += int(np.sum(lengths))
        self.pending.extend(range(first, len(self.terms)))
        return first

    def unheld(self, positions: Iterable[int]) -> list[int]:
        """The positions among ``positions`` whose documents' terms are not held (:meth:`add_unread`)."""
        return [p for p in positions if self.terms[p] is None]

    def fill(self, position: int, terms: Sequence[str]) -> None:
        """The terms of a document added without them (read from its message): counted already, held now."""
        if self.terms[position] is None:
            self.terms[position] = tuple(terms)
            self._held_documents += 1
            self._held_terms += len(terms)

    def _held(self, position: int) -> tuple[str, ...]:
        found = self.terms[position]
        if found is None:
            raise Unread(f"the terms of document {position} are not held")
        return found

    def remove(self, position: int) -> None:
        """The document at ``position`` is searched no more."""
        if position in self.removed:
            return
        terms = self._held(position)
        self.removed.add(position)
        self._alive[position] = False
        self._length -= length(terms)
        self.documents.subtract(set(terms))
        if position in self.pending:
            self.pending.remove(position)
        else:
            self._stale += 1

    def searchable(self, ready: Iterable[int] | None = None) -> int:
        """Take the pending documents ``ready`` (all of them by default) into a new segment, merging segments of
        similar size; how many documents are searchable."""
        taken = list(self.pending) if ready is None else [p for p in ready if p not in self.removed]
        # (a document is removed from ``pending`` when removed, so ``taken`` holds live documents only)
        if taken:
            chosen = set(taken)
            self._taken[taken] = True
            self.pending = [p for p in self.pending if p not in chosen]
            # built aside and put in place at once: a reader never sees a segment list half merged
            segments = [*self.segments, self._build(taken)]
            while len(segments) > 1 and len(segments[-2].positions) <= 2 * len(segments[-1].positions):
                last, before = segments.pop(), segments.pop()
                merged = self._merged(before, last)
                self._stale -= len(before.positions) + len(last.positions) - len(merged.positions)
                segments.append(merged)
            self.segments = segments
        return self._searchable()

    def _searchable(self) -> int:
        return sum(len(s.positions) for s in self.segments) + self._kept - self._stale

    def adopt(self, name: str, where: Sequence[int]) -> int:
        """Make the pending documents ``where`` names (per document of a segment kept elsewhere under ``name``: its
        position here, -1 for none) searchable through that segment, without building one: their postings are read
        term by term as queries ask for them (:meth:`unread`, :meth:`take`). How many documents are searchable."""
        return self.adopt_all([(name, where)])

    def adopt_all(self, segments: Sequence[tuple[str, Any]]) -> int:
        """:meth:`adopt` of each of ``segments`` (name, where), at once: a cold worker adopts hundreds."""
        maps = [np.asarray(where, dtype=POSTING) for _, where in segments]
        helds = [np.sort(mapped[mapped >= 0]) for mapped in maps]
        every = np.concatenate(helds) if helds else np.zeros(0, dtype=POSTING)
        pending = self.pending
        if len(every) == len(pending) and (not len(every) or (
                every[0] == pending[0] and every[-1] == pending[-1] and bool(np.all(np.diff(every) == 1))
                and pending[-1] - pending[0] + 1 == len(pending))):
            self.pending = []  # (every pending document, a run of positions: what a cold worker adopts)
        else:
            chosen = set(every.tolist())
            if len(chosen) < len(every) or not chosen <= set(pending):
                raise ValueError(f"segments {[name for name, _ in segments][:3]!r} name documents that are not "
                                 "pending, or one twice")
            self.pending = [p for p in pending if p not in chosen]
        self._taken[every] = True
        for (name, _), mapped, held in zip(segments, maps, helds, strict=True):
            self.stored.append(_Segment(held, {}, stored=name, where=mapped, held=held.nbytes + mapped.nbytes))
        self._kept += len(every)
        return self._searchable()

    def unread(self, query: Iterable[str]) -> dict[str, list[str]]:
        """Per segment kept elsewhere (by name), the terms of ``query`` whose postings it has not given yet (only terms
        some live document holds: another has no postings anywhere)."""
        asked = [t for t in dict.fromkeys(query) if self.documents[t] > 0]
        out: dict[str, list[str]] = {}
        for segment in self.stored:
            wanted = [t for t in asked if t not in segment.read]
            if wanted and segment.stored is not None:
                out[segment.stored] = wanted
        return out

    def take(self, name: str, read: Iterable[str], found: dict[str, tuple[Any, Any]]) -> None:
        """The postings of the terms ``read`` as the segment kept under ``name`` holds them: ``found``, per term it
        holds, its documents (by their place in the stored form) and how often each holds it."""
        segment = self._stored(name)
        for term, (offsets, counts) in found.items() if not segment.whole else ():  # (a whole one holds them all)
            positions = segment.where[np.asarray(offsets, dtype=np.int64)]
            live = positions >= 0
            if len(positions) and live.any():
                found_here = segment.read_into()[term] = (positions[live], np.asarray(counts, dtype=POSTING)[live])
                segment.held += found_here[0].nbytes + found_here[1].nbytes + ENTRY_BYTES
        segment.read.update(read)

    def take_all(self, name: str, parts: Iterable[tuple[Sequence[str], Any, Any, Any]]) -> None:
        """Every posting the segment kept under ``name`` holds, in ``parts``: each some terms, how many of its
        documents hold each, and their places in the stored form and how often each holds it, term after term."""
        segment = self._stored(name)
        slots: dict[str, int] = {}
        every: list[Any] = []
        positions_read: list[Any] = []
        counts_read: list[Any] = []
        for terms, sizes, offsets, counts in parts:
            positions = segment.where[np.asarray(offsets, dtype=np.int64)]
            counts = np.asarray(counts, dtype=POSTING)
            live = positions >= 0
            if not live.all():  # (a document indexed from an earlier segment: its postings are that one's)
                starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
                sizes = np.add.reduceat(live.astype(np.int64), starts) if len(starts) else sizes
                positions, counts = positions[live], counts[live]
            for term in terms:
                if slots.setdefault(term, len(slots)) != len(slots) - 1:
                    raise ValueError(f"segment {name!r} holds the postings of {term!r} twice")
            every.append(np.asarray(sizes, dtype=np.int64))
            positions_read.append(positions)
            counts_read.append(counts)
            segment.read.update(terms)
        # (the segment's postings as one: a pair of arrays per term cost more than most terms' numbers, and merging
        # hundreds of such segments into one was most of the work of building them in memory)
        sizes_all: Any = np.concatenate(every) if every else np.zeros(0, dtype=np.int64)
        packed = Packed.sorted(slots, np.repeat(np.arange(len(slots), dtype=np.int32), sizes_all),
                               np.concatenate(positions_read) if positions_read else np.zeros(0, dtype=np.int64),
                               np.concatenate(counts_read) if counts_read else np.zeros(0, dtype=np.int32))
        segment.postings = packed
        segment.held = segment.positions.nbytes + segment.where.nbytes + packed.bytes()
        segment.whole = True

    def stored_positions(self, name: str) -> list[int]:
        """The documents searched through the segment kept under ``name``."""
        found: list[int] = self._stored(name).positions.tolist()
        return found

    def _stored(self, name: str) -> _Segment:
        """The segment kept elsewhere under ``name``."""
        if len(self._names) != len(self.stored):
            self._names = {s.stored: s for s in self.stored if s.stored is not None}
        return self._names[name]

    def build_stored(self) -> None:
        """Build in memory, as one segment, every segment kept elsewhere (their postings are then never read again):
        from their documents' terms, or from their postings when every one was read (:meth:`take_all`; the only way
        when their terms are not held)."""
        if not self.stored:
            return
        if all(s.whole for s in self.stored):
            # (in position order: a later segment's documents come after; the arrays made anew, so the read buckets'
            # arrays, which every term of a bucket shares, are let go)
            merged = Packed.joined([s.postings for s in self.stored])
            positions = np.concatenate([s.positions for s in self.stored])
            self.segments = [_Segment.made(positions, merged), *self.segments]
        else:
            positions = np.sort(np.concatenate([s.positions for s in self.stored])).tolist()
            built = self._build(positions)
            self._stale -= len(positions) - len(built.positions)  # (a removed document is not built in)
            self.segments = [built, *self.segments]
        self.stored = []
        self._kept = 0
        self._names = {}

    def whole(self) -> bool:
        """Whether every segment kept elsewhere has given all its postings (:meth:`take_all`)."""
        return all(s.whole for s in self.stored)

    def restore(self, name: str) -> None:
        """Build in memory the segment kept under ``name`` (what it keeps cannot be read): from its documents'
        terms, as :meth:`searchable` builds one."""
        segment = self._stored(name)
        self.stored = [s for s in self.stored if s is not segment]
        self._kept -= len(segment.positions)
        self._names = {}
        built = self._build(segment.positions.tolist())
        self._stale -= len(segment.positions) - len(built.positions)  # (a removed document is not built in)
        self.segments = [built, *self.segments]

    def indexing(self, ready: int) -> int:
        """How many documents :meth:`searchable` would index for ``ready`` new ones (its merges included): its cost."""
        if not ready:
            return 0
        sizes = [*(len(s.positions) for s in self.segments), ready]
        work = ready
        while len(sizes) > 1 and sizes[-2] <= 2 * sizes[-1]:
            merged = sizes.pop() + sizes.pop()
            sizes.append(merged)
            work += merged
        return work

    def _build(self, positions: list[int]) -> _Segment:
        kept = sorted(p for p in positions if p not in self.removed)
        return _Segment.made(np.asarray(kept, dtype=np.int64), Packed.made((p, self._held(p)) for p in kept))

    def _merged(self, before: _Segment, last: _Segment) -> _Segment:
        """Two segments as one, without their removed documents (``before`` holds the earlier positions)."""
        positions = np.concatenate([before.positions, last.positions])
        return _Segment.made(positions[self._alive[positions]],
                             Packed.joined([before.postings, last.postings], self._alive))

    def hits(self, query: Sequence[str], *, limit: int | None = None, among: Any = None) -> tuple[Any, Any]:
        """``(scores, positions)`` (numpy) of the searchable documents that share a term with ``query``, best first
        (ties: the later position first); ``among``: only positions this boolean array (by position) holds; with
        ``limit``, at most that many."""
        live = self.size
        if not live or not (self.segments or self.stored):
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        average = self._length / live
        stamp = (len(self.terms), len(self.removed))
        read_positions: list[Any] = []
        read_weights: list[Any] = []
        for term in query:  # (a term asked twice counts twice)
            df = self.documents[term]
            if df <= 0:
                continue
            idf = math.log(1 + (live - df + 0.5) / (df + 0.5))
            for segment in (*self.segments, *self._gathered(term)):
                found = segment.postings.get(term)
                if found is not None:
                    ps, ns = found
                    weighed = segment.weights.get(term)
                    if weighed is None or weighed[0] != stamp:
                        scaled = segment.scaled.get(term)
                        if scaled is None:
                            scaled = segment.scaled[term] = B * self._lengths[ps]
                            segment.held += scaled.nbytes
                        segment.held -= weighed[1].nbytes if weighed is not None else 0
                        # idf * ns / (K1 * (1 - B + B * length / average) + ns), the same operations in the same
                        # order (so the same scores to the last bit), in one array made here
                        norm = scaled / average
                        np.add(1 - B, norm, out=norm)
                        np.multiply(K1, norm, out=norm)
                        np.add(norm, ns, out=norm)
                        weighed = segment.weights[term] = (stamp, np.divide(idf * ns, norm, out=norm))
                        segment.held += norm.nbytes
                    read_positions.append(ps)
                    read_weights.append(weighed[1])
        if not read_positions:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        # each document's terms summed: over the postings read when they are few beside the documents held (work in
        # proportion to them), else over every position at once
        read, weights = np.concatenate(read_positions), np.concatenate(read_weights)
        held = len(self.terms)
        if len(read) * 8 < held:
            positions, each = np.unique(read, return_inverse=True)
            scores = np.bincount(each, weights=weights)
            keep = self._alive[positions] & (scores > 0)
            if among is not None:
                keep &= among[positions]
            positions, found_scores = positions[keep], scores[keep]
        else:
            every = np.bincount(read, weights=weights, minlength=held)
            keep = (every > 0) & self._alive[:held]
            if among is not None:
                keep &= among[:held]
            positions = np.flatnonzero(keep)
            found_scores = every[positions]
        if limit is not None and len(positions) > limit:
            best = np.argpartition(found_scores, -limit)[-limit:]
            positions, found_scores = positions[best], found_scores[best]
        order = np.lexsort((-positions, -found_scores))
        return found_scores[order], positions[order]

    def _gathered(self, term: str) -> list[_Segment]:
        """The postings of ``term`` in the segments kept elsewhere, as one segment (their documents in position order):
        weighed at once, where hundreds of segments each weighed apart took most of a cold worker's first search."""
        found = []
        for segment in self.stored:
            if term not in segment.read:
                raise Unread(f"the postings of {term!r} in segment {segment.stored!r} were not read")
            held = segment.postings.get(term)
            if held is not None:
                found.append(held)
        if len(found) < 2:
            return [s for s in self.stored if term in s.postings]
        return [_Segment(np.zeros(0, dtype=np.int64), {term: (np.concatenate([p for p, _ in found]),
                                                              np.concatenate([n for _, n in found]))})]

    def holding(self, terms: Sequence[str]) -> list[int]:
        """The positions of the live documents (searchable or pending) that hold every one of ``terms``, in order: in
        each segment, the documents in the postings of every one of them; a pending document by its terms."""
        if not terms or any(self.documents[t] <= 0 for t in terms):
            return []
        wanted = set(terms)
        found: list[int] = []
        for segment in (*self.segments, *self.stored):  # a segment's documents: those in the postings of every term
            common: Any = None
            for term in wanted:
                if segment.stored is not None and term not in segment.read:
                    raise Unread(f"the postings of {term!r} in segment {segment.stored!r} were not read")
                held = segment.postings.get(term)
                if held is None:
                    common = None
                    break
                common = held[0] if common is None else np.intersect1d(common, held[0], assume_unique=True)
            if common is not None:
                found.extend(common.tolist())
        found.extend(p for p in self.pending if wanted.issubset(self._held(p)))
        return sorted(p for p in set(found) if self._alive[p])

    def scores(self, query: Sequence[str], *, limit: int | None = None) -> list[tuple[float, int]]:
        """``(score, position)`` of every searchable document that shares a term with ``query``, best first (ties:
        the later position first); with ``limit``, at most that many."""
        scores, positions = self.hits(query, limit=limit)
        return list(zip(scores.tolist(), positions.tolist(), strict=True))

    def ranked(self, query: Sequence[str], meaning: Any = None, *, limit: int | None = None, nearest: int = 0,
               among: Any = None) -> list[tuple[float, int]]:
        """``(score, position)`` best first: the BM25 hits of ``query`` (see :meth:`hits`) or, given ``meaning`` (the
        question's vector), those fused with its ``nearest`` nearest documents by vector (:func:`fuse`)."""
        scores, positions = self.hits(query, limit=limit, among=among)
        lexical = positions.tolist()
        if meaning is None or not nearest:
            return list(zip(scores.tolist(), lexical, strict=True))
        _, close = self.nearest(meaning, limit=nearest, among=among)
        return fuse(lexical, close.tolist())

    @property
    def dimensions(self) -> int | None:
        """The length of the documents' vectors (None until the first is given)."""
        return None if self._vectors is None else int(self._vectors.shape[1])

    def unembedded(self) -> list[int]:
        """The live documents (searchable or pending) without a vector, by position."""
        n = len(self.terms)
        found: list[int] = np.flatnonzero(self._alive[:n] & ~self._embedded[:n]).tolist()
        return found

    def embed(self, positions: Sequence[int], vectors: Any) -> None:
        """Give the documents at ``positions`` their vectors (rows of ``vectors``, made unit length); every vector
        of an index has the same length (ValueError otherwise)."""
        rows = np.asarray(vectors, dtype=np.float32).reshape(len(positions), -1)
        if self._vectors is None:
            self._vectors = np.zeros((len(self._alive), rows.shape[1]), dtype=np.float32)
        if rows.shape[1] != self._vectors.shape[1]:
            raise ValueError(f"vectors of {rows.shape[1]} dimensions given to an index of {self._vectors.shape[1]}")
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        self._vectors[list(positions)] = rows / np.where(norms > 0, norms, 1)
        self._embedded[list(positions)] = True

    def nearest(self, meaning: Any, *, limit: int, among: Any = None) -> tuple[Any, Any]:
        """``(similarities, positions)`` of the ``limit`` searchable documents whose vectors are nearest ``meaning``
        (cosine), best first (ties: the later position first); none before any document has a vector."""
        if self._vectors is None or limit <= 0:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        n = len(self.terms)
        mask = self._alive[:n] & self._taken[:n] & self._embedded[:n]
        if among is not None:
            mask &= among[:n]
        reached = int(mask.sum())
        if not reached:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        query = np.asarray(meaning, dtype=np.float32).reshape(-1)
        # einsum, not BLAS: a threaded BLAS on a busy machine took 15-25 ms for what one core does in 1 ms (10,000
        # vectors of 384 dimensions); ``[:n]`` is a view, nothing is copied
        similar = np.einsum("ij,j->i", self._vectors[:n], query / max(float(np.linalg.norm(query)), 1e-12))
        similar[~mask] = -np.inf
        if reached > limit:
            positions = np.argpartition(similar, -limit)[-limit:]
        else:
            positions = np.flatnonzero(mask)
        scores = similar[positions]
        order = np.lexsort((-positions, -scores))
        return scores[order].astype(np.float64), positions[order]

    def feedback(self, best: Iterable[int], asked: Iterable[str], *, terms: int) -> list[str]:
        """The ``terms`` terms that weigh most across the documents ``best`` (how many of them hold it, times its
        rarity), not among ``asked``: what widens a query (RM3-style feedback)."""
        left = set(asked)
        size = max(1, len(self.terms) - len(self.removed))
        weight: defaultdict[str, float] = defaultdict(float)
        for position in best:
            for term in set(self._held(position)) - left:
                if self.documents[term] > 0:
                    weight[term] += math.log(1 + size / self.documents[term])
        return heapq.nlargest(terms, weight, key=weight.__getitem__)

    def memory(self) -> int:
        """About what the index holds in memory, in bytes: its segments' arrays as made (:attr:`_Segment.held`, with
        :data:`SLOT_BYTES` a term of a segment built in memory, :data:`ENTRY_BYTES` a term read from one kept
        elsewhere), the terms held (a slot a document, a tuple and a slot a term), the
        vocabulary's counts and the per-document arrays."""
        return (sum(s.held for s in self.segments) + sum(s.held for s in self.stored) + 8 * len(self.terms)
                + 56 * self._held_documents + 8 * self._held_terms + VOCABULARY_BYTES * len(self.documents)
                + len(self._alive) * 11 + (self._vectors.nbytes if self._vectors is not None else 0))

    @property
    def total_length(self) -> int:
        """The live documents' lengths, summed."""
        return self._length

    @property
    def size(self) -> int:
        """Live documents (searchable or pending)."""
        return len(self.terms) - len(self.removed)


def fuse(*rankings: Sequence[int], k: int = RRF_K) -> list[tuple[float, int]]:
    """Reciprocal rank fusion of rankings of positions (each best first): ``(fused score, position)`` best first
    (ties: in the order first seen, the first ranking's before the second's)."""
    score: dict[int, float] = {}
    for ranking in rankings:
        for rank, position in enumerate(ranking, start=1):
            score[position] = score.get(position, 0.0) + 1.0 / (k + rank)
    return sorted(((s, p) for p, s in score.items()), key=lambda sp: -sp[0])
