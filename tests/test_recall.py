"""Recall: earlier messages the context no longer holds, found for each turn's new message."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from factories import msg
from fakes import Step, fields_read, pipeline, scripted, written

from threadkeeper.persistence import InboxItem, Notes
from threadkeeper.services import Conversation
from threadkeeper.services.context import calibration, visible
from threadkeeper.services.recall import RECALL_HEADER, ConversationIndex
from threadkeeper.services.recall.index import SHORT_TOKENS, sent_within
from threadkeeper.services.text import TermIndex, named_days, named_events, search_terms
from threadkeeper.services.turn import Preparation

CONV = "slack:T1:C9:1700000000.000400"
FACTS = ["The billing outage ticket is OPS-4471 and Priya owns the follow-up.",
         "Our staging cluster lives in eu-west-3, the production one in us-east-2.",
         "The vendor contract renews on 2025-03-31 and costs 48,000 euros a year.",
         "Dana prefers the blue guitar for the recording session on Thursday."]


def _filler(n: int, start: int = 0) -> list[str]:
    return [f"status update {i}: weather nice, lunch good, sync moved to the big room, pastries again, "
            f"nothing else to report from this corner of the office today" for i in range(start, start + n)]


@pytest.fixture
def model():
    m = scripted()
    m.default = Step(text="noted")
    return m


def fixed_runtime(conversation_id, history, incoming, now) -> str:
    return f"[runtime context] conversation: {conversation_id}"


def _pipeline(prefix, client):  # type: ignore[no-untyped-def]
    """A 4k-window pipeline whose runtime context has no clock in it, so a preview and a turn compare equal."""
    p, _ = pipeline(prefix, client, context_window=4096)
    p.executor.assembler.header = fixed_runtime
    return p


async def _thread(p, texts: list[str], *, start: int = 0) -> None:
    for i, text in enumerate(texts, start=start):
        await p.submit(CONV, text, author=("alice", "bob")[i % 2], id=f"1700.{i:06d}", created_at=1700000000 + i * 60)
        await p.run(CONV)


def test_search_terms_stem_and_drop_function_words() -> None:
    assert set(search_terms("Which guitars did Dana play?")) == set(search_terms("dana playing the guitar"))
    assert "the" not in search_terms("the guitar") and search_terms("OPS-4471") == ("ops-4471", "op", "4471")
    assert {"auth", "gateway", "overview"} <= set(search_terms("https://grafana.example.com/d/7a/auth-gateway-overview"))
    assert search_terms("Wann ist das Treffen?")[-1] == search_terms("treffen")[0]
    assert "das" not in search_terms("Wann ist das Treffen?")


def test_index_searches_only_what_left_the_context_and_merges_segments() -> None:
    index = ConversationIndex()
    messages = [msg(f"note {i} about topic{i % 7}", id=f"x{i}") for i in range(300)]
    for chunk in range(0, 300, 20):
        index.add(messages[chunk:chunk + 20])
        index.searchable(held={m.id for m in messages[chunk + 10:chunk + 20]})
    assert index.searchable(held=set()) == 300
    assert len(index.search.segments) <= 6, "segments of similar size are merged"
    hits = [index.target(pos) for _, pos in index.scores(list(search_terms("topic3")))]
    assert set(hits) == {f"x{i}" for i in range(300) if i % 7 == 3}
    index.add(messages[:5])
    assert index.size == 300, "a message is indexed once"


def test_the_work_of_making_documents_searchable_is_known_before_it_is_done() -> None:
    """What decides whether indexing runs off the event loop: the documents a step indexes, its merges included."""
    class Counting(TermIndex):
        built = 0

        def _build(self, positions: list[int]):  # type: ignore[no-untyped-def]
            self.built += len(positions)
            return super()._build(positions)

        def _merged(self, before, last):  # type: ignore[no-untyped-def]
            self.built += len(before.positions) + len(last.positions)
            return super()._merged(before, last)

    index = Counting()
    for size in (40, 30, 20, 10, 5, 80, 1, 300):
        for i in range(size):
            index.add([f"t{i % 13}", f"u{size}"])
        expected, index.built = index.indexing(len(index.pending)), 0
        index.searchable()
        assert expected == index.built, (size, expected, index.built)
    assert len(index.segments) < 8, "it merged"
    assert index.indexing(0) == 0


def test_the_widened_query_finds_what_shares_no_word_with_the_question_after_every_direct_hit() -> None:
    index = ConversationIndex()
    talk = ["which board game should we play on Friday night?",
            "we play Gloomhaven on Friday night, the campaign is at scenario nine",
            "Gloomhaven scenario nine took us four hours",
            *[f"status {i}: lunch moved, the printer on floor {i} jammed again" for i in range(60)]]
    index.add([msg(t, id=f"w{i}") for i, t in enumerate(talk)])
    index.searchable(held=set())
    query = list(search_terms("what game do they like?"))
    direct = [index.target(pos) for _, pos in index.scores(query)]
    assert direct == ["w0"], "only the first message says 'game'"
    ranked = index.scores(query)
    widened = [index.target(pos) for _, pos in index.widening(ranked, index.feedback(ranked, query))]
    assert widened[0] == "w1", "the best hit's words (play, Friday, night) find the answer, and only new hits"


def test_the_author_is_a_field_a_question_naming_someone_scores() -> None:
    """A named person's messages gain the author field's score (a far stronger match by someone else still ranks
    first), and their messages that share no word with the question are found by the author alone."""
    index = ConversationIndex()
    talk = [msg("the zeppelin quarterly zeppelin budget zeppelin review", author="bob", id="b0"),
            msg("the zeppelin idea again", author="ana", id="a0"),
            msg("I moved the launch to Tuesday", author="ana", id="a1"),
            *[msg(f"status {i}: lunch moved, the printer on floor {i} jammed again", author=("bob", "cy", "ana")[i % 3],
                  id=f"s{i}") for i in range(40)]]
    index.add(talk)
    index.searchable(held=set())
    query = list(search_terms("what did ana say about the quarterly zeppelin budget review?"))
    ranked, alone = index.by_fields(index.scores(query), {"ana"})
    assert [index.target(p) for _, p in ranked] == ["b0", "a0"], "a score, not a reordering"
    closer = list(search_terms("what did ana say about the zeppelin?"))
    assert [index.target(p) for _, p in index.scores(closer)] == ["b0", "a0"]
    assert [index.target(p) for _, p in index.by_fields(index.scores(closer), {"ana"})[0]] == ["a0", "b0"], \
        "the author's field outweighs a few more mentions of the same word"
    assert "a1" in {index.target(p) for _, p in alone}, "found by who wrote it"
    assert {index.author(p) for _, p in alone} == {"ana"} and all(score > 0 for score, _ in alone)
    assert index.by_fields(index.scores(query), set()) == (index.scores(query), [])


@pytest.mark.parametrize(("question", "days"), [
    ("Where was Elise on 31 Dec 2023?", [("2023-12-31", "2023-12-31")]),
    ("What did we decide on December 28, 2023 and on the 3rd of January?", [("2023-12-28", "2023-12-28"),
                                                                           ("2024-01-03", "2024-01-03")]),
    ("what did Paola cook on 22.01.2024?", [("2024-01-22", "2024-01-22")]),
    ("the 2024-01-05 meeting", [("2024-01-05", "2024-01-05")]),
    ("Which books did Fahim start in January?", [("2024-01-01", "2024-01-31")]),
    ("what did we plan in March?", [("2023-03-01", "2023-03-31")]),  # the latest March before the question
    ("what happened last week?", [("2024-01-15", "2024-01-21")]),
    ("what did you say yesterday?", [("2024-01-22", "2024-01-22")]),
    ("may 2 of us join the 10 who march 3 miles?", []), ("what happened in 2017 and last year?", []), ("on 30 Feb 2024", []),
])
def test_a_question_names_days_by_date_or_relative_to_when_it_was_asked(question: str, days: list[tuple[str, str]]
                                                                        ) -> None:
    asked = datetime(2024, 1, 23, 10, tzinfo=timezone.utc).timestamp()  # a Tuesday
    assert [(a.isoformat(), b.isoformat()) for a, b in named_days(question, asked)] == days


def test_a_day_the_question_names_is_read_in_the_askers_time_zone() -> None:
    """Just after midnight in Tokyo it is still yesterday in UTC: "yesterday" is the asker's."""
    tokyo = timezone(timedelta(hours=9))
    asked = datetime(2024, 1, 23, 0, 30, tzinfo=tokyo).timestamp()
    question = msg("what did we agree yesterday?")
    question = question.model_copy(update={"created_at": asked})
    [(start, end)] = sent_within([question], tokyo)
    assert start == datetime(2024, 1, 22, tzinfo=tokyo).timestamp(), "the asker's yesterday, from their midnight"
    assert end == datetime(2024, 1, 24, tzinfo=tokyo).timestamp(), "and the day after it"
    [(utc_start, _)] = sent_within([question])
    assert utc_start == datetime(2024, 1, 21, tzinfo=timezone.utc).timestamp()


def test_the_day_a_message_was_sent_is_a_field_a_question_naming_a_day_scores() -> None:
    """Messages sent on the day a question names (or the day after) gain the day field's score, and those that share
    no word with the question are found by their day alone; a question naming no day changes nothing."""
    index = ConversationIndex()
    day = datetime(2023, 12, 31, 12, tzinfo=timezone.utc).timestamp()
    talk = [msg("we watched the fireworks over Miami with my family", author="ana", id="told"),
            msg("what a dinner, fireworks again", author="bob", id="other"),
            *[msg("status: lunch moved, the printer jammed again", author=("bob", "ana")[i % 2], id=f"s{i}")
              for i in range(40)]]
    when = {"told": day + 86_400 + 3_600, "other": day - 10 * 86_400}  # told the next day; the other ten days before
    index.add([m.model_copy(update={"created_at": when[m.id] if m.id in when else day - 20 * 86_400 + i * 3_600})
               for i, m in enumerate(talk)])
    index.searchable(held=set())
    question = msg("Where was Ana on 31 Dec 2023?").model_copy(update={"created_at": day + 30 * 86_400})
    query = list(search_terms(question.text))
    sent = sent_within([question])
    ranked, alone = index.by_fields(index.scores(query), set(), sent)
    assert ranked == [] and [index.target(p) for _, p in alone] == ["told"], "found by its day alone"
    fireworks = list(search_terms("the fireworks on 31 Dec 2023"))
    plain = [index.target(p) for _, p in index.scores(fireworks)]
    assert plain[0] == "other", "without the day field, the shorter message matches best"
    assert [index.target(p) for _, p in index.by_fields(index.scores(fireworks), set(), sent)[0]] == ["told", "other"]
    assert index.by_fields(index.scores(fireworks), set(), []) == (index.scores(fireworks), [])


@pytest.mark.parametrize(("question", "events"), [
    ("what did we fix before the public launch?", [(False, ("public", "launch"))]),
    ("what broke after the database migration and who fixed it?", [(True, ("databas", "migrat"))]),
    ("anything new since the outage?", [(True, ("outag",))]),
    ("what was on until 7 Jan 2024, and after 7 PM?", []), ("what changed since then?", []),
    ("what happened before last week?", []),
])
def test_a_question_names_the_events_it_dates_itself_by(question: str, events: list[tuple[bool, tuple[str, ...]]]
                                                         ) -> None:
    assert named_events(question, datetime(2024, 1, 23, tzinfo=timezone.utc).timestamp()) == events


