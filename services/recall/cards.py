"""What recall holds of each message of a sealed epoch besides its text, stored so a worker that starts cold reads its
bodies only for what it shows.

The index needs, for every message it could recall, who wrote it, its role, its id and short reference, when it was
sent and what it costs in tokens: to search the author and day fields, to find a hit's neighbours, to resolve ``#N``.
Its text is needed only for the lines a turn shows. An epoch never changes once forked, so whoever reads its messages
to derive what the index takes from them (:mod:`.derived`) also stores these cards, in the conversation's ``:recall``
hash (:class:`persistence.EpochIndexStore`), field ``E:c`` for the epoch ending at checkpoint ``E``; a worker that
starts cold reads them with what was derived and reads a message's body only when a turn shows it
(:meth:`persistence.CheckpointStore.messages_in_place`).

The stored form is compressed, a column per field so a cold worker reads each in one call, never a message at a time:
a header line ``tk-cards <format> <messages> <chain digest>``, a line of the messages' ids (tab-separated), a line of
the epoch's authors (tab-separated, each once), then the columns as little-endian numbers: the roles (a letter each:
``u`` a person's, ``a`` the assistant's, ``-`` one the index never takes), each message's author as its place in that
line (4 bytes; -1: none), its reference (4 bytes; 0: none), when it was sent (an 8-byte float), its tokens and its
note's tokens (4 bytes each; 0: none). Cards of the form before (format 2: every column as text, the numbers
space-separated) are still read. The chain digest names the epoch's checkpoints and how many messages each adds:
completed checkpoints never change, so a chain names its messages for good, and cards made for another chain (another
epoch, an unknown format, a corrupt value) are not used: the epoch's messages are read and the cards made again, with
one log line.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from threadkeeper.persistence import Message

from .derived import Derived, Unusable
from .postings import numbers

if TYPE_CHECKING:
    import numpy as np
else:
    from .._numpy import np

FORMAT = 3
"""The stored form's version: raise it when the form changes."""
TEXT_FORMAT = 2
"""The form before, every column as text: still read."""
_COLUMNS = (("<i4", 4), ("<i4", 4), ("<f8", 8), ("<i4", 4), ("<i4", 4))
"""After the roles' letters: the authors' places, references, times sent, tokens and notes' tokens, as stored."""


def field(epoch: str) -> str:
    return f"{epoch}:c"


def note_tokens(message: Message) -> int:
    """The tokens of ``message``'s note as counted when it was written (0: it has none, or none was counted)."""
    return message.note_tokens[0] if message.note and message.note_tokens else 0


class Card(NamedTuple):
    """What recall holds of a message without its text (what the search tool filters by)."""

    id: str
    role: str
    author: str | None
    created_at: float
    tokens: int


class Cards(NamedTuple):
    """An epoch's cards, a column per field, one item per message of the epoch (role ``-``: one the index never
    takes); the numbers as numpy arrays (a cold worker takes them into its index as they are, a hundred thousand at a
    time)."""

    ids: list[str]
    roles: str
    authors: list[str | None] | None
    """Each message's author as written (None: none); None when they are read from :attr:`places` instead
    (:func:`posters` gives them either way)."""
    refs: Any
    """0: none (integers)."""
    created: Any
    """Unix times (64-bit floats)."""
    tokens: Any
    notes: Any
    """The tokens of each message's note (0: none): whether a line of it fits, known before its body is read."""
    people: tuple[str, ...] = ()
    places: Any = None
    """As stored (format 3): the epoch's authors, each once, and each message's author as its place among them (-1:
    none), a numpy array: what :attr:`authors` lists, for whoever maps them at once. None: not stored so."""
    notices: bool = True
    """Whether an id may be an edit's or a deletion's notice (one holds a colon; False: none does, known from the
    stored line of ids at once)."""


_ROLES = {"user": "u", "assistant": "a"}


def _header(chain: Sequence[tuple[str, int]], form: int = FORMAT) -> str:
    digest = hashlib.blake2b("\n".join(f"{cid} {n}" for cid, n in chain).encode(), digest_size=12).hexdigest()
    return f"tk-cards {form} {sum(n for _, n in chain)} {digest}"


def encode(chain: Sequence[tuple[str, int]], messages: Sequence[Message], derived: Sequence[Derived | None],
           ) -> bytes | None:
    """The stored cards of the epoch whose ``chain`` holds ``messages`` (``derived``: what the index takes from each;
    None when a field would not survive the form: an id or author holding a tab or a line break, an empty id)."""
    if any(not m.id or any(c in f for f in (m.id, m.author or "") for c in "\t\n\r") for m in messages):
        return None
    taken = [found is not None for found in derived]
    people = list(dict.fromkeys(m.author for m in messages if m.author))
    place = {author: at for at, author in enumerate(people)}
    roles = "".join(_ROLES.get(m.role, "-") if t else "-" for m, t in zip(messages, taken, strict=True))
    return _encoded(chain, [m.id for m in messages], people, roles,
                    [[place[m.author] if m.author else -1 for m in messages], [m.ref or 0 for m in messages],
                     [m.created_at for m in messages], [m.tokens for m in messages],
                     [note_tokens(m) for m in messages]])


