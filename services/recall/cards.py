"""What recall holds of each message of a sealed epoch besides its text, stored so a worker that starts cold reads its
bodies only for what it shows.

The index needs, for every message it could recall, who wrote it, its role, its id and short reference, when it was
sent and what it costs in tokens: to search the author and day fields, to find a hit's neighbours, to resolve ``#N``.
Its text is needed only for the lines a turn shows. An epoch never changes once forked, so whoever reads its messages
to derive what the index takes from them (:mod:`.derived`) also stores these cards, in the conversation's ``:recall``
hash (:class:`persistence.EpochIndexStore`), field ``E:c`` for the epoch ending at checkpoint ``E``; a worker that
starts cold reads them with what was derived and reads a message's body only when a turn shows it
(:meth:`persistence.CheckpointStore.messages_in_place`).

The stored form is compressed text: a header line ``tk-cards <format> <messages> <chain digest>``, then one line per
message of the epoch, in order: its id alone for a message the index never takes, else its id, role, author,
reference, the time it was sent and its tokens, tab-separated (an empty field: none). The chain digest names the epoch's checkpoints
and how many messages each adds: completed checkpoints never change, so a chain names its messages for good, and
cards made for another chain (another epoch, another format, a corrupt value) are not used: the epoch's messages are
read and the cards made again, with one log line.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from threadkeeper.persistence import Message

from .derived import Derived, Unusable

FORMAT = 1
"""The stored form's version: raise it when the form changes."""


def field(epoch: str) -> str:
    return f"{epoch}:c"


class Card(NamedTuple):
    """What recall holds of a message without its text."""

    id: str
    role: str
    author: str | None
    ref: int | None
    created_at: float
    tokens: int


def card(message: Message) -> Card:
    return Card(message.id, message.role, message.author, message.ref, message.created_at, message.tokens)


def _header(chain: Sequence[tuple[str, int]]) -> str:
    digest = hashlib.blake2b("\n".join(f"{cid} {n}" for cid, n in chain).encode(), digest_size=12).hexdigest()
    return f"tk-cards {FORMAT} {sum(n for _, n in chain)} {digest}"


def encode(chain: Sequence[tuple[str, int]], messages: Sequence[Message], derived: Sequence[Derived | None],
           ) -> bytes | None:
    """The stored cards of the epoch whose ``chain`` holds ``messages`` (``derived``: what the index takes from each;
    None when a field would not survive the form: one holding a tab or a line break)."""
    lines = [_header(chain)]
    for message, found in zip(messages, derived, strict=True):
        fields = (message.id, message.role, message.author or "")
        if any(c in f for f in fields for c in "\t\n\r") or not message.id:
            return None
        if found is None:
            lines.append(message.id)
            continue
        lines.append(f"{message.id}\t{message.role}\t{message.author or ''}\t{message.ref or ''}\t"
                     f"{message.created_at!r}\t{message.tokens}")
    return zlib.compress("\n".join(lines).encode(), 1)


def decode(raw: bytes, chain: Sequence[tuple[str, int]]) -> tuple[list[str], list[Card | None]]:
    """The ids of the messages of the epoch of ``chain`` and the cards :func:`encode` stored for them (None: a message
    the index never takes); raises
    :class:`.derived.Unusable`, saying why, when they cannot be used (made for another chain or format, corrupt or cut
    short)."""
    try:
        lines = zlib.decompress(raw).decode().split("\n")
        if lines[0] != _header(chain):
            raise Unusable(f"cards made otherwise: {lines[0][:80]!r}")
        if len(lines) != sum(n for _, n in chain) + 1:
            raise Unusable(f"{len(lines) - 1} cards for {sum(n for _, n in chain)} messages")
        ids: list[str] = []
        out: list[Card | None] = []
        for line in lines[1:]:
            if "\t" not in line:
                ids.append(line)
                out.append(None)
                continue
            ident, role, author, ref, created, tokens = line.split("\t")
            if role not in ("user", "assistant"):
                raise Unusable(f"a card of a message the index never takes: {line[:80]!r}")
            ids.append(ident)
            out.append(Card(ident, role, author or None, int(ref) if ref else None, float(created), int(tokens)))
        if not all(ids):
            raise Unusable("a card without an id")
        return ids, out
    except (zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None