def test_a_question_dated_by_an_event_scores_the_messages_on_its_side_of_the_first_mention() -> None:
    """"Before the launch": the messages sent before the thread first spoke of the launch gain the day field's score,
    so one that shares no word with the question is found by when it was sent; "after" the ones from then on, the
    earliest first; an event the thread never spoke of dates nothing."""
    index = ConversationIndex()
    start = datetime(2024, 3, 1, tzinfo=timezone.utc).timestamp()
    talk = [*[msg(f"status: lunch moved, the printer jammed again ({i})", id=f"a{i}") for i in range(30)],
            msg("we booked Harbor Hall for the party, deposit paid", author="ana", id="booked"),
            msg("the launch is set for Friday", author="bob", id="launch"),
            msg("the launch went fine, Harbor Hall was packed", author="bob", id="again"),
            msg("the caterer sent the invoice", author="ana", id="invoice"),
            *[msg(f"status: lunch moved, the printer jammed again ({i})", id=f"b{i}") for i in range(30, 90)]]
    index.add([m.model_copy(update={"created_at": start + i * 3_600}) for i, m in enumerate(talk)])
    index.searchable(held=set())
    question = msg("What happened before the launch?").model_copy(update={"created_at": start + 200 * 3_600})
    query = list(search_terms(question.text))
    before = index.event_spans(named_events(question.text, question.created_at))
    assert before == [(-math.inf, start + 31 * 3_600)], "the first message that spoke of the launch"
    ranked, alone = index.by_fields(index.scores(query), set(), before)
    assert {index.target(p) for _, p in ranked} == {"launch", "again"}
    assert [index.target(p) for _, p in alone][:2] == ["booked", "a29"], "found by when it was sent, nearest first"
    after = index.event_spans([(True, ("launch",))])
    _, alone = index.by_fields(index.scores(query), set(), after)
    assert [index.target(p) for _, p in alone][:2] == ["invoice", "b30"], "the earliest after it first"
    assert index.event_spans([(False, ("outag",))]) == [], "never spoken of: no span"
    assert index.by_fields(index.scores(query), set(), []) == (index.scores(query), [])


class _Zoned:
    """A transport's intake that knows each person's time zone (as Slack's ``users.info`` gives it)."""

    def __init__(self, zones: dict[str, str]) -> None:
        self.zones = zones

    async def author(self, conversation: Conversation, author_id: str) -> str:
        return author_id

    async def zone(self, conversation: Conversation, author_id: str) -> str | None:
        return self.zones.get(author_id)

    async def route(self, conversation: Conversation, text: str, recent: object) -> bool:
        return False

    async def prepare(self, conversation: Conversation) -> Preparation:
        return Preparation()


async def test_a_turn_reads_the_days_a_question_names_in_the_askers_time_zone(model, prefix, client) -> None:
    """Just after midnight in Tokyo, "yesterday" is Tokyo's day before: a message sent on the UTC day before that is
    recalled by its day for an asker whose zone the transport does not know (UTC), not for the one in Tokyo."""
    p = _pipeline(prefix, client)
    p.use_intake(_Zoned({"carol": "Asia/Tokyo", "erin": "Not/A_Zone"}))
    utc = timezone.utc
    only_utc = datetime(2023, 11, 19, 10, tzinfo=utc).timestamp()  # Tokyo: the 19th, 19:00
    both = datetime(2023, 11, 20, 1, tzinfo=utc).timestamp()  # Tokyo: the 20th, 10:00
    before = datetime(2023, 11, 1, tzinfo=utc).timestamp()  # the rest, weeks before
    said = {0: (FACTS[0], only_utc), 4: (FACTS[1], both)}  # apart, so neither is the other's neighbour
    for i, filler in enumerate(_filler(124)):
        text, when = said.get(i, (filler, before + i * 60))
        await p.submit(CONV, text, author=("alice", "bob")[i % 2], id=f"1700.{i:06d}", created_at=when)
        await p.run(CONV)
    asked = datetime(2023, 11, 20, 15, 30, tzinfo=utc).timestamp()  # Tokyo: the 21st, 00:30

    async def recalled(asker: str, n: int) -> str:
        model.requests.clear()
        await p.submit_item(CONV, InboxItem(message=p.message("what happened yesterday?", author=asker,
                                                              id=f"1800.{n:06d}", created_at=asked + n),
                                            author_id=asker, reply_expected=True))
        await p.run(CONV)
        return "\n".join(m["content"] for m in model.requests[0]["messages"][1:] if m["role"] == "system")

    tokyo = await recalled("carol", 1)
    assert "eu-west-3" in tokyo and "OPS-4471" not in tokyo, "Tokyo's yesterday began after the first was sent"
    for n, asker in enumerate(("dave", "erin"), start=2):  # no zone known; a zone this machine does not know
        told = await recalled(asker, n)
        assert "eu-west-3" in told and "OPS-4471" in told, f"{asker}: UTC's yesterday holds both"


async def test_a_turn_recalls_what_was_said_before_the_event_a_question_names(model, prefix, client) -> None:
    """"What did we settle before the launch?": the fact sent shortly before the thread first spoke of the launch
    shares no word with the question and is not next to the launch's message, yet the turn recalls it; asked about
    what came after the launch, it does not."""
    p = _pipeline(prefix, client)
    texts = _filler(124)
    texts[40], texts[46] = FACTS[3], "the launch checklist is signed off, see you all on the call"
    await _thread(p, texts)

    async def recalled(question: str, n: int) -> str:
        model.requests.clear()
        await p.submit(CONV, question, author="carol", id=f"1800.{n:06d}", created_at=1700000000 + (200 + n) * 60)
        await p.run(CONV)
        return "\n".join(m["content"] for m in model.requests[0]["messages"][1:] if m["role"] == "system")

    assert "blue guitar" in await recalled("what did we settle before the launch?", 1)
    assert "blue guitar" not in await recalled("what did we settle after the launch?", 2)
    assert "blue guitar" in await recalled("what did we settle before Bob's launch?", 3), \
        "a person's name dates nothing (no message's words hold it): the event is the launch"


async def test_turn_recalls_a_folded_fact_and_context_preview_matches_the_request(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(120)])
    history = await p.checkpoints.load_history(CONV)
    assert not any("OPS-4471" in m.text for m in history.messages if not m.flags.handoff), "the fact was folded"
    question = "what was the ticket for the billing outage?"
    preview = await p.context(CONV, arriving=[p.message(question, author="carol")])
    runtime = preview.context[-1]
    assert runtime.role == "system" and RECALL_HEADER in runtime.text
    assert "[1700.000000] alice: The billing outage ticket is OPS-4471" in await written(p, CONV, runtime.text)
    assert "[#1] alice: The billing" in runtime.text, "recalled lines cite the short reference"
    assert "1700.000000" in runtime.source_ids
    shown = {i for e in preview.context[:-1] if not e.text.startswith("[Threadkeeper handoff") for i in e.source_ids}
    recent = await p.context(CONV, arriving=[p.message("any status update about pastries?")])
    assert recent.context[-1].source_ids and not set(recent.context[-1].source_ids) & shown, \
        "what the context holds verbatim is never recalled again"
    assert runtime.tokens - p.message(fixed_runtime(CONV, [], [], 0.0), role="system").tokens \
        <= p.budget.recall_tokens + 2
    model.requests.clear()
    await p.submit(CONV, question, author="carol", id="1700.009999")
    await p.run(CONV)
    sent = model.requests[0]["messages"]
    assert [m["content"] for m in sent] == [e.text for e in preview.context], "context --message is what is sent"
    assert sum(e.tokens for e in preview.context) <= p.budget.request_limit_tokens


async def test_recall_is_never_stored_as_history_nor_folded(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(120)])
    await p.submit(CONV, "which region is the staging cluster in?", author="carol", id="1700.009000")
    await p.run(CONV)
    runtime = [m["content"] for m in model.requests[-1]["messages"][1:] if m["role"] == "system"]
    assert len(runtime) == 1 and "[1700.000001] bob: Our staging cluster lives in eu-west-3" in \
        await written(p, CONV, runtime[0])
    await p.submit(CONV, "thanks, that helps a ton", author="carol", id="1700.009001")
    await p.run(CONV)
    runtime = [m["content"] for m in model.requests[-1]["messages"][1:] if m["role"] == "system"]
    assert len(runtime) == 1 and RECALL_HEADER not in runtime[0], "last turn's recall left with its runtime context"
    await _thread(p, _filler(120, 200), start=200)
    handoff = (await p.checkpoints.load_history(CONV)).messages[0]
    assert handoff.flags.handoff and RECALL_HEADER not in handoff.text


async def test_edited_messages_are_recalled_as_they_read_now_and_deleted_ones_never(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    await _thread(p, FACTS)
    edited = p.message("The vendor contract renews on 2025-06-30 and costs 52,000 euros a year.",
                                     author="alice", id="1700.000002")
    await p.submit_item(CONV, InboxItem(kind="edit", event_id="Ev-e", message=edited))
    await p.submit_item(CONV, InboxItem(kind="delete", event_id="Ev-d", target_id="1700.000001"))
    await _thread(p, _filler(120, 10), start=10)
    report = await p.context(CONV, arriving=[p.message("when does the vendor contract renew? and "
                                                                     "where is the staging cluster?")])
    text = report.context[-1].text
    assert "2025-06-30" in text and "(edited)" in text and "2025-03-31" not in text
    assert "eu-west-3" not in text and "1700.000001" not in report.context[-1].source_ids
    cold = _pipeline(prefix, client)  # (a worker that starts cold: the edit's and deletion's notices from the cards)
    again = await cold.context(CONV, arriving=[cold.message("when does the vendor contract renew? and "
                                                            "where is the staging cluster?")])
    assert again.context[-1].text == text


async def test_a_message_recalled_before_its_edit_is_recalled_as_it_reads_after_it(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(120, 10)])
    question = "when does the vendor contract renew?"
    before = (await p.context(CONV, arriving=[p.message(question)])).context[-1].text
    assert "2025-03-31" in before, "recalled (its line is made and kept)"
    edited = p.message("The vendor contract renews on 2025-06-30 and costs 52,000 euros a year.",
                       author="alice", id="1700.000002")
    await p.submit_item(CONV, InboxItem(kind="edit", event_id="Ev-e", message=edited))
    await p.run(CONV)
    after = (await p.context(CONV, arriving=[p.message(question)])).context[-1].text
    assert "2025-06-30" in after and "(edited)" in after and "2025-03-31" not in after


async def test_a_worker_without_an_index_builds_it_from_redis(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(120)])
    question = [p.message("who prefers the blue guitar?")]
    warm = await p.context(CONV, arriving=question)
    cold_pipeline = _pipeline(prefix, client)
    assert cold_pipeline.recall.loaded(CONV) is None
    cold = await cold_pipeline.context(CONV, arriving=question)
    assert cold.context[-1].text == warm.context[-1].text and "blue guitar" in cold.context[-1].text
    index = cold_pipeline.recall.loaded(CONV)
    assert index is not None and index.size >= len(FACTS) + 60


async def test_recall_gives_way_when_the_request_has_no_room(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(120)])
    history = await p.checkpoints.load_history(CONV)
    question = p.message("who prefers the blue guitar?", author="carol")
    assemble = p.executor.assembler.assemble
    roomy = (await assemble(Conversation.of(CONV), history, [*history.messages, question], [question], Notes())).message
    assert "blue guitar" in roomy.text
    # A message that leaves less room than the recall share: recall shrinks to what fits beside it (in the
    # provider's count, which the last reported usage calibrates).
    b = p.budget.in_estimates(calibration(history, fixed_prompt_tokens=p.budget.fixed_prompt_tokens))
    used = b.fixed_prompt_tokens + sum(m.tokens for m in visible(history.messages))
    filler = b.request_limit_tokens - used - p.executor.loop.tool_tokens - roomy.tokens // 2
    big = p.message("who prefers the blue guitar? " + "la " * filler, author="carol")
    tight = (await assemble(Conversation.of(CONV), history, [*history.messages, big], [big], Notes())).message
    sent = used + big.tokens + tight.tokens
    assert sent + p.executor.loop.tool_tokens <= b.request_limit_tokens
    assert tight.tokens < roomy.tokens


async def test_thread_search_finds_earlier_messages_by_words_author_and_date(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(120)])
    assert "thread_search" in {s["function"]["name"] for s in p.executor.loop.tools.schemas()}
    calls = [("thread_search", json.dumps({"query": "vendor contract renewal"})),
             ("thread_search", json.dumps({"query": "contract", "author": "bob"})),
             ("thread_search", json.dumps({"query": "contract", "before": "2023-11-14"})),
             ("thread_search", json.dumps({"query": "the and of"})),
             ("thread_search", json.dumps({"query": "contract", "after": "last week"}))]
    model.push(Step(tool_calls=calls), Step(text="found it"))
    model.requests.clear()
    await p.submit(CONV, "hm, something about money?", author="carol", id="1700.009500")
    await p.run(CONV)
    results = [m["content"] for m in model.requests[1]["messages"] if m["role"] == "tool"]
    assert "[1700.000002] alice: The vendor contract renews on 2025-03-31" in await written(p, CONV, results[0])
    assert "1700.000002" not in results[1] and results[1].startswith("no earlier message matches")
    assert results[2].startswith("no earlier message matches"), "the thread's messages are from 2023-11-14 on"
    assert results[3] == "rejected: query has no words to search for (only common words)"
    assert results[4] == "rejected: after must be a date as YYYY-MM-DD, not 'last week'"
    assert all(p.tokenizer.count(r) <= p.executor.loop.tool_tokens for r in results)


