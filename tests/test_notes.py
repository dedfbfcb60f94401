"""Notes: what each message said, compressed; the notebook chooses them by information per token."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from threadkeeper.services import Tokenizer
from threadkeeper.services.handoff import NoteEntry, TermStats, select
from threadkeeper.services.handoff.notebook import note_cost
from threadkeeper.services.text import information, make_note, notes, resolve_dates, terms

FRIDAY = datetime(2023, 12, 29, 22, 42, tzinfo=timezone.utc).timestamp()  # a Friday


@pytest.mark.parametrize("text, expected", [
    ("I went skiing yesterday", "I went skiing 2023-12-28"),
    ("see you tomorrow!", "see you 2023-12-30!"),
    ("next Friday works", "2024-01-05 works"),
    ("last Monday was rough", "2023-12-25 was rough"),
    ("3 days ago I said no", "2023-12-26 I said no"),
    ("in two weeks we ship", "2024-01-12 we ship"),
    ("Ayer fuimos al cine", "2023-12-28 fuimos al cine"),
    ("Wir haben gestern entschieden", "Wir haben 2023-12-28 entschieden"),
    ("on Friday we ship", "on Friday we ship"),
])
def test_relative_dates_are_resolved_against_the_message_time(text: str, expected: str) -> None:
    assert resolve_dates(text, FRIDAY) == expected


def test_notes_keep_identifiers_numbers_and_names_and_drop_filler() -> None:
    text = ("lol ok so I just filed OPS-1234 for the billing timeouts, the p99 was 420 ms and "
            "https://grafana.example.com/d/abc/billing shows it; Carol says commit 9f8e7d6c broke it")
    note = make_note(text, FRIDAY)
    assert note is not None
    for kept in ("OPS-1234", "420 ms", "https://grafana.example.com/d/abc/billing", "Carol", "9f8e7d6c", "billing"):
        assert kept in note
    for dropped in ("lol", " the ", " so ", " just "):
        assert dropped not in f" {note} "
    assert len(note) < len(text) * 0.8


def test_notes_in_other_languages_drop_their_own_function_words() -> None:
    spanish = make_note("Mañana no podemos desplegar el servicio de pagos porque la base de datos está en "
                        "mantenimiento hasta las 18:00.", FRIDAY)
    german = make_note("Wir dürfen den Zahlungsdienst nicht vor dem Release am 15. Januar ausrollen.", FRIDAY)
    japanese = make_note("明日の会議は午後3時からです。", FRIDAY)
    assert spanish and "18:00" in spanish and "servicio" in spanish and " el " not in f" {spanish} "
    assert "no" in spanish.split(), "negation is meaning, never filler"
    assert german and "nicht" in german.split() and "Zahlungsdienst" in german and " den " not in f" {german} "
    assert japanese == "明日の会議は午後3時からです。", "text without spaces is kept as written"
    assert any(len(t) == 2 for t in terms(japanese)), "it is ranked by character pairs"


def test_chatter_makes_no_note_and_a_paste_keeps_only_its_error() -> None:
    assert make_note("lol ok thanks!", FRIDAY) is None
    assert make_note("haha yeah 😂", FRIDAY) is None
    paste = "here's what I see:\n```\n" + "\n".join(
        f"2025-03-01T10:{i:02d}:00Z INFO request handled in {i}ms trace={i:016x}" for i in range(40)) + \
        "\nTimeoutError: upstream did not answer in time\n```"
    note = make_note(paste, FRIDAY)
    assert note is not None and "TimeoutError" in note and "trace=" not in note and len(note) < 120


def _entry(ident: str, text: str, at: float, fresh: list[str] | None = None) -> NoteEntry:
    return NoteEntry(id=ident, author="ann", at=at, text=text, fresh=sorted(terms(text)) if fresh is None else fresh)


def test_selection_is_by_value_not_age_and_deterministic() -> None:
    tokenizer = Tokenizer("gpt-4o")
    day = 86_400.0
    old_fact = _entry("m1", "Biscuit greyhound adopted 2023-04-02 Kelowna vet Dr Okafor", 0.0)
    chatter = [_entry(f"c{i}", "weather nice lunch good", day * 3 + i, fresh=[]) for i in range(30)]
    echo = _entry("m2", "Biscuit greyhound adopted Kelowna", day * 4, fresh=[])
    repeat = _entry("m3", old_fact.text, day * 4 + 1, fresh=[])
    stats = TermStats()
    stats.add([terms(old_fact.text)] + [terms(c.text) for c in chatter] + [terms(echo.text), terms(repeat.text)])
    pool = [old_fact, *chatter, echo, repeat]
    cap = 60
    chosen = select(pool, stats, cap_tokens=cap, now=day * 5, count=tokenizer.count)
    ids = [n.id for n in chosen.notes]
    assert ids[0] == "m1" and chosen.picked[0] == "m1", "an old note that says much comes before chatter"
    assert "m3" not in ids, "the same person saying the same thing again is not repeated"
    assert chosen.tokens <= cap and chosen.evicted == len(pool) - len(ids)
    assert select(list(reversed(pool)), stats, cap_tokens=cap, now=day * 5, count=tokenizer.count) == chosen


def test_a_long_identifier_counts_for_its_length_so_a_url_is_not_evicted_for_short_ones() -> None:
    """A URL or a path cannot be guessed back and costs a note many tokens: it counts once more for each
    ``IDENTIFIER_CHARS`` of it, so a dashboard's address holds its place beside notes of short identifiers."""
    tokenizer = Tokenizer("gpt-4o")
    url = "https://grafana.example.com/d/783e6e2f5c/auth-gateway-overview"
    dashboard = _entry("u1", f"dashboard auth-gateway {url}", 0.0)
    shas = [_entry(f"s{i}", f"deploy {i:02d} fixed commit {0x5a1b2c3d4e + i * 7919:010x}", float(i + 1))
            for i in range(12)]
    stats = TermStats()
    stats.add([terms(dashboard.text)] + [terms(s.text) for s in shas])
    pool = [dashboard, *shas]
    cap = sum(note_cost(s, tokenizer.count) for s in shas[:6]) + 40
    chosen = select(pool, stats, cap_tokens=cap, now=20.0, count=tokenizer.count)
    assert "u1" in [n.id for n in chosen.notes] and 0 < len(chosen.notes) < len(pool)


