"""The one search index weighs terms by every live document, not by the segment that holds one: a document scores
the same whichever segment it sits in, so what was written a moment ago ranks with what is old."""

from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest

from threadkeeper.services.text import TermIndex, search_terms
from threadkeeper.services.text.index import Packed

WORDS = ("cluster staging deploy rollback ticket outage billing region service friday drill pager rota budget "
         "invoice kestrel falcon osprey gateway latency").split()


def _corpus(n: int, seed: int = 7) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(3, 12))] for _ in range(n)]


def _scores(index: TermIndex, query: list[str]) -> dict[int, float]:
    scores, positions = index.hits(query)
    return dict(zip(positions.tolist(), scores.tolist(), strict=True))


def test_two_equal_documents_score_equally_whatever_segment_holds_them() -> None:
    doc = search_terms("The kestrel staging cluster moved to the falcon region")
    index = TermIndex()
    old = index.add(doc)
    for terms in _corpus(300):
        index.add(terms)
    index.searchable()
    new = index.add(doc)  # written later: a segment of its own
    index.searchable()
    assert len(index.segments) > 1
    query = search_terms("which region is the kestrel cluster in?")
    scores = _scores(index, query)
    assert scores[new] == scores[old]
    _, ranked = index.hits(query)
    assert ranked.tolist()[:2] == [new, old], "equal scores: the newer first"


def test_scores_do_not_depend_on_how_documents_were_taken_into_segments() -> None:
    corpus = _corpus(400, seed=3)
    whole, piecemeal = TermIndex(), TermIndex()
    for terms in corpus:
        whole.add(terms)
    whole.searchable()
    for start in range(0, len(corpus), 37):
        for terms in corpus[start:start + 37]:
            piecemeal.add(terms)
        piecemeal.searchable()
    for position in (5, 77, 301):
        whole.remove(position)
        piecemeal.remove(position)
    assert len(whole.segments) == 1 and len(piecemeal.segments) > 1
    for query in (["kestrel", "region"], ["rollback", "drill", "friday"], ["outage"]):
        a, b = _scores(whole, query), _scores(piecemeal, query)
        assert a.keys() == b.keys() and not {5, 77, 301} & a.keys()
        assert all(abs(a[p] - b[p]) < 1e-9 for p in a)


def test_one_segment_scores_as_bm25s_does() -> None:
    """Lucene's BM25, as the library the index used before scores it (the rankings the evals measured)."""
    corpus = _corpus(200, seed=11)
    index = TermIndex()
    for terms in corpus:
        index.add(terms)
    index.searchable()
    reference = bm25s.BM25()
    reference.index(corpus, show_progress=False)
    query = ["kestrel", "cluster", "latency"]
    expected = reference.get_scores(query)
    ours = np.zeros(len(corpus))
    scores, positions = index.hits(query)
    ours[positions] = scores
    assert np.allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_a_term_held_hundreds_of_times_by_one_document_scores_as_bm25s_does_and_merges_with_the_rest() -> None:
    """A segment keeps its counts in a byte each while every one fits; one holding a term 300 times keeps them wider,
    and scores and merges the same."""
    corpus = _corpus(120, seed=5)
    corpus[40] = ["kestrel"] * 300 + ["cluster"]
    index = TermIndex()
    for terms in corpus[:60]:
        index.add(terms)
    index.searchable()
    for terms in corpus[60:]:
        index.add(terms)
    index.searchable()
    assert [s.postings.counts.dtype.itemsize for s in index.segments if isinstance(s.postings, Packed)] == [4]
    reference = bm25s.BM25()
    reference.index(corpus, show_progress=False)
    for query in (["kestrel"], ["kestrel", "cluster", "latency"]):
        ours = np.zeros(len(corpus))
        scores, positions = index.hits(query)
        ours[positions] = scores
        assert np.allclose(ours, reference.get_scores(query), rtol=1e-5, atol=1e-6)
        assert int(positions[0]) == 40 or query != ["kestrel"]


