"""A sealed epoch's search segment, stored beside what was derived from it, read term by term.

An epoch never changes once forked, so neither does the BM25 segment its messages make: their postings (per term,
the messages holding it and how often each does) and their lengths. Whoever derives an epoch's messages
(:mod:`.derived`) also makes that segment, with the rule every segment is made by
(:func:`services.text.index.postings`), and stores it in the conversation's ``:recall`` hash
(:class:`persistence.EpochIndexStore`): a header field, and the postings spread over buckets by a hash of the term,
so a worker that starts cold reads the header of each epoch and then, for a question, only the buckets that hold its
terms (:meth:`services.text.TermIndex.adopt`, :meth:`~services.text.TermIndex.take`), instead of building the segment.

Fields, for the epoch ending at checkpoint ``E``:

* ``E:p``: the header, compressed text: ``tk-postings <format> <rules> <messages> <ids digest> <buckets> <documents>
  <length sum>``, then the length of each message's document (``-`` for a message the index never takes), then the
  number of terms in each bucket.
* ``E:p:<bucket>``: a non-empty bucket, compressed: a line naming the header it belongs to (a digest of its first
  line) and the bucket, a line of its terms each followed by how many messages hold it, then the offsets in the epoch
  of those messages, term after term, and how often each holds it, as unsigned 32-bit little-endian integers (read
  as arrays, not parsed).

A document's place is its message's offset in the epoch; the reader maps it to the position its index gave that
message (a message already indexed from an earlier epoch, such as one a compaction retained, has none there and its
postings are left out). What does not match (another format or term rule, another epoch, a corrupt or truncated
value, a header that disagrees with the messages it describes) cannot be used: the reader builds the segment from the
messages instead, with one log line, and what is stored is made again.
"""

from __future__ import annotations

import hashlib
import itertools
import warnings
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..text import length, postings
from .derived import Derived, Unusable, ids_digest, rules

if TYPE_CHECKING:
    import numpy as np
else:
    from .._numpy import np

FORMAT = 2
"""The stored form's version: raise it when the form changes."""
TERMS_PER_BUCKET = 32
"""About how many terms one bucket holds: what a question reads beyond its own terms' postings."""
MAX_BUCKETS = 1024
_NUMBER = "<u4"
"""How the postings' numbers are stored: unsigned 32-bit little-endian integers."""


def header_field(epoch: str) -> str:
    return f"{epoch}:p"


def bucket_field(epoch: str, bucket: int) -> str:
    return f"{epoch}:p:{bucket}"


def bucket_of(term: str, buckets: int) -> int:
    """The bucket that holds ``term``'s postings among ``buckets``."""
    return zlib.crc32(term.encode()) % buckets


class Stored(NamedTuple):
    """An epoch's stored segment, as its header describes it."""

    buckets: int
    """How many buckets its postings are spread over."""
    tag: str
    """What each of its buckets names as its header."""
    terms: tuple[int, ...]
    """Per bucket, how many terms it holds (0: not stored)."""
    messages: int
    lengths: Any = ()
    """Per message of the epoch, its document's length (0: one the index never takes): integers, as read (a numpy
    array)."""

    def fields(self, epoch: str, terms: Iterable[str]) -> dict[int, list[str]]:
        """The non-empty buckets that hold ``terms``, and which of them each holds."""
        out: dict[int, list[str]] = {}
        for term in terms:
            bucket = bucket_of(term, self.buckets)
            if self.terms[bucket]:
                out.setdefault(bucket, []).append(term)
        return out


def _first_line(ids: Sequence[str], buckets: int, documents: int, total: int) -> str:
    return f"tk-postings {FORMAT} {rules()} {len(ids)} {ids_digest(ids)} {buckets} {documents} {total}"


def _tag(first: str) -> str:
    return hashlib.blake2b(first.encode(), digest_size=8).hexdigest()