def test_what_an_identifier_brings_is_its_parts_the_thread_has_not_seen() -> None:
    """A second dashboard on a known host brings its id and its service, not the host: those parts are words the
    message brought (fresh), so its note is worth what the new part says, and the parts seen before count for
    nothing new."""
    stats = TermStats()
    first, second, plain = stats.add([
        terms("auth dashboard: https://grafana.example.com/d/783e6e2f5c/auth-gateway-overview"),
        terms("the new one https://grafana.example.com/d/c8597b111b/ledger-overview"),
        terms("the ledger looks fine"),
    ])
    assert {"grafana", "example", "783e6e2f5c", "overview"} <= set(first)
    assert {"c8597b111b", "ledger"} <= set(second) and not {"grafana", "example", "overview"} & set(second)
    assert "ledger" not in plain, "a part names a word as the word does"
    assert stats.df["grafana"] == 2 and "https" not in stats.df


def test_a_note_drops_its_own_day_and_filler_and_keeps_every_content_word_of_an_ordinary_message() -> None:
    note = make_note("I'm planning on taking a cooking class today! See you tomorrow.", FRIDAY)
    assert note is not None and "cooking class" in note and "2023-12-30" in note
    assert "2023-12-29" not in note, "the day heading already says which day 'today' is"
    skiing = make_note("Yes I actually love skiing, it is my favorite sport in winter, and I go to Aspen twice a "
                       "year with my brother Tom", FRIDAY)
    assert skiing == "love skiing favorite sport winter go Aspen twice year brother Tom", \
        "the clause keeps its entity, object, number and place; filler and function words go"
    slo = make_note("The p99 latency budget for the checkout service is 250 ms at peak load, says the SRE team", FRIDAY)
    assert slo is not None and "p99" in slo and "250 ms" in slo, "numbers keep their units"
    assert information("melatonin") > information("cooking") > information("the")
    assert information("servicio", "es") < information("servicio", "en"), "a word is rare or common in its language"


def test_a_long_message_keeps_its_most_informative_sentences_and_every_identifier() -> None:
    filler = " ".join(f"The weather was nice and we talked about the weekend plans again, sentence {i}." for i in range(8))
    text = f"{filler} The outage ticket is OPS-4471 and the fix ships in build 2.14.3 on Thursday."
    note = make_note(text, FRIDAY)
    assert note is not None and "OPS-4471" in note and "2.14.3" in note
    assert len(note.split()) <= notes.NOTE_MAX_WORDS + 2


