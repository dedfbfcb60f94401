"""The packed message ids of a recall index (:mod:`services.recall.ids`): every id found at its position however it
was added, one at a time or in bulk, and nothing found that was not added."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from threadkeeper.services.recall import ids as module
from threadkeeper.services.recall.ids import Ids

_ID = st.one_of(st.integers(0, 10**9).map(lambda n: f"17000{n:010d}.{n % 999_983:06d}"),
                st.text(min_size=1, max_size=12), st.just("1700.000001:edit:1700.000002"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.lists(_ID, max_size=40)), max_size=40), st.lists(_ID, max_size=20))
def test_every_id_is_found_at_its_position_however_it_was_added(batches, others) -> None:  # type: ignore[no-untyped-def]
    """One at a time, in bulk, or in bulk with their hashes sorted already (as a cold worker's index adds them)."""
    import numpy as np

    ids, expected = Ids(), []
    seen: set[str] = set()
    for how, batch in batches:
        batch = [i for i in dict.fromkeys(batch) if i not in seen]
        seen.update(batch)
        if how == 0:
            for ident in batch:
                assert ids.append(ident) == len(expected)
                expected.append(ident)
            continue
        if how == 1:
            ids.extend(batch)
        else:
            hashes = np.fromiter(map(hash, batch), dtype=np.int64, count=len(batch))
            order = np.argsort(hashes, kind="stable")
            ids.extend(batch, ordered=(hashes[order], (len(expected) + np.arange(len(batch)))[order]))
        expected.extend(batch)
    assert list(ids) == expected and len(ids) == len(expected) and ids == expected
    assert all(ids.find(ident) == at and ids[at] == ident for at, ident in enumerate(expected))
    assert all(ids.find(other) == -1 and other not in ids for other in others if other not in seen)


def test_ids_added_one_at_a_time_join_the_sorted_runs_and_are_still_found(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(module, "RECENT", 8)
    ids = Ids()
    ids.extend([f"b{i}" for i in range(20)])
    for i in range(50):
        ids.append(f"a{i}")
    ids.extend([f"c{i}" for i in range(5)])
    assert len(ids._runs) > 1 and len(ids._recent) < 8, "runs of different sizes, few waiting"
    assert [ids.find(f"a{i}") for i in range(50)] == list(range(20, 70))
    assert ids.find("b3") == 3 and ids.find("c4") == 74 and ids.find("a50") == -1 and ids[-1] == "c4"
    assert ids[68:71] == ["a48", "a49", "c0"]


def test_the_first_of_each_id_is_found_by_hash_and_by_the_ids_where_two_share_a_hash() -> None:
    import numpy as np

    from threadkeeper.services.recall.index import _firsts

    named = ["a", "b", "a", "c", "b"]
    assert _firsts(named, np.asarray([1, 2, 1, 3, 2])).tolist() == [True, True, False, True, False]
    assert _firsts(named, np.asarray([7, 7, 7, 7, 7])).tolist() == [True, True, False, True, False], \
        "ids of one hash told apart by their text"
    assert _firsts([], np.zeros(0, dtype=np.int64)).tolist() == []