def encode(epoch: str, ids: Sequence[str], derived: Sequence[Derived | None]) -> dict[str, bytes] | None:
    """The fields of ``epoch``'s stored segment (its messages' ids and what was derived from each); None when a term
    would not survive the form (one holding a separator: :func:`.derived.encode` says the same)."""
    documents = [(offset, found.terms) for offset, found in enumerate(derived) if found is not None]
    if any(not t or any(c.isspace() for c in t) for _, terms in documents for t in terms):
        return None
    return encode_made(epoch, ids, [0 if found is None else length(found.terms) for found in derived],
                       postings(documents))


def encode_made(epoch: str, ids: Sequence[str], lengths: Sequence[int], made: Mapping[str, tuple[Any, Any]],
                ) -> dict[str, bytes]:
    """The fields of the stored segment named ``epoch`` whose messages are ``ids``, of documents ``lengths`` long (0:
    a message the index never takes), holding the postings ``made`` (per term, the offsets of the messages holding it,
    ascending, and how often each does): what :func:`encode` stores, and a run of epochs (:mod:`.runs`) too."""
    buckets = max(1, min(MAX_BUCKETS, len(made) // TERMS_PER_BUCKET))
    held: list[list[tuple[str, Any, Any]]] = [[] for _ in range(buckets)]
    for term, (offsets, counts) in sorted(made.items()):
        held[bucket_of(term, buckets)].append((term, offsets, counts))
    first = _first_line(ids, buckets, sum(1 for n in lengths if n), sum(lengths))
    tag = _tag(first)
    out = {header_field(epoch): zlib.compress(
        "\n".join([first, " ".join(str(n) if n else "-" for n in lengths),
                   " ".join(str(len(b)) for b in held)]).encode(), 1)}
    for bucket, terms in enumerate(held):
        if terms:
            names = " ".join(f"{term} {len(offsets)}" for term, offsets, _ in terms)
            numbers = np.concatenate([*(o for _, o, _ in terms), *(n for _, _, n in terms)]).astype(_NUMBER)
            out[bucket_field(epoch, bucket)] = zlib.compress(f"{tag} {bucket}\n{names}\n".encode() + numbers.tobytes(), 1)
    return out


def numbers(text: str) -> Any:
    """The integers ``text`` holds, space-separated, as a numpy array, parsed in one call (a cold worker parses a
    number per message of every epoch); ValueError when it holds anything else."""
    if not text:
        return np.zeros(0, dtype=np.int64)
    with warnings.catch_warnings():  # (numpy stops at what is not a number, and warns: the count says so here)
        warnings.simplefilter("ignore", DeprecationWarning)
        found = np.fromstring(text, dtype=np.int64, sep=" ")
    if len(found) != text.count(" ") + 1:
        raise ValueError(f"not {text.count(' ') + 1} integers: {text[:40]!r}")
    return found


def decode_header(raw: bytes, ids: Sequence[str], taken: Any) -> Stored:
    """The header :func:`encode` stored for the messages ``ids`` names, checked against which of them the index takes
    (``taken``, per message, booleans or a boolean array: the same messages taken; their terms are those the header's rules derive, so their
    lengths are the header's); raises :class:`.derived.Unusable`, saying why, when it cannot be used."""
    try:
        first, lengths, counts = zlib.decompress(raw).decode().split("\n")
        words = first.split(" ")
        if len(words) != 8 or " ".join(words[:5]) != f"tk-postings {FORMAT} {rules()} {len(ids)} " \
                                                      f"{ids_digest(ids)}":
            raise Unusable(f"made otherwise: {first[:80]!r}")
        buckets = int(words[5])
        # (parsed in one call: a cold worker reads a header per epoch, a length per message)
        found = numbers(lengths.replace("-", "0"))
        if len(found) != len(taken) or bool(
                np.any((found == 0) == np.asarray(taken, dtype=bool)) or np.any(found < 0)):
            raise Unusable("its documents are not the messages the index takes")
        if words[5:] != [str(buckets), str(int(np.count_nonzero(found))), str(int(found.sum()))]:
            raise Unusable(f"its counts disagree with its documents: {first[:80]!r}")
        terms = tuple(int(n) for n in counts.split(" "))
        if len(terms) != buckets or buckets < 1:
            raise Unusable(f"{len(terms)} bucket counts for {buckets} buckets")
        return Stored(buckets, _tag(first), terms, len(ids), found)
    except (zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None


def stored_fields(epoch: str, header: bytes) -> list[str]:
    """The fields of ``epoch``'s stored segment, as its ``header`` names them: the header's, then its non-empty
    buckets'; raises :class:`.derived.Unusable` when the header cannot be read."""
    try:
        first, _, counts = zlib.decompress(header).decode().split("\n")
        terms = [int(n) for n in counts.split(" ")]
        if len(terms) != int(first.split(" ")[5]):
            raise Unusable(f"{len(terms)} bucket counts in a header that says {first.split(' ')[5]}")
    except (zlib.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None
    return [header_field(epoch), *(bucket_field(epoch, b) for b, n in enumerate(terms) if n)]


def _bucket(raw: bytes | None, stored: Stored, bucket: int) -> tuple[list[str], list[int], Any, int]:
    """Bucket ``bucket`` of ``stored`` as stored: its terms, how many messages hold each, its numbers (the offsets of
    those messages, term after term, then how often each holds it) and how many postings it holds; raises
    :class:`.derived.Unusable` when it is missing, another header's, or its counts disagree with its header or with
    what it holds."""
    if raw is None:
        raise Unusable(f"bucket {bucket} is missing")
    try:
        head, names, payload = zlib.decompress(raw).split(b"\n", 2)
        if head.decode() != f"{stored.tag} {bucket}":
            raise Unusable(f"bucket {bucket} belongs to another header: {head[:40]!r}")
        words = names.decode().split(" ")
        terms, sizes = words[::2], list(map(int, words[1::2]))
        if len(terms) != stored.terms[bucket] or len(sizes) != len(terms):
            raise Unusable(f"bucket {bucket} holds {len(terms)} terms, its header says {stored.terms[bucket]}")
        total = sum(sizes)
        if len(payload) != total * 2 * 4 or (sizes and min(sizes) < 1):
            raise Unusable(f"bucket {bucket} holds {len(payload)} bytes of postings for {total}")
        return terms, sizes, np.frombuffer(payload, dtype=_NUMBER), total
    except (zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None


def decode_bucket(raw: bytes | None, stored: Stored, bucket: int, terms: Iterable[str]) -> dict[str, tuple[Any, Any]]:
    """The postings of ``terms`` that bucket ``bucket`` of ``stored`` holds (a term it does not hold has none): per
    term, the offsets of the messages holding it and how often each does; raises :class:`.derived.Unusable` when the
    bucket is missing, another header's, or corrupt."""
    held, sizes, found, total = _bucket(raw, stored, bucket)
    out: dict[str, tuple[Any, Any]] = {}
    starts: list[int] = []
    for term in dict.fromkeys(terms):  # (a few terms of a bucket of dozens: each looked up, not the bucket walked)
        try:
            at = held.index(term)
        except ValueError:
            continue
        if not starts:
            starts = list(itertools.accumulate(sizes, initial=0))
        start, n = starts[at], sizes[at]
        offsets = found[start:start + n]
        if int(offsets.max()) >= stored.messages:
            raise Unusable(f"bucket {bucket}: the postings of {term!r} are out of range")
        out[term] = (offsets, found[total + start:total + start + n])
    return out


def decode_whole(raw: bytes | None, stored: Stored, bucket: int) -> tuple[list[str], Any, Any, Any]:
    """Every posting bucket ``bucket`` of ``stored`` holds: its terms, how many messages hold each, and the offsets of
    those messages and how often each holds it, term after term (arrays); raises :class:`.derived.Unusable` as
    :func:`decode_bucket` does."""
    terms, sizes, found, total = _bucket(raw, stored, bucket)
    if len(set(terms)) != len(terms):
        raise Unusable(f"bucket {bucket} holds a term twice")
    offsets = found[:total]
    if total and int(offsets.max()) >= stored.messages:
        raise Unusable(f"bucket {bucket}: its postings are out of range")
    return terms, np.asarray(sizes, dtype=np.int64), offsets, found[total:]