def test_the_offline_model_is_not_offered_thread_search(prefix) -> None:
    p, _ = pipeline(prefix, settings={"ai_model": "offline/offline"})
    assert "thread_search" not in {s["function"]["name"] for s in p.executor.loop.tools.schemas()}


def test_the_runtime_context_a_call_carried_does_not_count_toward_the_next_request() -> None:
    from threadkeeper.persistence import (
        Checkpoint,
        CheckpointKind,
        CheckpointMeta,
        CheckpointOutcome,
        CheckpointStatus,
        History,
        Usage,
    )
    from threadkeeper.services.context import measure

    people = [msg("a", tokens=100), msg("b", tokens=200)]
    runtime = msg("[runtime context] … recalled …", role="system", tokens=900, runtime=True)
    reply = msg("answer", role="assistant", tokens=50)
    meta = CheckpointMeta(id="cp1", conversation_id="c", kind=CheckpointKind.TURN)
    outcome = CheckpointOutcome(usage=Usage(input_tokens=40 + 100 + 200 + 900), usage_covered_messages=3)
    history = History(checkpoint=Checkpoint(meta=meta, status=CheckpointStatus.COMPLETED, message_count=4,
                                            token_count=1250, outcome=outcome),
                      messages=[*people, runtime, reply], chain=["cp1"])
    assert measure(history, fixed_prompt_tokens=40) == 100 + 200 + 50


async def test_previews_call_no_model_unless_asked(model, prefix, client) -> None:
    summarizer = scripted("scripted-preview")
    summarizer.default = Step(text="- [1700.000000] The billing outage ticket is OPS-4471.")
    p, _ = pipeline(prefix, client, context_window=4096, settings={"ai_fast_model": "scripted-preview/test",
                                                                   "ai_fast_model_context_window_tokens": 4096})
    p.executor.assembler.header = fixed_runtime
    await _thread(p, FACTS)
    for i, text in enumerate(_filler(110, 10), start=10):  # pending in the inbox
        await p.submit(CONV, text, author="bob", id=f"1700.{i:06d}", reply_expected=False)
    p.executor.input.bounded = lambda items: items  # one turn takes the whole queue, so it compacts first
    model.requests.clear()
    summarizer.requests.clear()
    report = await p.context(CONV, arriving=[p.message("what was the billing ticket?")])
    assert report.would_compact and report.compaction.strategy == "notes"
    assert "no summarizer call" in report.compaction.notes[0]
    dry = await p.compact(CONV, dry_run=True)
    assert dry.strategy == "notes" and not summarizer.requests and not model.requests
    paid = await p.compact(CONV, dry_run=True, with_model=True)
    assert len(summarizer.requests) == 1 and paid.strategy in ("llm", "llm-partial", "notes-fallback")


async def test_a_message_the_handoff_cites_is_still_recalled_whole_when_the_question_is_about_it(
        model, prefix, client) -> None:
    """A handoff line holds part of what a message said; the question about it gets the message itself."""
    p = _pipeline(prefix, client)
    facts = [f"Deploy {i}: service billing-{i} moved to cluster c{i} after the quota review on floor {i}"
             for i in range(40)]
    await _thread(p, [*facts, *_filler(120)])
    standing = next(e for e in (await p.context(CONV)).context if e.text.startswith("[Threadkeeper handoff"))
    cited = [f"1700.{i:06d}" for i in range(40) if f"1700.{i:06d}" in standing.source_ids]
    assert cited, "the handoff cites some of the facts"
    target = int(cited[0].split(".")[1])
    report = await p.context(CONV, arriving=[p.message(
        f"which cluster did billing-{target} move to after the quota review?", author="carol")])
    runtime = report.context[-1]
    assert RECALL_HEADER in runtime.text and cited[0] in runtime.source_ids
    assert facts[target] in runtime.text, "recalled as written, though the handoff cites it"


async def test_a_long_best_hit_is_shown_as_its_passages_that_match_the_question(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    long = ("Postmortem for the checkout outage. Timeline: at 09:12 the payment worker started waiting on the "
            "ledger lock, the retry queue grew to 40,000 jobs, and card authorizations timed out for Europe. "
            "Support saw the first complaints at 09:20 and paged the on-call engineer, who restarted the workers "
            "twice without effect. The lock was held by a reporting query that someone had scheduled in the "
            "morning instead of at night; it scanned the whole ledger table without an index. At 10:05 the "
            "query was killed and the queue drained in eleven minutes. Customers who retried were charged "
            "once, and nobody was charged twice, because the idempotency keys held. What we change: reporting "
            "moves to the read replica, the ledger lock gets a five second timeout, the retry queue gets an "
            "alert at 5,000 jobs, and the runbook explains how to find the query holding a lock. The fix is "
            "ticket PAY-8812, owned by Omar; the replica move is ticket DATA-301, owned by Lena. " +
            " ".join(f"Appendix note {i}: the dashboards for region {i} were reviewed by the reliability group and "
                     f"nothing unusual was seen in the hour around the incident." for i in range(30)))
    await _thread(p, [long, *_filler(120)])
    report = await p.context(CONV, arriving=[p.message("what came out of the checkout outage "
                                                                     "postmortem?", author="carol")])
    runtime = report.context[-1]
    assert "1700.000000" in runtime.source_ids
    assert p.tokenizer.count(long) > p.budget.recall_tokens // 4, "longer than a best hit may be"
    line = next(x for x in runtime.text.splitlines() if "Postmortem for the checkout outage." in x)
    assert "… Customers who retried" not in line and "Support saw the first complaints" not in line, \
        "sentences that do not match the question are left out"
    assert line.rstrip().endswith("…"), "and the line says so"
    assert "characters" not in runtime.text and "cut …]" not in runtime.text, "nothing was cut mid-sentence"


async def test_a_question_with_more_to_recall_than_its_share_takes_the_room_of_the_handoffs_notes(
        model, prefix, client) -> None:
    """The handoff's notes were chosen before anyone asked; a question whose direct hits alone need more than
    recall's share gets their room, and the handoff keeps its standing part. A message that matches nothing keeps
    the notes."""
    p = _pipeline(prefix, client)
    facts = [f"Deploy {i}: service billing-{i} moved to cluster c{i} after the quota review on floor {i}"
             for i in range(60)]
    runbook = "https://wiki.example.com/ops/runbooks/quota-review-2024"
    facts[5] = f"the runbook we follow lives at {runbook}"
    await _thread(p, [*facts, *_filler(120)])
    standing = await p.context(CONV)
    handoff = next(e for e in standing.context if e.text.startswith("[Threadkeeper handoff"))
    assert "Notes (the most informative things said" in handoff.text
    asked = await p.context(CONV, arriving=[p.message(
        "which clusters did the billing services move to after the quota review?", author="carol")])
    focused = next(e for e in asked.context if e.text.startswith("[Threadkeeper handoff"))
    runtime = asked.context[-1]
    assert "Notes (the most informative things said" not in focused.text and focused.tokens < handoff.tokens
    assert runbook in focused.text, "a note that gives a reference stands: the question names what it is for"
    assert "handoff's notes are left out of this turn" in runtime.text
    assert runtime.tokens > p.budget.recall_tokens, "the block took the notes' room"
    assert asked.context_tokens <= p.budget.request_limit_tokens
    turn_sent = await _sent_by_a_turn(p, model, "which clusters did the billing services move to after the quota "
                                                "review?")
    assert not any("Notes (the most informative things said" in m for m in turn_sent), "the turn sends what the preview shows"
    thanks = await p.context(CONV, arriving=[p.message("thanks a lot!", author="carol")])
    kept = next(e for e in thanks.context if e.text.startswith("[Threadkeeper handoff"))
    assert "Notes (the most informative things said" in kept.text, "nothing to recall: the notes stay"


async def _sent_by_a_turn(p, model, text: str) -> list[str]:  # type: ignore[no-untyped-def]
    await p.submit(CONV, text, author="carol", id="1800.000001", created_at=1800000000)
    await p.run(CONV)
    return [str(m.get("content")) for m in model.requests[-1]["messages"]]


async def test_a_question_about_someone_recalls_their_messages_first(model, prefix, client) -> None:
    """By a word of their name, by a name people address them by, or by the asker's own "I"."""
    p = _pipeline(prefix, client)
    said = []
    for i in range(40):
        said.append(f"Katherine Mills: the garden plan for week {i} has tomatoes and basil")
        said.append(f"Bob Stone: the garden plan for week {i} has peppers and mint, thanks Kate!")
    texts = [*said, *_filler(120)]
    for i, text in enumerate(texts):
        author, words = text.split(": ", 1) if ": " in text[:20] else (("alice", "bob")[i % 2], text)
        await p.submit(CONV, words, author=author, id=f"1700.{i:06d}", created_at=1700000000 + i * 60)
        await p.run(CONV)
    index = p.recall.loaded(CONV)
    assert index is not None and index.named("what did Kate plan?") == {"Katherine Mills"}
    assert index.named("and Katherine?") == {"Katherine Mills"} and index.named("what did Stone plan?") == {"Bob Stone"}
    assert index.named("thanks, great plan") == set(), "greetings and praise name nobody"

    async def most_recalled(question: str, asker: str) -> str:
        report = await p.context(CONV, arriving=[p.message(question, author=asker)])
        # hits first in rank order are shown as written; later ones and every neighbour as their notes
        authors = Counter(m.group(1) for line in report.context[-1].text.splitlines()
                          if (m := re.match(r"^\[#\d+\] ([^:]+): the garden plan for week", line)))
        (first, n), *rest = authors.most_common(2)
        assert n > (rest[0][1] if rest else 0), authors
        return first

    assert await most_recalled("what is in the garden plan of Kate?", "carol") == "Katherine Mills"
    assert await most_recalled("what is in the garden plan of Bob?", "carol") == "Bob Stone"
    assert await most_recalled("what did I put in my garden plan?", "Bob Stone") == "Bob Stone"
    assert await most_recalled("what did I put in my garden plan?", "Katherine Mills") == "Katherine Mills"


async def test_a_message_a_compaction_kept_only_in_part_is_recalled_whole(model, prefix, client) -> None:
    p = _pipeline(prefix, client)
    said = [f"note {i}: " + "the migration of the archive volumes continues slowly " * 9 for i in range(60)]
    said[40] = ("The archive migration owner is Priya and the cutover is on the ninth; " +
                "the old volumes stay readable for a month while the archive migration runs " * 6)
    await _thread(p, said)
    history = await p.checkpoints.load_history(CONV)
    index = p.recall.loaded(CONV)
    assert index is not None
    cut = [m for m in history.messages if index.shortened(m)]
    assert cut, "the compaction kept its oldest message in part"
    target = cut[0]
    assert index.ids.find(target.id) >= 0
    original = index.body(index.ids.find(target.id)).text
    report = await p.context(CONV, arriving=[p.message(
        " ".join(original.split()[:12]) + "?", author="carol")])
    assert target.id in report.context[-1].source_ids, "what the context holds of it is not all it said"


async def test_a_turn_recalls_a_hits_neighbour_and_what_only_the_widened_query_finds(model, prefix, client) -> None:
    """Within a turn (not only on the index): the message next to a hit comes with it, and a message that shares
    no word with the question is found by the words of the question's best hit."""
    p = _pipeline(prefix, client)
    gap = _filler(3, 500)
    await _thread(p, ["The billing outage ticket is OPS-4471.",
                      "Yes, I will take that one tomorrow morning.",
                      *gap,
                      "Which board game should we play on Friday night?",
                      *gap,
                      "We play Gloomhaven on Friday night, the campaign is at scenario nine.",
                      *_filler(120)])
    history = await p.checkpoints.load_history(CONV)
    assert not any("Gloomhaven" in m.text or "tomorrow morning" in m.text
                   for m in history.messages if not m.flags.handoff), "both were folded out of the context"

    async def recalled(question: str, ident: str) -> str:
        model.requests.clear()
        await p.submit(CONV, question, author="carol", id=ident)
        await p.run(CONV)
        # (the turn's request: a compaction before it may have called the summarizer first)
        runtime = [m["content"] for r in model.requests for m in r["messages"] if RECALL_HEADER in str(m["content"])]
        assert runtime, "the turn carried recalled messages"
        return runtime[0]

    billing = await recalled("what was the ticket for the billing outage?", "1700.009998")
    assert "OPS-4471" in billing and "morning" in billing, "the hit's neighbour came with it"
    games = await recalled("what game do they like?", "1700.009999")
    assert "Gloomhaven" in games, "the widened query (play, Friday, night) found the answer"


async def test_a_hits_neighbour_is_the_next_persons_message_not_the_bots_reply(model, prefix, client) -> None:
    """The bot's own replies are recalled only when they are the hit: the neighbour slot next to a hit goes past
    the bot's reply to the next person's message, however long it is."""
    p = _pipeline(prefix, client)
    answer = ("Yes, I will take that one tomorrow morning, right after the stand-up, once the dashboards for the "
              "payment gateway have refreshed and the on-call rota for the coming weekend has been confirmed by "
              "everyone who is on it, so that nobody is paged twice while we dig through the logs.")
    await _thread(p, ["The billing outage ticket is OPS-4471.", answer, *_filler(120)])
    history = await p.checkpoints.load_history(CONV)
    assert not any("tomorrow morning" in m.text for m in history.messages if not m.flags.handoff)
    index = p.recall.loaded(CONV)
    assert index is not None and index.role(1) == "assistant", "the bot replied between the two"
    model.requests.clear()
    await p.submit(CONV, "what was the ticket for the billing outage?", author="carol", id="1700.009998")
    await p.run(CONV)
    # (the turn's request: a compaction before it may have called the summarizer first)
    runtime = next(str(m["content"]) for r in model.requests for m in r["messages"] if RECALL_HEADER in str(m["content"]))
    assert "OPS-4471" in runtime and "morning" in runtime, "the person's answer came with the hit"
    assert not re.search(r"\] assistant: noted", runtime), "the bot's reply took no neighbour slot"


async def test_a_hits_neighbour_is_the_reply_after_its_authors_own_next_message(model, prefix, client) -> None:
    """People split a thought over several messages: when the message next to a hit is its author's own, the next
    person's message comes with the hit too, however long it is (the reply to what matched)."""
    p = _pipeline(prefix, client)
    answer = ("Yes, I will take that one tomorrow morning, right after the stand-up, once the dashboards for the "
              "payment gateway have refreshed and the on-call rota for the coming weekend has been confirmed by "
              "everyone who is on it, so that nobody is paged twice while we dig through the logs.")
    for i, (author, text) in enumerate([("alice", "The billing outage ticket is OPS-4471."),
                                        ("alice", "Can somebody look at it?"), ("bob", answer)]):
        await p.submit(CONV, text, author=author, id=f"1699.{i:06d}", created_at=1699990000 + i * 60)
    await _thread(p, _filler(120))
    history = await p.checkpoints.load_history(CONV)
    assert not any("tomorrow morning" in m.text for m in history.messages if not m.flags.handoff)
    assert p.tokenizer.count(answer) > SHORT_TOKENS, "a long reply: the second message on its side"
    model.requests.clear()
    await p.submit(CONV, "what was the ticket for the billing outage?", author="carol", id="1700.009998")
    await p.run(CONV)
    runtime = next(str(m["content"]) for r in model.requests for m in r["messages"] if RECALL_HEADER in str(m["content"]))
    assert "OPS-4471" in runtime and "somebody" in runtime, "the hit and its author's next message"
    assert "morning" in runtime, "the other person's reply came with them"


async def test_a_hits_neighbour_is_the_reply_after_a_run_of_its_authors_own_messages(model, prefix, client) -> None:
    """The reply to what matched comes with the hit also when its author went on for more messages than a side's
    neighbours: the next person's message is looked for past them (a short one: it is the third on its side)."""
    p = _pipeline(prefix, client)
    for i, (author, text) in enumerate([("alice", "The billing outage ticket is OPS-4471."),
                                        ("alice", "Can somebody look at it?"), ("alice", "It blocks the invoices."),
                                        ("bob", "Sure, right after lunch.")]):
        await p.submit(CONV, text, author=author, id=f"1699.{i:06d}", created_at=1699990000 + i * 60)
    await _thread(p, _filler(120))
    history = await p.checkpoints.load_history(CONV)
    assert not any("after lunch" in m.text for m in history.messages if not m.flags.handoff)
    model.requests.clear()
    await p.submit(CONV, "what was the ticket for the billing outage?", author="carol", id="1700.009998")
    await p.run(CONV)
    runtime = next(str(m["content"]) for r in model.requests for m in r["messages"] if RECALL_HEADER in str(m["content"]))
    assert "OPS-4471" in runtime, "the hit"
    assert "lunch" in runtime, "the other person's reply after the author's own two more messages came with it"


async def test_a_worker_holding_the_index_takes_what_another_wrote_after_a_compaction(model, prefix, client) -> None:
    """A worker holding a thread's index takes in what another worker wrote meanwhile, also when compactions began new
    epochs in between: every message of the history it reads next is found by its number."""
    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(60)])
    other = _pipeline(prefix, client)
    before = await other.checkpoints.load_history(CONV)
    await other.recall.sync(CONV, before)
    await _thread(p, _filler(60, start=60), start=len(FACTS) + 60)
    after = await other.checkpoints.load_history(CONV)
    assert before.checkpoint.id not in after.chain, "a compaction began a new epoch meanwhile"
    known = {m.id for m in before.messages}
    written = [m for m in after.messages[:len(before.messages)]
               if m.role == "user" and m.ref and not m.flags.handoff and m.id not in known]
    assert written, "the new epoch holds messages the other worker wrote, where its last history had others"
    for m in written:
        found = await other.recall.resolve(CONV, after, f"#{m.ref}")
        assert found is not None and found.id == m.id


