"""What the recall index derives from a message alone, and its stored form for a sealed epoch.

Indexing a message (:meth:`ConversationIndex.add`) costs mostly what depends on its text only: its search terms
(:func:`services.text.search_terms`), its capitalized words and the names it addresses someone by (what learning
who is named reads). An epoch (the history at the checkpoint a compaction forked from) never changes, so that part
is derived once per epoch and stored beside the conversation (:class:`persistence.EpochIndexStore`); a worker that
starts cold reads it instead of deriving it again, and adds the messages as it would have, in the same order, so
its index is the index the messages give.

The stored form is text (never anything that runs code when read), compressed: a header line, then one line per
message of the epoch, in order: ``-`` for a message the index never takes, else its terms, its capitalized words and
its names, each list space-separated, tab between lists. The header holds the format, a fingerprint of the rules
that derive it (:func:`rules`: any change to how the probe texts are derived, or to the stop words, changes it), the
message count and a digest of the message ids. What does not match (another format or rule, another epoch, a
corrupt or truncated value) is derived again, with one log line for the read, and stored in its place.
"""

from __future__ import annotations

import hashlib
import re
import sys
import zlib
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from threadkeeper.persistence import Message

from ..text import STOPWORDS, search_terms

FORMAT = 1
"""The stored form's version: raise it when the form changes."""
_CHANGE = re.compile(r"^(?P<target>.+):(?P<kind>edit|delete):[^:]+$")
_CAPITALIZED = re.compile(r"\b[A-Z][^\W\d_]+\b")
_GREETING = r"(?:hey|hi|hello|thanks|thank you|thx|ok|okay|yes|yeah|sorry|dear|morning|good morning|congrats|bye)"
_VOCATIVE_START = re.compile(rf"^\W*(?:(?i:{_GREETING})[\s,]+)?(?P<name>[A-Z][^\W\d_]+)\s*[,!:]")
_VOCATIVE_END = re.compile(r"(?:^|[^.!?:;\s]\s+|,\s*)(?P<name>[A-Z][^\W\d_]+)\s*[!?.…)]*\s*$")
_FILLER_NAMES = frozenset("""hey hi hello thanks thank yes yeah yep ok okay sorry dear morning congrats bye lol haha
    wow omg great cool nice awesome sure absolutely definitely totally right true well also plus anyway anyways
    same exactly indeed agreed""".split())
"""Words that stand where a name would (``Thanks, great!``) but name nobody."""
_PROBES = (
    "Thanks Kate! The billing outage ticket OPS-4471 is at https://grafana.example.com/d/7a/auth-gateway-overview",
    "hey Priya, the staging cluster lives in eu-west-3 and costs 48,000 euros; Dana prefers the blue guitars.",
    "Wann ist das Treffen mit Jürgen? Ich komme um 14:30 Uhr, danke Anna!",
    "¿Dónde está la reunión de mañana, Carlos? Llevo las entradas.",
    "Le déjeuner est prêt à midi, on se retrouve au café de la gare, Marie.",
    "I've been playing Lethal Company all weekend and we didn't sleep, lol. Right, Bob?",
    "新しいサーバーの設定を明日確認します。deploy-key は vault にあります",
    "ok great, running the migrations now: ./scripts/migrate.sh --env=prod #ops @sam",
)
"""Texts whose derivation is part of the rules' fingerprint: a change to the term, stemming or name rules shows in
how some of them are derived."""


def change_notice_id(target: str, kind: str, event: str) -> str:
    """The id of the history message that records an edit or deletion of ``target``."""
    return f"{target}:{kind}:{event}"


def change_target(message_id: str) -> tuple[str, str] | None:
    """``(target id, "edit" | "delete")`` when ``message_id`` is a change notice, else ``None``."""
    match = _CHANGE.match(message_id)
    return (match["target"], match["kind"]) if match else None


class Derived(NamedTuple):
    """What the index takes from a message's text."""

    terms: tuple[str, ...]
    """Its search terms."""
    capitalized: tuple[str, ...]
    """Its capitalized words (how often a word is capitalized weighs whether it is a name people use)."""
    vocatives: tuple[str, ...]
    """The names it opens or ends with as if addressing someone (``Thanks Kate!``), filler left out."""