def test_a_tight_cap_shows_fewer_notes_each_whole_and_a_roomy_one_all_of_them() -> None:
    tokenizer = Tokenizer("gpt-4o")
    texts = ["Kate adopted greyhound Biscuit Kelowna shelter vet Okafor checkup Tuesday",
             "Marco moving Lisbon March startup fintech payments team hiring engineers",
             "Priya marathon Berlin September training plan coach intervals tempo runs",
             "Dev bought vintage Gibson guitar Nashville pawn shop restoring frets pickups",
             "Lena learning Japanese evening classes trip Kyoto temples spring cherry blossoms"]
    pool = [NoteEntry(id=f"m{i}", author="ann", at=float(i), text=t, fresh=sorted(terms(t))) for i, t in enumerate(texts)]
    stats = TermStats()
    stats.add([terms(t) for t in texts])
    tight = select(pool, stats, cap_tokens=60, now=10.0, count=tokenizer.count)
    assert 1 <= len(tight.notes) < 5 and {n.text for n in tight.notes} <= set(texts), "whole notes, never shortened"
    roomy = select(pool, stats, cap_tokens=400, now=10.0, count=tokenizer.count)
    assert len(roomy.notes) == 5 and roomy.tokens > tight.tokens


def test_notes_weighed_once_are_chosen_within_each_cap_as_alone(monkeypatch) -> None:
    """A handoff chooses what it shows and then what it carries from the same candidate notes: weighed once (their
    words read once each), each cap's choice is what choosing within it alone gives."""
    from threadkeeper.services.handoff import notebook

    tokenizer = Tokenizer("gpt-4o")
    texts = [f"note {i}: {' '.join(f'word{(i * 7 + k) % 40}' for k in range(6))} OPS-{i % 9} must ship by Friday"
             for i in range(60)]
    stats = TermStats()
    fresh = stats.add([terms(t) for t in texts])
    pool = [NoteEntry(id=f"m{i}", author=("ann", "bo", "cy")[i % 3], at=float(i * 40_000), text=t, fresh=f,
                      question=i % 5 == 0) for i, (t, f) in enumerate(zip(texts, fresh, strict=True))]
    read: list[str] = []
    monkeypatch.setattr(notebook, "terms", lambda text: read.append(text) or terms(text))
    weighed = notebook.Pool(pool, stats, now=3e6, count=tokenizer.count)
    assert len(read) == len(pool), "each note's words read once"
    for cap in (40, 200, 800, 5_000):
        assert weighed.select(cap) == select(pool, stats, cap_tokens=cap, now=3e6, count=tokenizer.count)


def test_a_note_costs_what_the_counts_made_at_commit_say() -> None:
    """Compaction never recounts a committed note: the counts stored with the message give the same cost."""
    from threadkeeper.persistence import Message, TextPart
    from threadkeeper.services.handoff import LedgerBuilder, note_cost
    from threadkeeper.services.models import ContextBudget
    from threadkeeper.services.turn import TurnInput

    tokenizer = Tokenizer("gpt-4o")
    texts = ["The staging database for payments is pg-stage-7, ticket PAY-5512, owned by Dana's team.",
             "明日の会議は午後3時からです。", "We must keep p99 under 250 ms for checkout; see https://wiki.example.com/slo"]
    turn_input = TurnInput(tokenizer=tokenizer, budget=ContextBudget.derive(8_000, fixed_prompt_tokens=500))
    messages = []
    for i, text in enumerate(texts):
        noted = turn_input.noted(text, FRIDAY + i)
        messages.append(Message(id=f"m{i}", role="user", author="ann", parts=[TextPart(text=text)], tokens=1,
                                created_at=FRIDAY + i, ref=40 + i, **noted))
    ledger = LedgerBuilder(count=tokenizer.count).fold(messages).build()
    assert len(ledger.notes) == 3
    for entry in ledger.notes:
        assert entry.tokens == note_cost(entry, tokenizer.count, label=ledger.label)


def test_a_persons_notes_cost_what_their_rendered_line_spends() -> None:
    """What selection counts for a day's notes of one person (their lead-in once, each note) is what the rendered
    line spends, quotation included: counted higher, fewer notes fit than the handoff has room for."""
    from threadkeeper.services.handoff import note_cost
    from threadkeeper.services.handoff.notebook import author_cost
    from threadkeeper.services.handoff.view import _render_notes

    tokenizer = Tokenizer("gpt-4o")
    texts = ["staging database payments pg-stage-7", "ticket PAY-5512 owned Dana team", "p99 under 250 ms checkout",
             "deploy moved Friday", "rollback plan Maria", "budget 40k approved", "canary eu-west-3 first",
             "retro Thursday 3pm"]
    notes = [NoteEntry(id=f"m{i}", author="ann", at=FRIDAY + i, text=t) for i, t in enumerate(texts)]
    lines = _render_notes(notes, str)
    assert len(lines) == 2 and lines[1].startswith("- ann: “"), "a day heading, then one quoted line for ann"
    counted = author_cost("ann", tokenizer.count) + sum(note_cost(n, tokenizer.count) for n in notes)
    spent = tokenizer.count(lines[1]) + 1  # and its line break
    assert abs(counted - spent) <= len(notes) // 2, (counted, spent)


