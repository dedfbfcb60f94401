"""An edited source makes what memory derived from its earlier text SUSPECT (never shown as what is so) and is read
again by the idle sweep: the records of its new text are written and shown, whatever interleaving of the edit with
an extraction or a consolidation (forced on real Redis, the writer paused between its read and its write)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from fakes import Paused, Step, pipeline, scripted
from test_memory import _say

from threadkeeper.persistence import InboxItem, MemoryRecord
from threadkeeper.persistence.memory import text_version
from threadkeeper.services import Conversation
from threadkeeper.services.memory.reading import SUSPECT

T = "T1"
PUBLIC, OTHER = "C100", "C200"
ON = {"threadkeeper_memory_workspaces": T, "threadkeeper_memory_channels": "*"}
FACTS = ["The staging cluster is called kestrel-eu and lives in eu-west-3.",
         "We decided to never deploy on Fridays, starting this week.",
         "The billing outage is tracked in ticket OPS-4471."]
FIRST = "The staging cluster is called falcon-eu and lives in eu-west-3."
SECOND = "The staging cluster is called osprey-eu and lives in eu-west-3."
QUESTION = "what is the staging cluster called?"


@pytest.fixture(autouse=True)
def model():
    m = scripted()
    m.default = Step(text="noted")
    return m


def cid(channel: str, thread: str) -> Conversation:
    return Conversation.slack(T, channel, thread, "public")


async def _edit(p: Any, conversation: Conversation, message_id: str, text: str) -> None:
    """The source message edited in Slack: the event reaches the thread's inbox and its next run."""
    edited = p.message(text, author="alice", id=message_id)
    await p.submit_item(conversation, InboxItem(kind="edit", message=edited, reply_expected=False))
    await p.run(conversation)


async def _stored(st: Any, source: str) -> list[MemoryRecord]:
    return [r for r in await st.memory.records(T, now=0.0) if source in r.source_ids]


async def _shown(p: Any, question: str = QUESTION) -> str:
    block = await p.memory.block(cid(PUBLIC, "1900000000.000100"), question, asker=None, cap_tokens=2000)
    return block.text


def _as_fact(text: str, word: str) -> bool:
    """Whether a record of the block states ``word`` without the SUSPECT mark."""
    entries = re.split(r"(?:; |: |\n)(?=M\d+ )", text)
    return any(word in e and not re.sub(r"^M\d+ ", "", e).startswith(SUSPECT) for e in entries)


async def _sweep(p: Any) -> None:
    """The idle sweep, once the edited thread has been idle long enough."""
    p.memory.clock = lambda: time.time() + 3600
    await p.memory.sweep()
    p.memory.clock = time.time