def _encoded(chain: Sequence[tuple[str, int]], ids: Sequence[str], people: Sequence[str], roles: str,
             columns: Sequence[Any]) -> bytes:
    """The stored form of cards (each column as :data:`_COLUMNS` stores it)."""
    head = "\n".join([_header(chain), "\t".join(ids), "\t".join(people), ""]).encode()
    return zlib.compress(head + roles.encode() + b"".join(
        np.asarray(column, dtype=kind).tobytes() for column, (kind, _) in zip(columns, _COLUMNS, strict=True)), 1)


def joined(chain: Sequence[tuple[str, int]], parts: Sequence[Cards]) -> bytes:
    """The stored cards of consecutive epochs' messages together, as one epoch whose ``chain`` is theirs one after
    the other (a run of epochs, :mod:`.runs`), from each one's cards (``parts``, oldest first): what :func:`encode`
    stores for their messages (the authors listed once each, in the order they first wrote)."""
    people: dict[str, int] = {}
    places = []
    for cards in parts:
        local = [*cards.people] if cards.places is not None else list(dict.fromkeys(a for a in posters(cards) if a))
        found = np.asarray(cards.places, dtype=np.int64) if cards.places is not None else np.asarray(
            [local.index(a) if a else -1 for a in posters(cards)], dtype=np.int64)
        table = np.asarray([people.setdefault(author, len(people)) for author in local] + [-1], dtype=np.int64)
        places.append(table[found])  # (a place -1 reads the last item: none)
    return _encoded(chain, [i for cards in parts for i in cards.ids], list(people), "".join(c.roles for c in parts),
                    [np.concatenate(places) if places else np.zeros(0, dtype=np.int64),
                     *(np.concatenate([np.asarray(getattr(c, name)) for c in parts]) if parts else np.zeros(0)
                       for name in ("refs", "created", "tokens", "notes"))])


def decode(raw: bytes, chain: Sequence[tuple[str, int]]) -> Cards:
    """The cards :func:`encode` stored for the epoch of ``chain``; raises :class:`.derived.Unusable`, saying why, when
    they cannot be used (made for another chain or format, corrupt or cut short)."""
    try:
        data = zlib.decompress(raw)
        count = sum(n for _, n in chain)
        if data.startswith(f"tk-cards {TEXT_FORMAT} ".encode()):
            return _text(data, chain, count)
        first, ids_line, people_line, columns = data.split(b"\n", 3)
        if first.decode() != _header(chain):
            raise Unusable(f"cards made otherwise: {first[:80].decode(errors='replace')!r}")
        if len(columns) != count * (1 + sum(size for _, size in _COLUMNS)):
            raise Unusable(f"{len(columns)} bytes of columns for {count} messages")
        if not count:
            empty = np.zeros(0, dtype=np.int32)
            return Cards([], "", [], empty, np.zeros(0), empty, empty, (), empty)
        ids, roles = ids_line.decode().split("\t"), columns[:count].decode()
        listed = tuple(people_line.decode().split("\t")) if people_line else ()
        numbers, at = [], count
        for kind, size in _COLUMNS:  # (each column read as it is stored: no number parsed)
            numbers.append(np.frombuffer(columns, dtype=kind, count=count, offset=at))
            at += size * count
        places = numbers[0]
        if len(ids) != count or not all(ids) or roles.strip("ua-") or bool(
                np.any(places < -1) or np.any(places >= len(listed))):
            raise Unusable(f"cards of {len(ids)} messages for {count}, or roles or authors unknown")
        refs, created, tokens, notes = numbers[1:]
        return Cards(ids, roles, None, refs, created, tokens, notes, listed, places, b":" in ids_line)
    except (zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None


def posters(cards: Cards) -> list[str | None]:
    """Each message's author as written (None: none)."""
    if cards.authors is not None:
        return cards.authors
    people: list[str | None] = [*cards.people, None]  # (a place -1 reads the last item: none)
    return list(map(people.__getitem__, cards.places.tolist()))


def _text(data: bytes, chain: Sequence[tuple[str, int]], count: int) -> Cards:
    """Cards of the form before (:data:`TEXT_FORMAT`): every column as text."""
    lines = data.decode().split("\n")
    if lines[0] != _header(chain, TEXT_FORMAT):
        raise Unusable(f"cards made otherwise: {lines[0][:80]!r}")
    if len(lines) != 8:
        raise Unusable(f"{len(lines) - 1} fields of cards, not 7")
    if not count:
        empty = np.zeros(0, dtype=np.int64)
        return Cards([], "", [], empty, np.zeros(0), empty, empty)
    ids, roles, authors = lines[1].split("\t"), lines[2], lines[3].split("\t")
    times = lines[5].split(" ")
    columns = [ids, roles, [a or None for a in authors], numbers(lines[4]),
               np.fromiter(map(float, times), dtype=np.float64, count=len(times)), numbers(lines[6]), numbers(lines[7])]
    if any(len(column) != count for column in columns) or not all(ids) or roles.strip("ua-"):
        raise Unusable(f"cards of {[len(column) for column in columns]} messages for {count}")
    return Cards(*columns)
