"""The simplest strong baselines a context is compared with, at the same token spend: whole messages, chosen
without any compaction, note or handoff.

* **keep-newest**: the newest messages that fit (:func:`evals.graders.keep_newest`);
* **BM25 pick**: the messages a plain BM25 ranks best for the question (``bm25s`` with its English stopwords and
  a Snowball stemmer, default parameters), whole, best first, each one that still fits;
* **recent + BM25**: given messages first (the graded context's own verbatim messages), then the BM25 pick of
  the rest;
* **BM25 ±1**: the same pick, each hit whole with the message right before and right after it (an answer is
  often the next message), the strongest of these simple picks on the public sets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import bm25s
import Stemmer

logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index build at DEBUG

_STEMMER = Stemmer.Stemmer("english")


class MessagePool:
    """A thread's messages as whole units: ``(id, text, tokens)`` in thread order."""

    def __init__(self, messages: Sequence[tuple[str, str, int]]) -> None:
        self.ids = [mid for mid, _, _ in messages]
        self.tokens = {mid: tokens for mid, _, tokens in messages}
        self._texts = [text for _, text, _ in messages]
        self._retriever: bm25s.BM25 | None = None

    def _index(self) -> bm25s.BM25:
        if self._retriever is None:
            self._retriever = bm25s.BM25()
            corpus = bm25s.tokenize(self._texts or [""], stopwords="en", stemmer=_STEMMER, show_progress=False)
            self._retriever.index(corpus, show_progress=False)
        return self._retriever

    def ranked(self, query: str) -> list[str]:
        """Ids of the messages that share a term with ``query``, best BM25 score first (ties: newest first)."""
        if not self.ids:
            return []
        retriever = self._index()
        [terms] = bm25s.tokenize(query, stopwords="en", stemmer=_STEMMER, show_progress=False, return_ids=False)
        known = [t for t in terms if t in retriever.vocab_dict]
        if not known:
            return []
        scores = retriever.get_scores(known)
        order = sorted((i for i in range(len(self.ids)) if scores[i] > 0), key=lambda i: (-scores[i], -i))
        return [self.ids[i] for i in order]

    def bm25(self, query: str, spend: int, *, first: Iterable[str] = (), neighbours: bool = False) -> list[str]:
        """``first`` (those of them in the pool), then the BM25 pick for ``query``: each ranked message that still
        fits within ``spend`` tokens (``neighbours``: each hit followed by the messages right before and after it,
        each that still fits)."""
        ranked = self.ranked(query)
        if neighbours:
            place = {mid: i for i, mid in enumerate(self.ids)}
            ranked = [self.ids[j] for mid in ranked for j in (place[mid], place[mid] - 1, place[mid] + 1)
                      if 0 <= j < len(self.ids)]
        chosen: dict[str, None] = {}
        used = 0
        for mid in [*first, *ranked]:
            tokens = self.tokens.get(mid)
            if tokens is None or mid in chosen or used + tokens > spend:
                continue
            chosen[mid] = None
            used += tokens
        return list(chosen)