def test_an_identifier_inside_text_without_spaces_is_a_term_and_survives_every_shortening() -> None:
    """Japanese and Chinese write identifiers into the sentence with no space around them."""
    text = "ledgerのタイムアウトについてINFRA-5382を起票しました。メモはそちらへ。詳細は後で共有します。"
    note = notes.make_note(text, 1_700_000_000.0)
    assert note is not None and "INFRA-5382" in note
    assert "INFRA-5382" in notes._clip(text, 3, "ja"), "a note cut to a few characters keeps it"
    assert "infra-5382" in notes.words(text) and "ledger" in notes.words(text)


@pytest.mark.parametrize("text, gives", [
    ("The dashboard for checkout is https://grafana.example.com/d/26b21958d6/checkout-overview", True),
    ("ledgerのタイムアウトについてINFRA-5382を起票しました。メモはそちらへ。", True),
    ("auth-gatewayのリグレッションはコミット196d1e70bfで入りました。", True),
    ("if you touch retries in billing, edit services/billing/retry_12.py", True),
    ("full log from the last run:\n```\npanic at /src/payments-api/internal/server.go:413 trace=412ce010b0c2bdd7\n```",
     False),
    ("p99 is down to 534 ms since the cache change, see you on 2024-03-01", False),
    ("the notifications dashboard is slow to load again", False),
])
def test_a_message_that_gives_a_reference_in_its_own_words_is_told_apart(text: str, gives: bool) -> None:
    """A link, a ticket, a commit or a path a person gives (in prose, also written into text without spaces) is a
    reference; what a pasted log holds, a quantity or a date is not."""
    from threadkeeper.services.text import extract

    assert extract.holds_reference(text) is gives


def test_a_reversal_marks_the_decision_it_reverses_and_only_that_one() -> None:
    from threadkeeper.persistence import Message, MessageFlags, TextPart
    from threadkeeper.services.handoff import LedgerBuilder

    def said(n: int, text: str) -> Message:
        return Message(id=f"r{n}", role="user", author="ana", parts=[TextPart(text=text)], tokens=len(text) // 4,
                       created_at=1_700_000_000.0 + n, flags=MessageFlags())

    ledger = LedgerBuilder().fold([
        said(1, "We decided to use Postgres for the billing ledger."),
        said(2, "We decided to ship the dashboard on Friday."),
        said(3, "We are reversing the decision on Postgres for billing: we decided to go with MySQL instead."),
    ]).ledger
    status = {d.id: (d.status, d.reversed_by) for d in ledger.decisions}
    assert status["r1"] == ("reversed", "r3"), "the Postgres decision is reversed by the later one"
    assert status["r2"] == ("active", None) and status["r3"][0] == "active"


def test_the_same_person_saying_the_same_thing_twice_gets_one_note() -> None:
    tokenizer = Tokenizer("gpt-4o")
    texts = [("ann", "Deploy freeze starts Friday 18:00 for the payments cluster"),
             ("bob", "Marco moving Lisbon March startup fintech payments team hiring engineers"),
             ("ann", "Deploy freeze starts Friday 18:00 for the payments cluster"),
             ("bob", "Deploy freeze starts Friday 18:00 for the payments cluster")]
    stats = TermStats()
    fresh = stats.add([terms(t) for _, t in texts])
    pool = [NoteEntry(id=f"m{i}", author=a, at=float(i), text=t, fresh=f)
            for i, ((a, t), f) in enumerate(zip(texts, fresh))]
    chosen = select(pool, stats, cap_tokens=400, now=10.0, count=tokenizer.count)
    said = [(n.author, n.text) for n in chosen.notes]
    assert said.count(("ann", texts[0][1])) == 1, "a repeat by the same person is not noted again"
    assert ("bob", texts[0][1]) in said, "someone else saying it is their own note"


def test_the_stopword_lists_are_bm25s_own_read_without_importing_it() -> None:
    """The stopword lists are bm25s's, read from its file so that numpy (which the ``bm25s`` package imports) is
    imported only by what searches."""
    import subprocess
    import sys

    from bm25s import stopwords

    from threadkeeper.services.text import STOPWORDS

    assert STOPWORDS["de"] == frozenset(stopwords.STOPWORDS_GERMAN)
    assert STOPWORDS["en"] >= frozenset(stopwords.STOPWORDS_EN_PLUS)
    probe = "import sys\nfrom threadkeeper.services.text import STOPWORDS\nprint('bm25s' in sys.modules, 'numpy' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
