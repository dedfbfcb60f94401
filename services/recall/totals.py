"""What recall's index has counted over a conversation's sealed epochs, stored so a worker that starts cold need not
count it again.

Besides each message's card and its epoch's segment (:mod:`.cards`, :mod:`.postings`), an index holds what depends on
every message before: how many documents hold each term (a term's weight), the capitalized words and the names people
are addressed by (who a question names), and how many search terms were indexed. Summing those over every sealed
epoch's derived messages was most of a cold worker's first turn in a long thread. Whoever holds the index once its
sealed epochs are indexed (nothing else indexed yet) stores those totals in the conversation's ``:recall`` hash,
field ``totals`` (one field: the newest sealed epochs' replace the last); a worker that starts cold reads them with
the cards and the segments' headers and does not read what was derived from the epochs at all. Its sealed messages'
terms are then not held: their segments give their postings, a message's body gives its terms when feedback needs
them (:meth:`services.text.TermIndex.fill`).

They also name the sealed epochs they were counted over, each with its chain of checkpoints (an epoch's chain never
changes), so a cold worker walks the conversation's lineage back only to the newest of them (a script call), not
through every epoch's checkpoints. A worker whose conversation sealed epochs after the totals were stored (one died
before it stored them) takes the totals for the epochs they name and derives the rest.

The stored form is compressed text: a header line ``tk-totals <format> <rules> <epochs> <epochs digest> <positions>
<terms> <length>`` (the derivation rules' fingerprint, how many sealed epochs and a digest of their checkpoints, in
order; then how many messages the index took from them, their search terms and their documents' lengths, summed),
then the documents per term (``term count`` pairs, space-separated), the capitalized words' counts (the same), the
vocatives (``word<TAB>author<TAB>count`` triples), the names (``word<TAB>author`` pairs) and the epochs (tab-separated,
each its checkpoint then its chain's checkpoints and their message counts, space-separated). Totals made by other
rules or another format, corrupt, or that disagree with the cards they are read with, are not used: the reader
derives the epochs' messages as before (with one log line when they disagree) and stores the totals again.
"""

from __future__ import annotations

import sys
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from .derived import Unusable, ids_digest, rules

FORMAT = 2
"""The stored form's version: raise it when the form changes."""
FIELD = "totals"
"""The field of the ``:recall`` hash that holds them (an epoch's fields are named after its checkpoint: never this)."""


class Totals(NamedTuple):
    """What an index counted over its sealed epochs' messages."""

    positions: int
    """Messages the index took from them."""
    terms: int
    """Their search terms, summed."""
    length: int
    """Their documents' lengths, summed (each at least 1)."""
    documents: Counter[str]
    """Per term, how many of them hold it."""
    capitalized: Counter[str]
    vocative: Counter[tuple[str, str]]
    """Per (name, person answered), how often a message addressed that person by that name."""
    names: dict[str, set[str]]
    """The people each word names."""
    epochs: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    """The sealed epochs counted over, oldest first: each one's last checkpoint and its chain (each checkpoint with
    how many messages it adds)."""


def _header(totals: Totals) -> str:
    epochs = [epoch for epoch, _ in totals.epochs]
    return (f"tk-totals {FORMAT} {rules()} {len(epochs)} {ids_digest(epochs)} {totals.positions} {totals.terms} "
            f"{totals.length}")


def _clean(words: Sequence[str], separators: str) -> bool:
    return all(w and not any(c in w for c in separators) for w in words)


def encode(totals: Totals) -> bytes | None:
    """The stored form of ``totals``; None when a word would not survive the form (a term, capitalized word or
    checkpoint holding a space, an author or name a tab or a line break)."""
    checkpoints = [c for epoch, chain in totals.epochs for c in (epoch, *(cid for cid, _ in chain))]
    if not (_clean(list(totals.documents) + list(totals.capitalized) + checkpoints, " \t\n\r")
            and _clean([w for pair in totals.vocative for w in pair] + list(totals.names)
                       + [a for held in totals.names.values() for a in held], "\t\n\r")):
        return None
    lines = [_header(totals),
             " ".join(f"{term} {n}" for term, n in totals.documents.items() if n > 0),
             " ".join(f"{word} {n}" for word, n in totals.capitalized.items() if n > 0),
             "\t".join(f"{word}\t{author}\t{n}" for (word, author), n in totals.vocative.items() if n > 0),
             "\t".join(f"{word}\t{author}" for word, held in totals.names.items() for author in sorted(held)),
             "\t".join(" ".join([epoch, *(f"{cid} {n}" for cid, n in chain)]) for epoch, chain in totals.epochs)]
    return zlib.compress("\n".join(lines).encode(), 1)


def decode(raw: bytes) -> Totals:
    """The totals :func:`encode` stored; raises :class:`.derived.Unusable`, saying why, when they cannot be used
    (counted by other rules or another format; corrupt or cut short)."""
    try:
        lines = zlib.decompress(raw).decode().split("\n")
        if len(lines) != 6:
            raise Unusable(f"{len(lines)} lines of totals, not 6")
        epochs: list[tuple[str, tuple[tuple[str, int], ...]]] = []
        for held in lines[5].split("\t") if lines[5] else []:
            epoch, *chain = held.split(" ")
            if len(chain) % 2 or not chain:
                raise Unusable(f"the chain of epoch {epoch} is cut short")
            epochs.append((epoch, tuple(zip(chain[::2], map(int, chain[1::2]), strict=True))))
        names_of = [epoch for epoch, _ in epochs]
        words = lines[0].split(" ")
        if len(words) != 8 or words[:5] != ["tk-totals", str(FORMAT), rules(), str(len(names_of)),
                                            ids_digest(names_of)]:
            raise Unusable(f"totals counted otherwise: {lines[0][:80]!r}")
        positions, terms, length = (int(n) for n in words[5:])
        pairs = lines[1].split(" ") if lines[1] else []
        documents = Counter(dict(zip(map(sys.intern, pairs[::2]), map(int, pairs[1::2]), strict=True)))
        pairs = lines[2].split(" ") if lines[2] else []
        capitalized = Counter(dict(zip(pairs[::2], map(int, pairs[1::2]), strict=True)))
        triples = lines[3].split("\t") if lines[3] else []
        if len(triples) % 3:
            raise Unusable("the vocatives are cut short")
        vocative = Counter({(w, a): int(n) for w, a, n in zip(triples[::3], triples[1::3], triples[2::3], strict=True)})
        pairs = lines[4].split("\t") if lines[4] else []
        names: dict[str, set[str]] = {}
        for word, author in zip(pairs[::2], pairs[1::2], strict=True):
            names.setdefault(word, set()).add(author)
        if min(positions, terms, length, *documents.values(), *capitalized.values(), *vocative.values(), 0) < 0:
            raise Unusable("a negative count")
        return Totals(positions, terms, length, documents, capitalized, vocative, names, tuple(epochs))
    except (zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None