def _same_index(a: ConversationIndex, b: ConversationIndex) -> None:
    assert [a.card(p) for p in range(a.size)] == [b.card(p) for p in range(b.size)]
    assert [a.target(p) for p in range(a.size)] == [b.target(p) for p in range(b.size)]
    assert a.ids == b.ids and all(a.ids.find(i) == p for p, i in enumerate(b.ids)) and a.ref_map() == b.ref_map()
    assert [a.author(p) for p in range(a.size)] == [b.author(p) for p in range(b.size)]
    assert {who: list(a.written(who)) for who in a.people} == {who: list(b.written(who)) for who in b.people}
    assert a.names == b.names and a._capitalized == b._capitalized and a._vocative == b._vocative
    assert a.search.documents == b.search.documents and a.notes == b.notes and a._terms == b._terms
    # (an index built from the totals counted over its sealed epochs holds their terms only as it reads their bodies)
    assert len(a.search.terms) == len(b.search.terms)
    assert all(x == y or (a.totalled and x is None) for x, y in zip(a.search.terms, b.search.terms, strict=True))


async def _epochs_thread(p) -> None:  # type: ignore[no-untyped-def]
    """Facts, a name people address alice by (``Kate``), then enough to fold them over a few compactions."""
    garden = [t for i in range(8) for t in (f"the garden plan for week {i} has tomatoes and basil",
                                            f"peppers and mint for week {i} then, thanks Kate!")]
    await _thread(p, [*FACTS, *garden, *_filler(100)])


QUESTIONS = ["what is in the garden plan of Kate?", "what was the ticket for the billing outage?",
             "which region is the staging cluster in?", "when does the vendor contract renew?"]


@pytest.mark.parametrize("totals", [True, False], ids=["totals", "no-totals"])
async def test_a_cold_worker_reads_what_each_epoch_gave_the_index_and_recalls_what_deriving_it_gives(
        model, prefix, client, monkeypatch, totals: bool) -> None:
    """What the index derives from a sealed epoch's messages (their search terms, the names they hold) is stored
    once, by the turn after the compaction that sealed it, with the totals counted over every sealed epoch so far (the
    documents per term, the names learned), and a worker that starts cold reads those instead of deriving them again:
    with the totals it reads nothing derived from the sealed epochs at all; without them (a worker died before storing
    them) it reads what each epoch gave, and stores the totals. Its index, and what it recalls, are those of a worker
    that derived everything from the messages."""
    from threadkeeper.persistence import ConversationKeys
    from threadkeeper.services.recall import index as module
    from threadkeeper.services.recall import totals as stored_totals

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    history = await p.checkpoints.load_history(CONV)
    earlier = await p.checkpoints.earlier_epochs(CONV, history)
    key = ConversationKeys(prefix, CONV).recall
    assert key.startswith(f"{prefix}:{{{CONV}}}:"), "beside the conversation, in its hash slot"
    fields = {f.decode() for f in await client.hkeys(key)}
    assert len(earlier) >= 2 and {e.checkpoint.id for e in earlier} | {stored_totals.FIELD} == {
        f for f in fields if ":" not in f}, "each sealed epoch's, stored as it was sealed, and the totals"
    assert {f"{e.checkpoint.id}:p" for e in earlier} <= fields, "with its search segment"
    assert 0 < await client.ttl(key) <= p.checkpoints.retention_seconds
    counted = stored_totals.decode(await client.hget(key, stored_totals.FIELD))
    assert [epoch for epoch, _ in counted.epochs] == [e.checkpoint.id for e in reversed(earlier)], \
        "the totals name the sealed epochs, oldest first"
    assert [chain for _, chain in counted.epochs] == [e.chain for e in reversed(
        await p.checkpoints.epoch_chains(CONV, history))], "with their chains"
    if not totals:
        await client.hdel(key, stored_totals.FIELD)
    stored = await client.hgetall(key)
    derived: list[str] = []
    decoded: list[int] = []
    real, real_decode = module.derive, module.decode
    monkeypatch.setattr(module, "derive", lambda m: derived.append(m.id) or real(m))
    monkeypatch.setattr(module, "decode", lambda raw, ids: decoded.append(len(ids)) or real_decode(raw, ids))
    reader, deriver = _pipeline(prefix, client), _pipeline(prefix, client)
    deriver.recall.epochs = None
    for n, question in enumerate(QUESTIONS):
        derived.clear()
        got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
        if not n:
            # (and, with the totals, the best hits' terms from their bodies, for the widened query)
            assert 0 < len(derived) <= len(history.messages) + 1 + (module.FEEDBACK_HITS if totals else 0), \
                "only what the head's epoch holds is derived"
        expected = await deriver.context(CONV, arriving=[deriver.message(question, author="carol")])
        assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text
    cold, built = reader.recall.loaded(CONV), deriver.recall.loaded(CONV)
    assert cold is not None and built is not None
    _same_index(cold, built)
    assert cold.totalled == totals and (not decoded if totals else len(decoded) == len(earlier)), \
        "what was derived from the sealed epochs is read only without the totals"
    assert cold.named("what did Kate plan?") == {"alice"}, "a name learned from what was stored"
    now = await client.hgetall(key)
    assert stored_totals.decode(now.pop(stored_totals.FIELD.encode())) == counted, \
        "the totals of a worker that counted everything"
    stored.pop(stored_totals.FIELD.encode(), None)
    assert now == stored, "read, not written again"


