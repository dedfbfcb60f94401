"""What recall holds of each message of a sealed epoch besides its text, stored so a worker that starts cold reads its
bodies only for what it shows.

The index needs, for every message it could recall, who wrote it, its role, its id and short reference, when it was
sent and what it costs in tokens: to search the author and day fields, to find a hit's neighbours, to resolve ``#N``.
Its text is needed only for the lines a turn shows. An epoch never changes once forked, so whoever reads its messages
to derive what the index takes from them (:mod:`.derived`) also stores these cards, in the conversation's ``:recall``
hash (:class:`persistence.EpochIndexStore`), field ``E:c`` for the epoch ending at checkpoint ``E``; a worker that
starts cold reads them with what was derived and reads a message's body only when a turn shows it
(:meth:`persistence.CheckpointStore.messages_in_place`).

The stored form is compressed text, a column per field so it is read in a few splits: a header line
``tk-cards <format> <messages> <chain digest>``, then the messages' ids (tab-separated), their roles (a letter each:
``u`` a person's, ``a`` the assistant's, ``-`` one the index never takes), their authors (tab-separated, empty: none),
their references, the times they were sent, their tokens and their notes' tokens (space-separated; 0: none). The chain digest names the
epoch's checkpoints and how many messages each adds: completed checkpoints never change, so a chain names its messages
for good, and cards made for another chain (another epoch, another format, a corrupt value) are not used: the epoch's
messages are read and the cards made again, with one log line.
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

FORMAT = 2
"""The stored form's version: raise it when the form changes."""


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
    authors: list[str | None]
    refs: Any
    """0: none (integers)."""
    created: Any
    """Unix times (64-bit floats)."""
    tokens: Any
    notes: Any
    """The tokens of each message's note (0: none): whether a line of it fits, known before its body is read."""


_ROLES = {"user": "u", "assistant": "a"}


def _header(chain: Sequence[tuple[str, int]]) -> str:
    digest = hashlib.blake2b("\n".join(f"{cid} {n}" for cid, n in chain).encode(), digest_size=12).hexdigest()
    return f"tk-cards {FORMAT} {sum(n for _, n in chain)} {digest}"


def encode(chain: Sequence[tuple[str, int]], messages: Sequence[Message], derived: Sequence[Derived | None],
           ) -> bytes | None:
    """The stored cards of the epoch whose ``chain`` holds ``messages`` (``derived``: what the index takes from each;
    None when a field would not survive the form: an id or author holding a tab or a line break, an empty id)."""
    if any(not m.id or any(c in f for f in (m.id, m.author or "") for c in "\t\n\r") for m in messages):
        return None
    taken = [found is not None for found in derived]
    lines = [_header(chain), "\t".join(m.id for m in messages),
             "".join(_ROLES.get(m.role, "-") if t else "-" for m, t in zip(messages, taken, strict=True)),
             "\t".join(m.author or "" for m in messages),
             " ".join(str(m.ref or 0) for m in messages),
             " ".join(repr(m.created_at) for m in messages),
             " ".join(str(m.tokens) for m in messages),
             " ".join(str(note_tokens(m)) for m in messages)]
    return zlib.compress("\n".join(lines).encode(), 1)


def decode(raw: bytes, chain: Sequence[tuple[str, int]]) -> Cards:
    """The cards :func:`encode` stored for the epoch of ``chain``; raises :class:`.derived.Unusable`, saying why, when
    they cannot be used (made for another chain or format, corrupt or cut short)."""
    try:
        lines = zlib.decompress(raw).decode().split("\n")
        if lines[0] != _header(chain):
            raise Unusable(f"cards made otherwise: {lines[0][:80]!r}")
        if len(lines) != 8:
            raise Unusable(f"{len(lines) - 1} fields of cards, not 7")
        count = sum(n for _, n in chain)
        if not count:
            empty = np.zeros(0, dtype=np.int64)
            return Cards([], "", [], empty, np.zeros(0), empty, empty)
        ids, roles, authors = lines[1].split("\t"), lines[2], lines[3].split("\t")
        # (each number column parsed in one call: a cold worker decodes the cards of every epoch)
        times = lines[5].split(" ")
        cards = Cards(ids, roles, [a or None for a in authors], numbers(lines[4]),
                      np.fromiter(map(float, times), dtype=np.float64, count=len(times)), numbers(lines[6]),
                      numbers(lines[7]))
        if any(len(column) != count for column in cards) or not all(ids) or roles.strip("ua-"):
            raise Unusable(f"cards of {[len(column) for column in cards]} messages for {count}")
        return cards
    except (zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None