async def test_an_edited_source_is_suspect_until_the_sweep_reads_its_new_text(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await p.memory.extract(a)
    assert _as_fact(await _shown(p), "kestrel-eu")
    await _edit(p, a, ids[0], FIRST)
    text = await _shown(p)
    assert "kestrel-eu" in text and SUSPECT in text and not _as_fact(text, "kestrel"), \
        "the earlier text is shown only as suspect"
    assert [r.suspect for r in await _stored(st, ids[0])] == [True], "kept, not retracted like a deletion"
    await _sweep(p)  # the edit put the thread back in the sweep's registry
    text = await _shown(p)
    assert _as_fact(text, "falcon-eu") and "kestrel" not in text, "the new text, as what is so"
    [record] = await _stored(st, ids[0])
    assert record.versions[ids[0]] == text_version(FIRST) and not record.suspect
    assert _as_fact(await _shown(p, "which ticket tracks the billing outage?"), "OPS-4471"), "the rest unchanged"
    await p.memory.consolidate(T, f"channel:{PUBLIC}")
    assert [r.text for r in await _stored(st, ids[0])] == [record.text], \
        "the new text's record is no retraction's: a consolidation keeps it"
    assert (await p.memory.extract(a)).records == 0, "read once at this text"
    await _edit(p, a, ids[0], SECOND)
    assert not _as_fact(await _shown(p), "falcon"), "an index built before the second edit sees it too"


async def test_an_edit_that_leaves_nothing_worth_keeping_leaves_no_record_of_the_earlier_text(redis_client,
                                                                                             prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await p.memory.extract(a)
    await _edit(p, a, ids[0], "ok")
    await _sweep(p)
    assert not await _stored(st, ids[0]) and "kestrel" not in await _shown(p)


async def test_a_source_deleted_after_an_edit_is_gone(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await p.memory.extract(a)
    await _edit(p, a, ids[0], FIRST)
    await p.memory.extract(a)
    await p.submit_item(a, InboxItem(kind="delete", target_id=ids[0], reply_expected=False))
    await p.run(a)
    assert not await _stored(st, ids[0]) and "eu-west-3" not in await _shown(p)
    await p.memory.extract(a)
    assert not await _stored(st, ids[0]), "a deleted message is not read again"


async def test_an_edit_during_extraction_never_leaves_the_earlier_text_as_fact(redis_client, prefix) -> None:
    """The extraction read the original text; the edit lands before its write: the record of the earlier text is not
    written, and the next extraction reads the new one."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await Paused(st.memory, "put").during(p.memory.extract(a), lambda: _edit(p, a, ids[0], FIRST))
    assert not _as_fact(await _shown(p), "kestrel")
    assert not [r for r in await _stored(st, ids[0]) if not r.suspect]
    await _sweep(p)
    text = await _shown(p)
    assert _as_fact(text, "falcon-eu") and "kestrel" not in text


async def test_an_edit_during_a_reextraction_is_read_at_the_next(redis_client, prefix) -> None:
    """The sweep read the first edit's text; a second edit lands before its write: neither the original nor the
    first edit's text is shown as what is so, and the next extraction writes the second's."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await p.memory.extract(a)
    await _edit(p, a, ids[0], FIRST)
    await Paused(st.memory, "put").during(p.memory.extract(a), lambda: _edit(p, a, ids[0], SECOND))
    text = await _shown(p)
    assert not _as_fact(text, "kestrel") and not _as_fact(text, "falcon")
    await _sweep(p)
    text = await _shown(p)
    assert _as_fact(text, "osprey-eu") and "kestrel" not in text and "falcon" not in text
    assert [r.versions[ids[0]] for r in await _stored(st, ids[0])] == [text_version(SECOND)]


async def test_an_edit_during_consolidation_does_not_make_the_earlier_text_current(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await p.memory.extract(a)
    await Paused(st.memory, "write_version").during(p.memory.consolidate(T, f"channel:{PUBLIC}"),
                                                    lambda: _edit(p, a, ids[0], FIRST))
    assert not _as_fact(await _shown(p), "kestrel")
    assert [r.suspect for r in await _stored(st, ids[0])] == [True], "left as stored, suspect"
    await _sweep(p)
    text = await _shown(p)
    assert _as_fact(text, "falcon-eu") and "kestrel" not in text


async def test_a_merged_record_loses_the_edited_part_while_another_stands(redis_client, prefix) -> None:
    """The same thing said in two channels, merged; one source is edited: the merged record keeps the other part,
    current, and the edited message's new text is read again."""
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    rota = "Remember this for everyone: the on-call rota lives at go/rota-7731 and pages through PD-5521."
    a, b = cid(PUBLIC, "1700000000.000100"), cid(OTHER, "1700000001.000100")
    [older] = await _say(p, a, [rota], start=0)
    [newer] = await _say(p, b, [rota.replace("pages through", "pages weekly through")], start=1)
    for c in (a, b):
        await p.memory.extract(c)
    await p.memory.consolidate(T, "workspace")
    [merged] = [r for r in await st.memory.records(T) if "rota" in r.text]
    assert set(merged.source_ids) == {older, newer}
    await _edit(p, b, newer, "Remember this for everyone: the on-call rota moved to go/rota-9001.")
    [left] = [r for r in await st.memory.records(T) if "7731" in r.text]
    assert left.source_ids == [older] and not left.suspect
    assert _as_fact(await _shown(p, "where does the on-call rota live?"), "go/rota-7731")
    await _sweep(p)
    assert _as_fact(await _shown(p, "where does the on-call rota live?"), "go/rota-9001")


async def test_a_record_written_before_versions_were_kept_is_suspect_after_an_edit(redis_client, prefix) -> None:
    p, st = pipeline(prefix, redis_client, settings=dict(ON))
    a = cid(PUBLIC, "1700000000.000100")
    ids = await _say(p, a, FACTS)
    await p.memory.extract(a)
    [record] = await _stored(st, ids[0])
    await st.memory.put(T, [record.model_copy(update={"versions": {}})])
    await _edit(p, a, ids[0], FIRST)
    assert [r.suspect for r in await _stored(st, ids[0])] == [True]
    await _sweep(p)
    assert _as_fact(await _shown(p), "falcon-eu")