async def test_what_is_stored_for_an_epoch_that_cannot_be_used_is_derived_again_with_one_log_line(
        model, prefix, client, monkeypatch, caplog) -> None:
    """A stored value cut short, one that is not what it claims, one derived by other rules (a changed term rule):
    each is derived again from the messages, with one log line, the turn goes on, and what it recalls is what deriving
    gives; the value is stored anew in its place."""
    import zlib

    from threadkeeper.persistence import ConversationKeys
    from threadkeeper.services.recall import derived as rules

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    key = ConversationKeys(prefix, CONV).recall
    await client.hdel(key, "totals")  # (with them, what was derived from the sealed epochs is not read at all)
    stored = await client.hgetall(key)
    derived = sorted(f for f in stored if b":" not in f)
    first, second, *rest = derived
    await client.hset(key, first, stored[first][:len(stored[first]) // 2])
    await client.hset(key, second, zlib.compress(zlib.decompress(stored[second])[:-40]))
    deriver = _pipeline(prefix, client)
    deriver.recall.epochs = None
    reader = _pipeline(prefix, client)
    with caplog.at_level("INFO", logger="threadkeeper.recall"):
        got = await reader.context(CONV, arriving=[reader.message(QUESTIONS[0], author="carol")])
    expected = await deriver.context(CONV, arriving=[deriver.message(QUESTIONS[0], author="carol")])
    assert got.context[-1].text == expected.context[-1].text
    lines = [r.getMessage() for r in caplog.records if r.name == "threadkeeper.recall"]
    assert len(lines) == 1 and "for 2 of" in lines[0] and "deriving it again" in lines[0], lines
    now = await client.hgetall(key)
    assert now.pop(b"totals") and now == stored, "stored anew, as it was, and the totals counted"
    # the term rule changes: what was stored under the old one is derived again, never read as if it were new
    real = rules.search_terms
    monkeypatch.setattr(rules, "search_terms", lambda text: (*real(text), "x"))
    rules.rules.cache_clear()
    try:
        caplog.clear()
        later = _pipeline(prefix, client)
        with caplog.at_level("INFO", logger="threadkeeper.recall"):
            await later.recall.sync(CONV, await later.checkpoints.load_history(CONV))
        [line] = [r.getMessage() for r in caplog.records if r.name == "threadkeeper.recall"]
        assert f"for {len(derived)} of {len(derived)} epochs" in line and "derived otherwise" in line
        index = later.recall.loaded(CONV)
        assert index is not None and all(t[-1:] == ("x",) for t in index.search.terms)
    finally:
        rules.rules.cache_clear()


async def test_a_cold_worker_searches_each_sealed_epoch_through_its_stored_segment_reading_only_the_questions_terms(
        model, prefix, client, monkeypatch) -> None:
    """Each sealed epoch's search segment (its postings and its documents' lengths) is stored beside what was derived
    from it, made by the rule every segment is made by. A worker that starts cold builds no segment for those epochs:
    it reads each epoch's header with what was derived, then, for its first question, only the buckets that hold its
    terms and its widened query's; from its next turn on it searches them in memory. It scores and recalls exactly
    what a worker that built every segment does."""
    from threadkeeper.persistence import ConversationKeys
    from threadkeeper.services.recall import postings as stored_form

    monkeypatch.setattr(stored_form, "TERMS_PER_BUCKET", 1)  # many buckets, so what is not read shows
    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    history = await p.checkpoints.load_history(CONV)
    sealed = {e.checkpoint.id for e in await p.checkpoints.earlier_epochs(CONV, history)}
    key = ConversationKeys(prefix, CONV).recall
    buckets = [f.decode() for f in await client.hkeys(key) if f.count(b":") == 2]
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    asked = fields_read(reader.recall, monkeypatch)
    for n, question in enumerate(QUESTIONS):
        got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
        expected = await builder.context(CONV, arriving=[builder.message(question, author="carol")])
        assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text
        index, built = reader.recall.loaded(CONV), builder.recall.loaded(CONV)
        assert index is not None and built is not None
        terms = list(search_terms(question))
        assert index.scores(terms) == built.scores(terms), "the same scores, to the last bit"
        if n:
            continue
        assert {s.stored for s in index.search.stored} == sealed and not built.search.stored, \
            "no segment built for a sealed epoch"
        assert asked[0] == ["totals", "runs"], \
            "first the totals counted over the sealed epochs (they name them), and the runs they are stored in"
        assert asked[1] and all(f.endswith((":p", ":c")) for f in asked[1]), \
            "then the headers, with the cards (nothing derived from the epochs)"
        read = [f for fields in asked[2:] for f in fields]
        assert read and set(read) <= set(buckets) and len(set(read)) < len(buckets) / 3, "the question's buckets only"
        for segment in index.search.stored:
            assert segment.stored is not None
            form = index.forms[segment.stored]
            wanted = {stored_form.bucket_of(t, form.buckets) for t in segment.read}
            assert {int(f.rsplit(":", 1)[1]) for f in read if f.startswith(segment.stored + ":")} <= wanted
            assert set(segment.postings) <= segment.read, "postings held only for the terms asked"
    # a turn later, the sealed epochs are searched in memory
    await _thread(p, ["one more word about the garden plan"], start=1_000)
    later = await p.checkpoints.load_history(CONV)
    index, built = await reader.recall.sync(CONV, later), await builder.recall.sync(CONV, later)
    assert not index.search.stored and index.search.segments
    terms = list(search_terms(QUESTIONS[0]))
    assert index.scores(terms) == built.scores(terms)


async def test_a_question_whose_direct_hits_take_the_room_makes_no_widened_query(
        model, prefix, client, monkeypatch) -> None:
    """Nothing after a question's direct hits is shown once they have taken recall's room. A worker places them first
    when they may take it all, and makes the widened query only when room is left: one that starts cold (its sealed
    epochs searched where they are stored) reads the postings of the question's own terms only, not the widened
    query's (ten terms from every stored segment), and shows what a worker that read every message shows, which does
    not score the widened query either. A question that leaves room still reads and scores it."""
    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    builder = _pipeline(prefix, client)
    builder.recall.epochs = None
    widenings: list[bool] = []
    feedback = ConversationIndex.feedback

    def counted(self, ranked, query):  # type: ignore[no-untyped-def]
        widenings.append(self.totalled)
        return feedback(self, ranked, query)

    monkeypatch.setattr(ConversationIndex, "feedback", counted)
    for question, widened in (("any status update about the weather, the lunch and the pastries?", False),
                              ("which region is the staging cluster in?", True)):
        reader = _pipeline(prefix, client)
        asked: list[list[str]] = []
        real = reader.recall._postings

        async def postings(conversation_id, index, terms, real=real, asked=asked):  # type: ignore[no-untyped-def]
            asked.append(list(terms))
            return await real(conversation_id, index, terms)

        monkeypatch.setattr(reader.recall, "_postings", postings)
        got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
        expected = await builder.context(CONV, arriving=[builder.message(question, author="carol")])
        assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text, question
        assert asked[0] == list(search_terms(question))
        assert (len(asked) == 2 and bool(asked[1])) == widened, (question, asked)
        assert widenings == ([True, False] if widened else []), "the worker that read every message, the same"
        widenings.clear()


async def test_a_cold_worker_whose_direct_hits_cannot_fit_still_shows_the_widened_querys(model, prefix, client) -> None:
    """A question's direct hits that may take all of recall's room are placed first by a worker that starts cold; when
    they leave room (the long ones cannot fit), the widened query (the words the best hits share) is read and searched
    after all, and what it finds is shown as a worker that read every message shows it."""
    p = _pipeline(prefix, client)
    words = "copper lantern meadow river quartz violet harbor canyon ember willow falcon marble".split()
    long = [f"Orchard report {i}: alpha beta harvest " + " ".join(f"{w}{i}x{j}" for j in range(14) for w in words)
            for i in range(8)]
    await _thread(p, [*long, *_filler(45), "the orchard harvest crates went to the cold store", *_filler(45, 45)])
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    question = "how did the alpha beta rows do?"
    got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
    expected = await builder.context(CONV, arriving=[builder.message(question, author="carol")])
    index = reader.recall.loaded(CONV)
    assert index is not None and index.search.stored, "searched where the sealed epochs are stored"
    assert "harvest crates" in expected.context[-1].text, "found by the widened query (no neighbour of a hit)"
    assert got.context[-1].text == expected.context[-1].text


async def test_a_cold_workers_first_turn_builds_the_sealed_epochs_in_memory_after_its_reply(model, prefix,
                                                                                           client) -> None:
    """A worker that starts cold searches the sealed epochs where they are stored for its first turn; once that turn's
    reply is out, it builds them in memory, so its next turn reads no postings and builds nothing before it answers;
    what it recalls stays what a worker that read every message recalls."""
    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    await reader.submit(CONV, QUESTIONS[1], author="carol", id="1800.000001")
    await reader.run(CONV)
    index = reader.recall.loaded(CONV)
    assert index is not None and index.totalled and not index.search.stored and index.search.segments, \
        "built in memory after the reply"
    read: list[list[str]] = []
    stored = reader.recall.epochs
    assert stored is not None
    get = stored.get

    async def counted(conversation_id: str, fields: list[str]) -> dict[str, bytes]:
        read.append(fields)
        return await get(conversation_id, fields)

    stored.get = counted  # type: ignore[method-assign]
    built: list[int] = []
    build = index.search.build_stored
    index.search.build_stored = lambda: (built.append(1), build())[1]  # type: ignore[method-assign]
    got = await reader.context(CONV, arriving=[reader.message(QUESTIONS[0], author="carol")])
    expected = await builder.context(CONV, arriving=[builder.message(QUESTIONS[0], author="carol")])
    assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text
    assert reader.recall.loaded(CONV) is index and not read and not built, "the next turn reads and builds nothing"


async def test_a_store_outage_after_a_cold_reply_leaves_the_build_to_the_next_turn(model, prefix, client, caplog,
                                                                                  monkeypatch) -> None:
    """Redis unreachable while the sealed epochs would be built in memory after a cold worker's reply: the turn is
    answered all the same, one line says so, and the next turn builds them and recalls what a worker that read every
    message recalls."""
    from threadkeeper.persistence import StoreUnavailableError

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    stored = reader.recall.epochs
    assert stored is not None
    get, after = stored.get, reader.recall.after_reply
    down = False

    async def flaky(conversation_id: str, fields: list[str]) -> dict[str, bytes]:
        if down:
            raise StoreUnavailableError("redis: connection refused")
        return await get(conversation_id, fields)

    async def outage_after(conversation_id: str) -> None:  # (Redis down once the reply is out)
        nonlocal down
        down = True
        try:
            await after(conversation_id)
        finally:
            down = False

    monkeypatch.setattr(stored, "get", flaky)
    monkeypatch.setattr(reader.recall, "after_reply", outage_after)
    await reader.submit(CONV, QUESTIONS[1], author="carol", id="1800.000001")
    results = await reader.run(CONV)
    assert results and results[-1].status == "completed"
    index = reader.recall.loaded(CONV)
    assert index is not None and index.search.stored, "not built: Redis was down"
    assert "built in memory by the next turn" in caplog.text
    got = await reader.context(CONV, arriving=[reader.message(QUESTIONS[0], author="carol")])
    expected = await builder.context(CONV, arriving=[builder.message(QUESTIONS[0], author="carol")])
    assert got.context[-1].text == expected.context[-1].text and not index.search.stored


def _on_the_loop(monkeypatch, module, name: str) -> list[bool]:  # type: ignore[no-untyped-def]
    """Whether each call of ``module.name`` ran on the main thread (the event loop's), in order."""
    import threading

    where: list[bool] = []
    original = getattr(module, name)

    def watched(*args):  # type: ignore[no-untyped-def]
        where.append(threading.current_thread() is threading.main_thread())
        return original(*args)

    monkeypatch.setattr(module, name, watched)
    return where


async def test_a_cold_workers_index_is_built_in_a_thread_when_it_is_large(model, prefix, client, monkeypatch) -> None:
    """Indexing more than ``OFF_LOOP`` messages at once (a cold worker's first turn in a long thread) runs in a thread,
    so the event loop acknowledges other conversations' events meanwhile (the threshold lowered to this thread's size)."""
    from threadkeeper.services.recall import index as recall_index

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    history = await p.checkpoints.load_history(CONV)
    assert len(await p.checkpoints.epoch_chains(CONV, history)) >= 3
    where = _on_the_loop(monkeypatch, recall_index, "_add_all")
    trimmed = _on_the_loop(monkeypatch, recall_index, "_trim")
    monkeypatch.setattr(recall_index, "OFF_LOOP", 20)
    cold = _pipeline(prefix, client)
    index = await cold.recall.sync(CONV, history)
    assert index.size > 20 and where == [False], "built once, in a thread"
    assert trimmed == [False], "then what the build freed given back to the system, in that thread"


async def test_a_cold_workers_first_question_decodes_many_epochs_postings_in_a_thread(model, prefix, client,
                                                                                       monkeypatch) -> None:
    """A question whose postings come from more than ``OFF_LOOP_BUCKETS`` stored buckets (hundreds of epochs) decodes
    them in a thread, off the event loop (the threshold lowered to this thread's size); what it finds is the same."""
    from threadkeeper.services.recall import index as recall_index

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    history = await p.checkpoints.load_history(CONV)
    question = [msg(QUESTIONS[0], author="carol")]
    on_loop = await _pipeline(prefix, client).recall.recall(CONV, history, [], question, 2000)
    where = _on_the_loop(monkeypatch, recall_index, "_take_postings")
    monkeypatch.setattr(recall_index, "OFF_LOOP_BUCKETS", 0)
    found = await _pipeline(prefix, client).recall.recall(CONV, history, [], question, 2000)
    assert where and not any(where), "decoded in a thread"
    assert found.text == on_loop.text and "garden plan" in found.text


@pytest.mark.parametrize("totals", [True, False], ids=["totals", "no-totals"])
async def test_a_cold_worker_reads_no_earlier_epoch_whole_and_reads_a_body_only_when_a_turn_may_show_it(
        model, prefix, client, monkeypatch, totals: bool) -> None:
    """Whoever derives a sealed epoch also stores its messages' cards (id, role, author, reference, when sent, tokens).
    A worker that starts cold indexes the earlier epochs from their cards and what was derived, reads none of them
    whole, and reads a message's body only when a turn may show it (the best candidates and their neighbours, each
    once); it recalls exactly what a worker that read every message recalls, and its index is that worker's."""
    from threadkeeper.persistence import ConversationKeys

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    history = await p.checkpoints.load_history(CONV)
    sealed = await p.checkpoints.epoch_chains(CONV, history)
    key = ConversationKeys(prefix, CONV).recall
    stored = await client.hgetall(key)
    assert len(sealed) >= 3 and {f"{e.id}:c".encode() for e in sealed} <= set(stored), "each sealed epoch's cards"
    if not totals:  # (each epoch then taken from its cards and what was derived from it, one at a time)
        await client.hdel(key, "totals")
        stored.pop(b"totals")
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    store = reader.recall.checkpoints
    whole: list[object] = []
    places: list[tuple[str, int]] = []
    read_whole, read_places = store.epoch_messages, store.messages_in_place

    async def epoch_messages(conversation_id, chains):  # type: ignore[no-untyped-def]
        whole.extend(chains)
        return await read_whole(conversation_id, chains)

    async def messages_in_place(conversation_id, wanted):  # type: ignore[no-untyped-def]
        places.extend(wanted)
        return await read_places(conversation_id, wanted)

    monkeypatch.setattr(store, "epoch_messages", epoch_messages)
    monkeypatch.setattr(store, "messages_in_place", messages_in_place)
    shown: set[str] = set()
    for n, question in enumerate(QUESTIONS):
        got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
        expected = await builder.context(CONV, arriving=[builder.message(question, author="carol")])
        assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text
        shown |= set(got.context[-1].source_ids)
        if not n:
            earlier = sum(count for e in sealed for _, count in e.chain)
            assert places and len(places) < earlier / 2, (len(places), earlier)
    assert not whole, "no earlier epoch read whole"
    assert len(places) == len(set(places)), "each body read once"
    index, built = reader.recall.loaded(CONV), builder.recall.loaded(CONV)
    assert index is not None and built is not None
    _same_index(index, built)
    unread = {index.ids[at] for at in index.placed_positions() if index.bodies[at] is None}
    assert unread and not unread & shown, "what was shown was read"
    now = await client.hgetall(key)
    if not totals:  # (the totals are stored by the worker that counted them)
        assert now.pop(b"totals")
    assert now == stored, "read, not written again"


async def _recalled_as_derived_anew(prefix, client, caplog):  # type: ignore[no-untyped-def]
    """A reader's context for the first question beside a worker's that derives every epoch from its messages: the
    same recalled block (checked here); the reader and the recall log lines it wrote."""
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    with caplog.at_level("INFO", logger="threadkeeper.recall"):
        got = await reader.context(CONV, arriving=[reader.message(QUESTIONS[0], author="carol")])
    expected = await builder.context(CONV, arriving=[builder.message(QUESTIONS[0], author="carol")])
    assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text
    return reader, [r.getMessage() for r in caplog.records if r.name == "threadkeeper.recall"]


async def test_cards_that_cannot_be_used_are_made_again_from_the_epochs_messages(model, prefix, client,
                                                                                 caplog) -> None:
    """Cards cut short, or that say they were made for another epoch's chain, are not used: that epoch's messages are
    read, with one log line, what is recalled does not change, and the cards are stored anew in their place. Cards
    never stored (an epoch sealed before they were) are made by the first worker that reads the epoch, without a log
    line."""
    import zlib

    from threadkeeper.persistence import ConversationKeys

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    key = ConversationKeys(prefix, CONV).recall
    stored = await client.hgetall(key)
    first, second, third = sorted(f for f in stored if f.endswith(b":c"))[:3]
    await client.hset(key, first, stored[first][:len(stored[first]) // 2])
    _, *fields = zlib.decompress(stored[second]).split(b"\n")
    await client.hset(key, second, zlib.compress(b"\n".join([zlib.decompress(stored[third]).split(b"\n")[0], *fields])))
    await client.hdel(key, third)
    reader, lines = await _recalled_as_derived_anew(prefix, client, caplog)
    assert len(lines) == 1 and "for 2 of" in lines[0] and "the cards of epoch" in lines[0], lines
    assert await client.hgetall(key) == stored, "made again, in place and where none was"


async def test_a_stored_segment_that_cannot_be_used_is_built_from_the_messages_and_stored_again(
        model, prefix, client, caplog) -> None:
    """A segment header cut short is found when the index is built, a corrupt bucket when a question reads it: either
    way that epoch's segment is built from its messages, with one log line, what is recalled does not change, and
    what is stored is made again (at once for the header; by the next worker that builds the index for the bucket,
    whose fields are removed meanwhile). Forgetting the conversation removes it all."""
    import zlib

    from threadkeeper.persistence import ConversationKeys

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    key = ConversationKeys(prefix, CONV).recall
    stored = await client.hgetall(key)
    first, second = sorted(f for f in stored if b":" not in f)[:2]
    await client.hset(key, first + b":p", stored[first + b":p"][:12])
    for field in (f for f in stored if f.startswith(second + b":p:")):
        await client.hset(key, field, zlib.compress(b"not a bucket"))
    reader, lines = await _recalled_as_derived_anew(prefix, client, caplog)
    assert len(lines) == 2 and "for 1 of" in lines[0] and "segment of 1 of" in lines[1], lines
    assert await client.hget(key, first + b":p") == stored[first + b":p"], "the header made again in its place"
    assert not [f for f in await client.hkeys(key) if f.startswith(second + b":p")], "the unusable segment removed"
    index = reader.recall.loaded(CONV)
    assert index is not None and second.decode() not in {s.stored for s in index.search.stored}
    later = _pipeline(prefix, client)
    await later.context(CONV, arriving=[later.message(QUESTIONS[1], author="carol")])
    assert await client.hgetall(key) == stored, "made again by the next worker that builds the index"
    await p.forget(CONV)
    assert not await client.exists(key)


EVENT_QUESTIONS = ["what did we say before the billing outage?", "what happened after the recording session?"]


async def test_a_cold_worker_with_the_totals_recalls_what_a_worker_that_read_every_message_does(
        model, prefix, client) -> None:
    """With the totals, a cold worker holds no term of a sealed message: each sealed epoch's postings are read from its
    stored segment (for a question's terms, then every one when the segments are built in memory), the best hits' terms
    from their bodies (the widened query), and a question placed against an event ("before the billing outage") finds
    the event in the postings. Turn after turn it recalls what a worker that read every message recalls, scoring each
    message the same to the last bit."""
    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    spoken = []
    for turn in range(2):
        if turn:  # a turn later, the sealed epochs are searched in memory
            await _thread(p, ["one more word about the garden plan"], start=1_000)
        for question in [*EVENT_QUESTIONS, *QUESTIONS]:
            got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
            expected = await builder.context(CONV, arriving=[builder.message(question, author="carol")])
            assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text, question
            index, built = reader.recall.loaded(CONV), builder.recall.loaded(CONV)
            assert index is not None and built is not None and index.totalled
            assert bool(index.search.stored) == (not turn)
            terms = list(search_terms(question))
            assert index.scores(terms) == built.scores(terms), "the same scores, to the last bit"
            events = named_events(question)
            assert [index.search.holding(t) for _, t in events] == [built.search.holding(t) for _, t in events]
            assert index.event_spans(events) == built.event_spans(events)
            spoken.append(bool(index.event_spans(events)))
    assert any(spoken), "an event the thread spoke of"
    assert None in index.search.terms, "built in memory from the stored postings, not from terms"
    _same_index(index, built)
    vocabulary = [term for term, n in built.search.documents.items() if n > 0]
    # (a sealed message the context still holds, one a compaction retained, is searchable through its stored segment
    # and still pending in an index built from the terms: it is not shown either way)
    sealed = set(index.placed_positions()) - set(built.search.pending)

    def postings(of: ConversationIndex, term: str) -> list[tuple[float, int]]:
        return [(score, at) for score, at in of.search.scores([term]) if at in sealed]

    assert all(postings(index, term) == postings(built, term) for term in vocabulary), \
        "every term's postings as building them from the terms gives"


async def test_a_cold_worker_takes_older_totals_for_the_epochs_they_name_and_derives_those_sealed_since(
        model, prefix, client, monkeypatch) -> None:
    """Totals stored before the newest epochs were sealed (the worker that sealed them died before it stored their
    totals): a cold worker walks the lineage back to the newest epoch the totals name and no further, takes the totals
    for the epochs they name (nothing derived from those read) and derives the epochs sealed since; it recalls what a
    worker that read every message recalls, and stores the totals of every sealed epoch."""
    from threadkeeper.persistence import ConversationKeys
    from threadkeeper.services.recall import index as module
    from threadkeeper.services.recall import totals as stored_totals

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    key = ConversationKeys(prefix, CONV).recall
    older = await client.hget(key, stored_totals.FIELD)
    assert older is not None
    before = await p.checkpoints.load_history(CONV)
    await _thread(p, _filler(60, start=200), start=1_000)
    history = await p.checkpoints.load_history(CONV)
    assert before.checkpoint.id not in history.chain, "a compaction sealed another epoch meanwhile"
    newest = await client.hget(key, stored_totals.FIELD)
    named = [epoch for epoch, _ in stored_totals.decode(older).epochs]
    sealed = [e.id for e in reversed(await p.checkpoints.epoch_chains(CONV, history))]
    assert sealed[:len(named)] == named and len(sealed) > len(named)
    await client.hset(key, stored_totals.FIELD, older)
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    walked: list[int] = []
    decoded: list[int] = []
    real_walk, real_decode = reader.checkpoints.epoch_chains, module.decode

    async def epoch_chains(*args, **kwargs):  # type: ignore[no-untyped-def]
        found = await real_walk(*args, **kwargs)
        walked.append(len(found))
        return found

    monkeypatch.setattr(reader.checkpoints, "epoch_chains", epoch_chains)
    monkeypatch.setattr(module, "decode", lambda raw, ids: decoded.append(len(ids)) or real_decode(raw, ids))
    for question in QUESTIONS:
        got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
        expected = await builder.context(CONV, arriving=[builder.message(question, author="carol")])
        assert got.context[-1].text == expected.context[-1].text and RECALL_HEADER in got.context[-1].text, question
    assert walked[0] == len(sealed) - len(named), "walked back to the newest epoch the totals name, no further"
    assert len(decoded) == len(sealed) - len(named), "what was derived read only for the epochs sealed since"
    index, built = reader.recall.loaded(CONV), builder.recall.loaded(CONV)
    assert index is not None and built is not None and index.totalled
    _same_index(index, built)
    assert await client.hget(key, stored_totals.FIELD) == newest, "the totals of every sealed epoch stored again"


@pytest.mark.parametrize("how", ["cut short", "miscounted", "miscounted again"])
async def test_totals_that_cannot_be_used_are_counted_again(model, prefix, client, caplog, monkeypatch,
                                                            how: str) -> None:
    """Totals cut short are not used (what was derived from the epochs is read instead, and the totals stored anew);
    totals that claim more messages than the cards hold are found once the cards are added: one log line, they are
    removed, and the epochs derived again, without reading totals a second time (another worker may have stored such
    totals again meanwhile). Either way what is recalled does not change."""
    import zlib

    from threadkeeper.persistence import ConversationKeys, EpochIndexStore
    from threadkeeper.services.recall import totals as stored_totals

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    key = ConversationKeys(prefix, CONV).recall
    raw = await client.hget(key, stored_totals.FIELD)
    assert raw is not None
    if how == "cut short":
        await client.hset(key, stored_totals.FIELD, raw[:len(raw) // 2])
    else:
        lines = zlib.decompress(raw).decode().split("\n")
        words = lines[0].split(" ")
        words[5] = str(int(words[5]) + 1)
        await client.hset(key, stored_totals.FIELD, zlib.compress("\n".join([" ".join(words), *lines[1:]]).encode()))
    if how == "miscounted again":  # (the removal is undone at once, as if another worker stored them again)
        async def kept(self, conversation_id, fields):  # type: ignore[no-untyped-def]
            return None

        monkeypatch.setattr(EpochIndexStore, "drop", kept)
    reader, lines = await _recalled_as_derived_anew(prefix, client, caplog)
    index = reader.recall.loaded(CONV)
    assert index is not None and not index.totalled
    if how == "cut short":
        assert not lines
    else:
        assert len(lines) == 1 and "disagree with their cards" in lines[0], lines
    assert await client.hget(key, stored_totals.FIELD) == raw, "counted again, and stored as it was"


async def test_a_corrupt_bucket_of_a_cold_worker_with_the_totals_is_built_from_its_messages_bodies(
        model, prefix, client, caplog) -> None:
    """When a cold worker holds no term of a sealed message (the totals were read), a stored bucket that cannot be
    used, on the first question or when the segments are built in memory, makes that epoch's segment from its
    messages' bodies: one log line each, and what is recalled does not change."""
    import zlib

    from threadkeeper.persistence import ConversationKeys

    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    key = ConversationKeys(prefix, CONV).recall
    stored = await client.hgetall(key)
    first, second = sorted(f for f in stored if b":" not in f and f != b"totals")[:2]

    async def corrupt(epoch: bytes) -> None:
        for field in (f for f in stored if f.startswith(epoch + b":p:")):
            await client.hset(key, field, zlib.compress(b"not a bucket"))

    await corrupt(first)  # (read for the first question)
    reader, builder = _pipeline(prefix, client), _pipeline(prefix, client)
    builder.recall.epochs = None
    with caplog.at_level("INFO", logger="threadkeeper.recall"):
        for turn in range(2):
            if turn:  # (read when the segments are built in memory from every stored posting)
                await corrupt(second)
                await _thread(p, ["one more word about the garden plan"], start=1_000)
            for question in QUESTIONS:
                got = await reader.context(CONV, arriving=[reader.message(question, author="carol")])
                expected = await builder.context(CONV, arriving=[builder.message(question, author="carol")])
                assert got.context[-1].text == expected.context[-1].text, question
    lines = [r.getMessage() for r in caplog.records if r.name == "threadkeeper.recall"]
    assert len(lines) == 2 and all("segment of 1 of" in line for line in lines), lines
    index, built = reader.recall.loaded(CONV), builder.recall.loaded(CONV)
    assert index is not None and built is not None and index.totalled and not index.search.stored
    _same_index(index, built)


class _Encoded:
    """A tokenizer's encoder that notes every text it encodes."""

    def __init__(self, encoder) -> None:  # type: ignore[no-untyped-def]
        self.encoder = encoder
        self.texts: list[str] = []

    def encode(self, text, **kwargs):  # type: ignore[no-untyped-def]
        self.texts.append(text)
        return self.encoder.encode(text, **kwargs)


def model_tokenizer(prefix, client):  # type: ignore[no-untyped-def]
    return _pipeline(prefix, client).executor.assembler.tokenizer


def _recalled_lines(text: str) -> list[str]:
    """The recalled messages' lines of a runtime context, each with its line break (the last one has none)."""
    lines = text.split("\n")
    return [line + ("\n" if n < len(lines) - 1 else "") for n, line in enumerate(lines) if line.startswith("[#")]


async def test_a_turn_counts_the_lines_it_recalls_from_the_counts_stored_with_their_messages(
        model, prefix, client) -> None:
    from threadkeeper.services.models import MESSAGE_OVERHEAD, Tokenizer
    from threadkeeper.services.models.tokens import LINES_FROM

    p = _pipeline(prefix, client)
    await _thread(p, [*FACTS, *_filler(120)])
    tokenizer = p.executor.assembler.tokenizer
    assert tokenizer.sums_lines
    history = await p.checkpoints.load_history(CONV)
    said = [m for m in history.messages if m.role in ("user", "assistant") and m.ref and not m.flags.handoff]
    assert {m.role for m in said} == {"user", "assistant"}
    for m in said:  # counted when its turn committed, as the line recall shows reads
        whole = f"[#{m.ref}] {m.author or 'assistant'}: {' '.join(m.text.split())}\n"
        note = tokenizer.count(f"[#{m.ref}] {m.author or 'assistant'}: {m.note}\n") if m.note else 0
        assert m.line_tokens == {tokenizer.name: [tokenizer.count(whole), note]}
    cold = _pipeline(prefix, client)  # (nothing counted in this process's caches)
    encoder = cold.executor.assembler.tokenizer.encoder = _Encoded(tokenizer.encoder)
    runtime = (await cold.context(CONV, arriving=[cold.message("any status update about the pastries?",
                                                               author="carol")])).context[-1]
    recalled = _recalled_lines(runtime.text)
    assert len(recalled) >= 5 and len(runtime.text) > LINES_FROM
    assert not set(recalled[:-1]) & set(encoder.texts), "a recalled line is not counted again"
    assert runtime.tokens == MESSAGE_OVERHEAD + Tokenizer(tokenizer.model).count(runtime.text)


@pytest.mark.parametrize("foreign", [False, True], ids=["none", "another tokenizer's"])
async def test_lines_of_messages_written_without_this_tokenizers_counts_are_counted_when_recalled(
        model, prefix, client, monkeypatch, foreign) -> None:
    from threadkeeper.services.models import MESSAGE_OVERHEAD, Tokenizer
    from threadkeeper.services.models.tokens import LINE_BREAKING, LINES_FROM
    from threadkeeper.services.turn import input as turn_input
    from threadkeeper.services.turn import loop as turn_loop

    other = next(name for name in sorted(LINE_BREAKING) if name != model_tokenizer(prefix, client).name)
    stored = {other: [1, 1]} if foreign else {}

    def earlier(message, tokenizer):  # type: ignore[no-untyped-def]
        return message.model_copy(update={"line_tokens": stored})

    with monkeypatch.context() as m:  # the thread as an earlier version (or a worker of another model) wrote it
        m.setattr(turn_input, "line_counted", earlier)
        m.setattr(turn_loop, "line_counted", earlier)
        p = _pipeline(prefix, client)
        await _thread(p, [*FACTS, *_filler(120)])
    tokenizer = p.executor.assembler.tokenizer
    assert all(m.line_tokens == stored for m in (await p.checkpoints.load_history(CONV)).messages
               if m.role == "user" and m.ref and not m.flags.handoff)
    cold = _pipeline(prefix, client)
    encoder = cold.executor.assembler.tokenizer.encoder = _Encoded(tokenizer.encoder)
    runtime = (await cold.context(CONV, arriving=[cold.message("any status update about the pastries?",
                                                               author="carol")])).context[-1]
    recalled = _recalled_lines(runtime.text)
    assert len(recalled) >= 5 and len(runtime.text) > LINES_FROM
    assert set(recalled) <= set(encoder.texts), "each recalled line is counted as the model counts it"
    assert runtime.tokens == MESSAGE_OVERHEAD + Tokenizer(tokenizer.model).count(runtime.text)


def test_a_message_counted_again_drops_the_counts_of_the_lines_it_no_longer_reads() -> None:
    from threadkeeper.persistence import TextPart
    from threadkeeper.services.models import tokenizer_for
    from threadkeeper.services.recall import line_counted

    tokenizer = tokenizer_for("gpt-4o")
    said = tokenizer.counted(msg("the first version of a long message", id="1700.1")).model_copy(update={"ref": 3})
    said = line_counted(said, tokenizer)
    assert said.line_tokens == {tokenizer.name: [tokenizer.count("[#3] U1: the first version of a long message\n"), 0]}
    cut = tokenizer.counted(said.model_copy(update={"parts": [TextPart(text="the first … message")]}))
    assert cut.line_tokens == {}, "a copy that reads otherwise (a compaction cut it) carries no counts of the old text"


def _unread(index: ConversationIndex, positions: list[int]) -> None:
    """The messages at ``positions`` as a worker that starts cold holds them: their cards, not their bodies."""
    for at in positions:
        index.bodies[at] = None
        index.places[at] = ("cp", at)


def test_a_candidate_whose_line_cannot_fit_is_passed_without_its_body(model, prefix, client) -> None:
    """Once the room left is less than what a candidate's line costs (its card says so: its tokens, its note's),
    recall passes it without reading its body and goes on to a later one that fits; a candidate that may fit is read
    (:class:`Unread` until it is)."""
    from threadkeeper.services.recall.index import Unread

    recall = _pipeline(prefix, client).recall
    assert recall is not None
    index = ConversationIndex()
    wordy = [msg(f"deploy {i} " + "rollback canary replica failover " * 12, id=f"1700.{i:06d}", tokens=64)
             .model_copy(update={"note": f"deploy {i} rollback canary", "note_tokens": [60]}) for i in range(40)]
    brief = [msg(f"deploy {i} ok", id=f"1700.{100 + i:06d}", tokens=6)
             .model_copy(update={"note": f"deploy {i} ok", "note_tokens": [4]}) for i in range(5)]
    messages = [*wordy, *brief]
    index.add(messages)
    index.searchable(set())
    _unread(index, list(range(45)))
    ranked = [(1.0, at) for at in range(45)]

    def select():  # type: ignore[no-untyped-def]
        # (room for about 50 tokens: a wordy one's line takes 60 or more, a brief one's about 10)
        return recall._select(index, ranked, 45, set(), Notes(), 60, 0, 45, RECALL_HEADER, {"deploy"})

    with pytest.raises(Unread) as raised:  # the first brief one fits: its body is needed
        select()
    assert raised.value.args[0] == 40, "the wordy ones that cannot fit were passed unread"
    for at in range(40, 45):
        index.bodies[at] = messages[at]
        del index.places[at]
    got = select()
    assert got.ids and set(got.ids) <= {m.id for m in brief}


def test_the_bodies_read_for_a_hit_are_its_and_its_neighbours_that_may_be_shown() -> None:
    """What a turn reads before choosing: each hit's body and those of the neighbours that may come with it (further
    out, only short ones); nothing for a hit the context holds (it is not shown, nor are its neighbours)."""
    from threadkeeper.services.recall.index import _around, _shown

    index = ConversationIndex()
    texts = ["short one", "a long message " * 30, "the hit's neighbour", "the hit", "another neighbour"]
    index.add([msg(t, id=f"1700.{i:06d}", author=("alice", "bob")[i % 2]) for i, t in enumerate(texts)])
    assert index.tokens[1] > SHORT_TOKENS and 1 in [near for _, near in _around(index, 3)]
    assert _shown(index, [(1.0, 3)], set()) == [3, 2, 4], "the long one two away is never shown: not read"
    assert _shown(index, [(1.0, 3)], {"1700.000003"}) == [], "a hit the context holds: nothing read"


def test_a_stored_segments_header_gives_its_documents_lengths_and_is_refused_for_other_messages() -> None:
    """An epoch's stored segment header holds each message's document length, read instead of counting the terms again;
    a header whose documents are not the messages the index takes (one taken there is not here) cannot be used."""
    from threadkeeper.services.recall import postings as stored_form
    from threadkeeper.services.recall.derived import Derived, Unusable
    from threadkeeper.services.text import length

    ids = ["1700.000001", "1700.000002", "1700.000003"]
    derived: list[Derived | None] = [Derived(tuple(search_terms(t)), (), ()) for t in FACTS[:2]] + [None]
    fields = stored_form.encode("cp1", ids, derived)
    assert fields is not None
    header = fields[stored_form.header_field("cp1")]
    form = stored_form.decode_header(header, ids, [True, True, False])
    assert tuple(form.lengths.tolist()) == (*(length(d.terms) for d in derived[:2] if d is not None), 0)
    with pytest.raises(Unusable):
        stored_form.decode_header(header, ids, [True, False, False])


def test_a_stored_column_of_numbers_is_read_whole_or_refused() -> None:
    """A stored column of integers (a header's documents' lengths, cards' references, tokens and notes' tokens) is
    parsed in one call, and anything but space-separated integers is refused, never read in part."""
    from threadkeeper.services.recall.postings import numbers

    assert numbers("3 0 12").tolist() == [3, 0, 12] and numbers("").tolist() == []
    for bad in ("3 x 12", "3  12", "3 12 ", "1.5 2"):
        with pytest.raises(ValueError):
            numbers(bad)


def test_the_totals_are_counted_over_the_sealed_epochs_only_when_nothing_newer_is_indexed() -> None:
    """What an index counted is stored as its sealed epochs' totals only while it holds nothing after the last sealed
    epoch's messages: a message indexed after them (a turn of the head) would be counted into the totals a cold worker
    adds the head to again."""
    from threadkeeper.services.recall.index import _only_sealed

    index = ConversationIndex()
    sealed = [msg(f"sealed message {i} about the garden", id=f"s{i}") for i in range(3)]
    index.add(sealed)
    assert _only_sealed(index, [m.id for m in sealed])
    index.add([msg("a newer message of the head", id="h1")])
    assert not _only_sealed(index, [m.id for m in sealed]), "a message after the sealed epoch's"
    assert not _only_sealed(index, ["never-indexed"]), "an epoch none of whose messages were indexed"


async def test_a_hit_past_the_bodies_read_first_is_shown_when_the_ones_before_it_cannot_fit(
        model, prefix, client, monkeypatch) -> None:
    """Recall reads the bodies of the best candidates first (``BODIES_FIRST``); one whose line cannot fit is passed by
    its card, unread. When every candidate read first is passed that way and one further down fits, the bodies from
    that one on are read and it is shown."""
    from threadkeeper.services.recall import index as module

    monkeypatch.setattr(module, "BODIES_FIRST", 4)
    p = _pipeline(prefix, client)
    words = "copper lantern meadow river quartz violet harbor canyon ember willow falcon marble".split()
    long = [f"Orchard report {i}: alpha beta harvest " + " ".join(f"{w}{i}x{j}" for j in range(14) for w in words)
            for i in range(8)]
    short = [f"beta row {i} is fine" for i in range(3)]
    await _thread(p, [*long, *short, *_filler(90)])
    read: list[list[int]] = []
    real = module.Recall.read_bodies

    async def read_bodies(self, conversation_id, index, positions):  # type: ignore[no-untyped-def]
        wanted = sorted({at for at in positions if index.bodies[at] is None})
        if wanted:
            read.append(wanted)
        return await real(self, conversation_id, index, positions)

    monkeypatch.setattr(module.Recall, "read_bodies", read_bodies)
    reader = _pipeline(prefix, client)  # (a worker that starts cold: it reads a body when a turn may show it)
    report = await reader.context(CONV, arriving=[reader.message("how did the alpha beta rows do?", author="carol")])
    runtime = report.context[-1].text
    assert RECALL_HEADER in runtime and "beta row" in runtime, "a short hit past the long ones is shown"
    assert not any(f"Orchard report {i}:" in runtime for i in range(8)), "the long hits cannot fit"
    # (a worker's first turn places the direct hits before it reads the widened query's postings: when room is left
    # after them, their last read was cut at the last of them, one more than when all candidates are known at once)
    assert 2 <= len(read) <= 4, f"the bodies from that hit on were read once it was reached, not one by one: {read}"


async def test_a_cold_worker_resolves_a_short_reference_to_a_sealed_message(model, prefix, client) -> None:
    """A worker that starts cold holds the sealed epochs' short references by epoch, not a map entry each: ``#N`` of a
    folded message still names it, as it does for the worker that indexed every message as it came."""
    p = _pipeline(prefix, client)
    await _epochs_thread(p)
    expected = await p.references(CONV)
    reader = _pipeline(prefix, client)
    assert await reader.references(CONV) == expected and len(expected) > 100
    history = await reader.checkpoints.load_history(CONV)
    folded = {m.id for m in history.messages}
    sealed = [label for label, ident in expected.items() if ident not in folded]
    assert len(sealed) > 50, "most of the thread was folded"
    for label in sealed[::7]:
        found = await reader.recall.resolve(CONV, history, label)
        assert found is not None and found.id == expected[label], label


async def test_an_epoch_sealed_while_no_worker_held_the_index_gets_its_segment_from_the_worker_that_builds_it(
        model, prefix, client, monkeypatch) -> None:
    """A thread whose first epoch was sealed while no worker held its index (evicted, a restart): the worker that
    next builds it derives that epoch and stores its search segment with what it derived, so a later worker that
    starts cold reads the totals and derives nothing of the sealed epochs (without that one segment, every cold worker
    derived every epoch)."""
    from threadkeeper.bench_data import fill_epochs
    from threadkeeper.persistence import ConversationKeys
    from threadkeeper.services.recall import Recall
    from threadkeeper.services.recall import index as module

    p = _pipeline(prefix, client)
    # (its first sync comes after the first compaction, with no index: then it holds the index as epochs are sealed)
    await fill_epochs(p.checkpoints, CONV, 1_000, recall=Recall(p.checkpoints, p.notes, p.recall.tokenizer,
                                                                 epochs=p.recall.epochs))
    history = await p.checkpoints.load_history(CONV)
    earlier = await p.checkpoints.earlier_epochs(CONV, history)
    fields = {f.decode() for f in await client.hkeys(ConversationKeys(prefix, CONV).recall)}
    assert len(earlier) == 3 and {f"{e.checkpoint.id}:p" for e in earlier} <= fields, "every sealed epoch's segment"
    decoded: list[int] = []
    real_decode = module.decode
    monkeypatch.setattr(module, "decode", lambda raw, ids: decoded.append(len(ids)) or real_decode(raw, ids))
    reader = _pipeline(prefix, client)
    got = await reader.context(CONV, arriving=[reader.message("and w7?", author="carol")])
    index = reader.recall.loaded(CONV)
    assert index is not None and index.totalled and not decoded, "the totals read, nothing derived of the epochs"
    assert RECALL_HEADER in got.context[-1].text


def _epoch_messages() -> list:  # type: ignore[type-arg]
    """An epoch as stored: a handoff, people's messages (one unnamed), the assistant's reply, an edit's notice."""
    messages = [msg("[handoff]", id="h1", handoff=True), msg("the ticket is OPS-4471", id="1700.000001", author="alice"),
                msg("thanks", id="1700.000002", author=None), msg("noted", role="assistant", id="1700.000003", author=None),
                msg("the ticket is OPS-4472", id="1700.000001:edit:e1", author="alice")]
    return [m.model_copy(update={"ref": n + 40, "created_at": 1_700_000_000.123456 + n * 61.5, "note_tokens": [n],
                                 "note": "a note" if n else None}) for n, m in enumerate(messages)]


def test_an_epochs_cards_are_read_as_stored_in_either_form_and_refused_when_cut_short() -> None:
    """An epoch's cards are stored with their numbers as machine numbers (read in one call a column) and read back
    exactly: ids, roles (the handoff's never taken), authors (an unnamed message's none), references, times to the
    last bit, tokens and notes' tokens. Cards stored in the form before (every column as text) are still read alike;
    cards cut short or naming an author they do not list are refused."""
    import zlib

    from threadkeeper.services.recall import cards as stored_cards
    from threadkeeper.services.recall.derived import Unusable, derive

    messages = _epoch_messages()
    chain = [("cp1", 2), ("cp2", 3)]
    raw = stored_cards.encode(chain, messages, [derive(m) for m in messages])
    assert raw is not None and zlib.decompress(raw).startswith(b"tk-cards 3 5 ")
    text = "\n".join([stored_cards._header(chain, stored_cards.TEXT_FORMAT), "\t".join(m.id for m in messages),
                      "-uua" + "u", "\t".join(m.author or "" for m in messages), " ".join(str(m.ref) for m in messages),
                      " ".join(repr(m.created_at) for m in messages), " ".join(str(m.tokens) for m in messages),
                      " ".join(str(stored_cards.note_tokens(m)) for m in messages)])
    for stored in (raw, zlib.compress(text.encode())):
        cards = stored_cards.decode(stored, chain)
        assert cards.ids == [m.id for m in messages] and cards.roles == "-uuau"
        assert stored_cards.posters(cards) == ["U1", "alice", None, None, "alice"]
        assert cards.refs.tolist() == [m.ref for m in messages]
        assert cards.created.tolist() == [m.created_at for m in messages], "to the last bit"
        assert cards.tokens.tolist() == [m.tokens for m in messages] and cards.notes.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(Unusable):
        stored_cards.decode(raw, [("cp1", 2), ("cp2", 4)])  # (another chain's)
    data = zlib.decompress(raw)
    with pytest.raises(Unusable):
        stored_cards.decode(zlib.compress(data[:-3]), chain)  # (cut short)
    head, ids, people, columns = data.split(b"\n", 3)
    bad = bytearray(columns)
    bad[5:9] = (7).to_bytes(4, "little")  # (the first message's author: the eighth of two listed)
    with pytest.raises(Unusable):
        stored_cards.decode(zlib.compress(b"\n".join([head, ids, people, bytes(bad)])), chain)


async def test_a_hits_neighbours_are_found_in_each_search_not_kept_from_the_last(model, prefix, client) -> None:
    """A search finds each hit's neighbours once (the bodies it reads and the choice both ask) and lets them go when
    it ends: a reply that came after the hit, the thread's last message when it was first found, is shown with it
    by the next search."""
    p = _pipeline(prefix, client)
    await _thread(p, [*_filler(6), "the kestrel sighting was at the north pier"])
    history = await p.checkpoints.load_history(CONV)
    first = await p.recall.search(CONV, history, [], ["kestrel"], 3_000)
    index = p.recall.loaded(CONV)
    assert index is not None and not index.near, "let go when the search ends"
    hit = index.ids.find(first.ids[-1])
    assert hit >= 0
    assert first.ids[-1] == index.ids[hit] and hit == index.size - 1 - sum(r == ord("a") for r in index.roles[hit:])
    p.recall.observe(CONV, [msg("yes, saw it too around noon", id="1700.999999", author="bob")])
    second = await p.recall.search(CONV, history, [], ["kestrel"], 3_000)
    assert "1700.999999" in second.ids and "1700.999999" not in first.ids, "the reply after the hit, its neighbour"


def test_an_index_built_from_cards_knows_only_the_authors_of_the_messages_it_took() -> None:
    """A sealed epoch's stored list of authors also names those of messages the index never takes (a handoff, a
    deletion's notice): an index built from the cards knows only the authors of the messages it took, as one built
    from the messages does."""
    from threadkeeper.services.recall import cards as stored_cards
    from threadkeeper.services.recall.derived import derive

    messages = [msg("[handoff]", id="h1", author="compactor", handoff=True),
                msg("the ticket is OPS-4471", id="1700.000001", author="alice"),
                msg("thanks", id="1700.000002", author="bob")]
    found = [derive(m) for m in messages]
    chain = [("cp1", len(messages))]
    raw = stored_cards.encode(chain, messages, found)
    assert raw is not None
    from_cards, from_messages = ConversationIndex(), ConversationIndex()
    from_cards.add_cards([(stored_cards.decode(raw, chain), chain, ())], found)
    from_messages.add(messages)
    assert sorted(from_cards.people) == sorted(from_messages.people) == ["alice", "bob"]
    assert [from_cards.author(p) for p in range(2)] == ["alice", "bob"]