def derive(message: Message) -> Derived | None:
    """What the index takes from ``message``, or None for a message it never takes: runtime context, a handoff, a
    tool step, a deletion's notice, a message without text."""
    if message.flags.runtime or message.flags.handoff or message.role not in ("user", "assistant"):
        return None
    change = change_target(message.id)
    if change is not None and change[1] == "delete":
        return None
    text = message.text
    if not text.strip():
        return None
    return _derived(text)


def _derived(text: str) -> Derived:
    """What :func:`derive` takes from a message's text. Its terms are interned (``sys.intern``): each is one string
    however many messages hold it, so an index holds a pointer per term of a message, where a string of each took
    about 60 bytes more (1.4 KB a message of 24 terms; a thread's vocabulary is small beside its words)."""
    names = []
    for match in (_VOCATIVE_START.match(text), _VOCATIVE_END.search(text)):
        if match is None:
            continue
        word = match.group("name")
        if word.lower() in STOPWORDS["en"] or word.lower() in _FILLER_NAMES:
            continue
        names.append(word)
    return Derived(terms_of(text), tuple(_CAPITALIZED.findall(text)), tuple(names))


def terms_of(text: str) -> tuple[str, ...]:
    """The search terms :func:`derive` takes from a message's text (each one string however many messages hold it)."""
    return tuple(map(sys.intern, search_terms(text)))


@lru_cache(maxsize=1)
def rules() -> str:
    """A fingerprint of the rules that derive what is stored: the format, the stop words, and the probe texts as
    they derive now."""
    digest = hashlib.blake2b(f"{FORMAT}".encode(), digest_size=8)
    for lang in sorted(STOPWORDS):
        digest.update(f"\n{lang}:{' '.join(sorted(STOPWORDS[lang]))}".encode())
    for text in _PROBES:
        digest.update(repr(_derived(text)).encode())
    return digest.hexdigest()


def ids_digest(ids: Sequence[str]) -> str:
    """A digest of the messages' ids, in order: what a stored form names the epoch it was made from by."""
    return hashlib.blake2b("\n".join(ids).encode(), digest_size=12).hexdigest()


def _header(ids: Sequence[str]) -> str:
    return f"tk-recall {FORMAT} {rules()} {len(ids)} {ids_digest(ids)}"


_SEPARATORS = re.compile(r"[\s]")


def encode(ids: Sequence[str], derived: Sequence[Derived | None]) -> bytes | None:
    """The stored form of what was derived from an epoch's messages (their ``ids``, in order; None when a term would
    not survive it: one holding a separator, or empty)."""
    lines = [_header(ids)]
    for found in derived:
        if found is None:
            lines.append("-")
            continue
        fields = []
        for words in found:
            if any(not w or _SEPARATORS.search(w) for w in words):
                return None
            fields.append(" ".join(words))
        lines.append("\t".join(fields))
    return zlib.compress("\n".join(lines).encode(), 1)


class Unusable(ValueError):
    """What is stored cannot be used: derive it again."""


def decode(raw: bytes, ids: Sequence[str]) -> list[Derived | None]:
    """What :func:`encode` stored for the messages ``ids`` names; raises :class:`Unusable`, saying why, when it cannot be used
    (derived by another format or other rules, another epoch's, corrupt or cut short)."""
    try:
        lines = zlib.decompress(raw).decode().split("\n")
        if lines[0] != _header(ids):
            raise Unusable(f"derived otherwise: {lines[0][:80]!r}")
        if len(lines) != len(ids) + 1:
            raise Unusable(f"{len(lines) - 1} lines for {len(ids)} messages")
        out: list[Derived | None] = []
        for line in lines[1:]:
            if line == "-":
                out.append(None)
                continue
            terms, capitalized, vocatives = line.split("\t")
            # (each term one string however many messages hold it, as derived: see _derived)
            out.append(Derived(tuple(map(sys.intern, terms.split(" "))) if terms else (),
                               tuple(capitalized.split(" ")) if capitalized else (),
                               tuple(vocatives.split(" ")) if vocatives else ()))
        return out
    except (zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise exc if isinstance(exc, Unusable) else Unusable(f"{type(exc).__name__}: {exc}") from None