def test_documents_whose_terms_are_not_held_score_through_their_stored_postings_as_if_built_from_terms() -> None:
    """Documents added by their lengths alone (the totals of their terms counted elsewhere) are searched through
    segments kept elsewhere: by the postings read for a question's terms, then by every posting once all are read,
    built as one segment; they score as documents built from their terms, to the last bit, and the documents holding
    every one of some terms are found in the postings."""
    from collections import Counter

    from threadkeeper.services.recall import postings as stored_form
    from threadkeeper.services.recall.derived import Derived
    from threadkeeper.services.text import length

    corpus = _corpus(300, seed=11)
    corpus[5] = [*corpus[5], "kittiwake"]  # (a term one segment alone holds)
    built, unheld = TermIndex(), TermIndex()
    for terms in corpus:
        built.add(terms)
    built.searchable()
    epochs = [corpus[start:start + 60] for start in range(0, len(corpus), 60)]
    for n, epoch in enumerate(epochs):
        name = f"cp{n}"
        fields = stored_form.encode(name, [f"{n}.{i}" for i in range(len(epoch))],
                                    [Derived(tuple(t), (), ()) for t in epoch])
        assert fields is not None
        form = stored_form.decode_header(fields[stored_form.header_field(name)], [f"{n}.{i}" for i in range(len(epoch))],
                                         [True] * len(epoch))
        first = unheld.add_unread([length(t) for t in epoch])
        unheld.adopt(name, list(range(first, first + len(epoch))))
        for bucket in range(form.buckets):
            if form.terms[bucket]:
                raw = fields[stored_form.bucket_field(name, bucket)]
                if n % 2:  # (half read term by term, as a question asks)
                    terms, *_ = stored_form.decode_whole(raw, form, bucket)
                    unheld.take(name, terms, stored_form.decode_bucket(raw, form, bucket, terms))
                else:
                    unheld.take_all(name, [stored_form.decode_whole(raw, form, bucket)])
    unheld.documents.update(Counter(t for terms in corpus for t in set(terms)))
    assert None in unheld.terms
    for query in (["kestrel", "region"], ["rollback", "drill", "friday"], ["outage", "outage"]):
        assert unheld.scores(query) == built.scores(query)
        holding = [p for p, terms in enumerate(corpus) if set(query) <= set(terms)]
        assert unheld.holding(query) == built.holding(query) == holding and holding
    for segment in unheld.stored:
        segment.whole = True  # (every term was read, either way)
    del segment
    import gc
    import weakref

    read = [weakref.ref(segment) for segment in unheld.stored]
    unheld.build_stored()
    assert not unheld.stored and len(unheld.segments) == 1 and None in unheld.terms
    gc.collect()
    assert not any(ref() for ref in read), "the segments kept elsewhere, and the buckets read for them, let go"
    packed = unheld.segments[0].postings
    assert isinstance(packed, Packed) and packed.positions.base is None and packed.counts.base is None, \
        "the postings in arrays of their own, not views that keep a read bucket's alive"
    for query in (["kestrel", "region"], ["gateway"], ["budget", "pager", "osprey"]):
        assert unheld.scores(query) == built.scores(query)
        assert unheld.holding(query) == [p for p, terms in enumerate(corpus) if set(query) <= set(terms)]
    with pytest.raises(LookupError):
        unheld.feedback([3], [], terms=3)  # (a document's terms are read from its message first)
    unheld.fill(3, corpus[3])
    assert unheld.feedback([3], [], terms=3) == built.feedback([3], [], terms=3)


def test_the_searchable_count_holds_as_stored_segments_are_adopted_restored_and_built() -> None:
    """How many documents are searchable is kept as segments kept elsewhere are adopted (one at a time, hundreds on a
    cold worker's first turn), one is built from its terms in their place, and the rest are built as one; a document
    removed meanwhile counts once."""
    corpus = _corpus(120, seed=5)
    index = TermIndex()
    for n in range(4):
        first = index.add_many(corpus[n * 30:(n + 1) * 30])
        assert index.adopt(f"cp{n}", list(range(first, first + 30))) == 30 * (n + 1)
    index.remove(40)  # (a document of the segment built in its place: it leaves the count once)
    index.restore("cp1")
    assert index.searchable() == 119 and len(index.stored) == 3
    index.add_many(corpus[:10])
    assert index.searchable() == 129
    index.remove(3)
    assert index.searchable() == 128
    index.build_stored()
    assert index.searchable() == 128 and not index.stored
