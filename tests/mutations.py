"""One-line breakages of core behaviour, each with the tests that must notice it: ``make mutate``.

Each mutant replaces one exact piece of text in one file (it must occur exactly once), runs the named tests,
and puts the file back, whatever happens (a failure, Ctrl-C, SIGTERM). A mutant the tests still pass with
*survived*: the behaviour it breaks is not tested. Add a row for every gap a review finds, with the test
that closes it.

    .venv/bin/python tests/mutations.py            # every mutant
    .venv/bin/python tests/mutations.py pin event  # those whose name contains a word given
    .venv/bin/python tests/mutations.py --list

The named tests are first run once on the unbroken code (``--no-baseline`` skips it): a test that already fails
would count every mutant as killed.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    original: str
    broken: str
    tests: tuple[str, ...]
    """pytest arguments: files, ``file::test`` or ``-k`` expressions."""


MUTANTS: list[Mutant] = [
    Mutant("pin-too-large-stops-pin-search", "services/handoff/compactor.py",
           "            if used + m.tokens > pin_budget:\n                continue\n",
           "            if used + m.tokens > pin_budget:\n                break\n",
           ("tests/test_compaction.py", "-k", "pin_too_large")),
    Mutant("oldest-kept-never-truncated", "services/handoff/compactor.py",
           "            if left >= 48:\n", "            if False:\n",
           ("tests/test_compaction.py", "-k", "truncated_to_fill")),
    Mutant("suspect-fact-still-shown", "services/handoff/view.py",
           "        if f.evidence_id in suspects:\n            continue\n",
           "        if f.evidence_id in suspects:\n            pass\n",
           ("tests/test_compaction.py", "-k", "evidence_changed")),
    Mutant("same-person-same-thing-two-notes", "services/handoff/notebook.py",
           "if current <= 0 or (c.entry.author, c.entry.text) in said:",
           "if current <= 0:",
           ("tests/test_notes.py", "-k", "same_thing_twice")),
    Mutant("never-mind-cancels-someone-elses-ask", "services/handoff/ledger.py",
           "earlier = [a for a in lg.asks if a.author == author and a.status != \"superseded\" and not a.standing]",
           "earlier = [a for a in lg.asks if a.status != \"superseded\" and not a.standing]",
           ("tests/test_compaction.py", "-k", "never_mind")),
    Mutant("retried-effect-applied-twice", "persistence/models.py",
           "keys = [self.event_id] if self.event_id else []",
           "keys = []",
           ("tests/test_slack_bot.py", "-k", "retried_pin")),
    Mutant("second-edit-of-a-message-dropped", "persistence/models.py",
           'keys.append(f"edit:{subject}:{self.change}")',
           'keys.append(f"edit:{subject}")',
           ("tests/test_store_contract.py", "-k", "edit_is_one_change")),
    Mutant("inbox-quarantine-off-by-one", "persistence/inbox.py",
           "[index - moved, value, self.retention_seconds]", "[index, value, self.retention_seconds]",
           ("tests/test_executor.py", "-k", "six_unreadable")),
    Mutant("joined-thread-queued-after-the-mention", "bot/backfill.py",
           "newest, bot_user, front=True, late=False)", "newest, bot_user, front=False, late=False)",
           ("tests/test_slack_bot.py", "-k", "mid_thread_mention_reads")),
    Mutant("joined-thread-read-in-reverse", "bot/backfill.py",
           "key=lambda m: float(m[\"ts\"]), reverse=front)", "key=lambda m: float(m[\"ts\"]), reverse=not front)",
           ("tests/test_slack_bot.py", "-k", "mid_thread_mention_reads")),
    Mutant("joined-thread-read-faster-than-slack-allows", "bot/backfill.py",
           "                wait = self.pace.interval_seconds if pages else \\\n",
           "                wait = 0.0 if pages else \\\n",
           ("tests/test_slack_bot.py", "-k", "read_at_slacks_pace")),
    Mutant("joined-thread-read-again-from-the-start", "bot/backfill.py",
           "\"\" if parts[3] == \"-\" else parts[3]", "\"\"",
           ("tests/test_slack_bot.py", "-k", "read_at_slacks_pace")),
    Mutant("joined-thread-left-unfinished", "services/turn/executor.py",
           "                await self.inbox.mark_pending(conversation_id)  # the transport comes back",
           "                pass  # the transport comes back",
           ("tests/test_slack_bot.py", "-k", "read_at_slacks_pace")),
    Mutant("another-bots-mention-answered", "bot/slack.py",
           "addressed = not from_bot and (mention or is_dm", "addressed = (mention or is_dm",
           ("tests/test_slack_bot.py", "-k", "another_bots_mention")),
    Mutant("recall-never-widened-in-a-turn", "services/recall/index.py",
           "return await self.search(conversation_id, history, context, query, cap_tokens, widen=True,",
           "return await self.search(conversation_id, history, context, query, cap_tokens, widen=False,",
           ("tests/test_recall.py", "-k", "neighbour_and_what_only")),
    Mutant("recall-without-neighbours", "services/recall/index.py",
           "            for step in range(1, NEIGHBOURS + 1):\n", "            for step in range(1, 1):\n",
           ("tests/test_recall.py", "-k", "neighbour_and_what_only")),
    Mutant("google-api-keys-not-redacted", "services/safety/redact.py",
           'compile(r"\\bAIza[0-9A-Za-z_-]{30,}")', 'compile(r"\\bAIzz[0-9A-Za-z_-]{30,}")',
           ("tests/test_redaction.py",)),
    Mutant("token-assignments-not-redacted", "services/safety/redact.py",
           'master|shared[_-]?access)[_-]?key|token|credential|passphrase")',
           'master|shared[_-]?access)[_-]?key|credential|passphrase")',
           ("tests/test_redaction.py",)),
    Mutant("asks-kept-unredacted", "services/handoff/ledger.py",
           "ask = Ask(seq=self._seq(), id=m.id, author=author, text=redact(_short(text)),",
           "ask = Ask(seq=self._seq(), id=m.id, author=author, text=_short(text),",
           ("tests/test_redaction.py", "-k", "ledger_or_the_handoff")),
    Mutant("toujours-not-in-the-instruction-gate", "services/safety/instructions.py",
           "maintenant aujourd'hui désormais dorénavant avenir toujours jamais",
           "maintenant aujourd'hui désormais dorénavant avenir jamais",
           ("tests/test_instructions.py",)),
    Mutant("split-instructions-skips-the-gate-words-it-needs", "services/safety/instructions.py",
           "    return not _GATE_WORDS.isdisjoint(_GATE_SPLIT.split(lowered))",
           "    return not _GATE_WORDS.isdisjoint(lowered.split())",
           ("tests/test_instructions.py",)),
    # Adversarial messages: each breakage makes one filter read a long run once per place in it (quadratic time).
    Mutant("linear-assignment-run-read-once-per-name", "services/safety/redact.py",
           "        if start <= done or start == tried:\n", "        if start <= done:\n",
           ("tests/test_adversarial_text.py", "-k", "proportion and redaction and api_key")),
    Mutant("linear-url-scheme-from-every-place", "services/safety/redact.py",
           '_SCHEME = (r"(?<![a-z0-9+.-])(?=', '_SCHEME = (r"(?=',
           ("tests/test_adversarial_text.py", "-k", "proportion and redaction and scheme")),
    Mutant("linear-model-line-values-from-every-place", "services/safety/lines.py",
           r'|(?<![\w./:#@-])[\w./:#@-]*\d', r'|[\w./:#@-]*\d',
           ("tests/test_adversarial_text.py", "-k", "proportion and model and token")),
    Mutant("linear-infinitive-from-every-letter", "services/safety/instructions.py",
           r'_INFINITIVE = re.compile(r"\w\w(?:', r'_INFINITIVE = re.compile(r"\w{2,}(?:',
           ("tests/test_adversarial_text.py", "-k", "proportion and instruction and long")),
    Mutant("linear-error-lines-span-blank-lines", "services/text/notes.py",
           r'_ERROR_LINE = re.compile(r"^[^\S\n]*+(?:', r'_ERROR_LINE = re.compile(r"^\s*(?:',
           ("tests/test_adversarial_text.py", "-k", "proportion and note and code")),
    Mutant("linear-file-name-from-every-dash", "services/text/extract.py",
           r'r"(?:(?<![\w-])|(?<=(?<![\w-])-)|(?<=(?<![\w-])--))\b[\w-]+', r'r"\b[\w-]+',
           ("tests/test_adversarial_text.py", "-k", "proportion and artifacts and a-")),
    Mutant("common-words-from-the-large-lists", "services/lexicon/frequency.py",
           'zipf_frequency(word, code, wordlist="small")', 'zipf_frequency(word, code)',
           ("tests/test_adversarial_text.py", "-k", "small_word_lists")),
    Mutant("forgotten-conversation-left-in-activity-registry", "persistence/forget.py",
           "dead_registry_key(self.prefix), activity_key(self.prefix)):", "dead_registry_key(self.prefix)):",
           ("tests/test_store_contract.py", "-k", "forgetting_deletes")),
    Mutant("reply-boilerplate-becomes-notes", "services/text/notes.py",
           "if not terms(s) <= known and not repeated(shape(s))]", "if not terms(s) <= known]",
           ("tests/test_executor.py", "-k", "what_they_add or what_a_reply")),
    Mutant("calibration-counts-notes-the-call-left-out", "services/context/measure.py",
           "    if runtime is not None and first.flags.handoff and first.id in runtime.source_ids:",
           "    if False:",
           ("tests/test_executor.py", "-k", "calibrates_on_what")),
    Mutant("compaction-forgets-its-calibration", "services/context/measure.py",
           "kept = history.checkpoint.meta.info.get(\"calibration\") if compaction else None",
           "kept = None",
           ("tests/test_executor.py", "-k", "measure_it_was_planned")),
    Mutant("constraints-left-with-the-notes", "services/handoff/view.py",
           "    return note.edited or (not note.reply and bool(x.CONSTRAINT.search(note.text)))",
           "    return False",
           ("tests/test_compaction.py", "-k", "golden")),
    Mutant("preview-without-change-notices", "services/turn/preview.py",
           "        incoming = self.input.numbered(history.messages if history else [], prepared.incoming)",
           "        incoming = self.input.numbered(history.messages if history else [],\n"
           "                                       [m for m in prepared.incoming if \":edit:\" not in m.id])",
           ("tests/test_preview.py",)),
    Mutant("a-turn-compacts-before-its-own-edits", "services/turn/input.py",
           "        prepared = PreparedTurn(settled, incoming, effects, notes.after(effects) if effects else notes)",
           "        prepared = PreparedTurn(settled, incoming, effects, notes)",
           ("tests/test_compaction.py", "-k", "plans_with_its_own_edits")),
    Mutant("privacy-guessed-where-nobody-can-be-asked", "services/memory/access.py",
           "    async def visibility(self, workspace: str, channel: str) -> Visibility:\n        raise PrivacyUnknownError(",
           "    async def visibility(self, workspace: str, channel: str) -> Visibility:\n        return \"public\"\n"
           "        raise PrivacyUnknownError(",
           ("tests/test_memory.py", "-k", "command_line_decides")),
    Mutant("command-line-ignores-what-slack-said", "services/app.py",
           "        return await self._memory().extract(conversation.said(flags.get(PRIVACY)), force=True)",
           "        return await self._memory().extract(conversation, force=True)",
           ("tests/test_memory.py", "-k", "command_line_decides")),
    Mutant("record-state-skips-the-one-check-of-model-lines", "services/handoff/state_tool.py",
           "    why = rejected(text, [m.text for m in found])  # the one check of a model's lines",
           "    why = None",
           ("tests/test_instructions.py", "-k", "one_check")),
    Mutant("narrative-skips-the-one-check-of-model-lines", "services/handoff/narrative.py",
           "or rejected(body, [source], secrets=secrets):",
           "or False:",
           ("tests/test_compaction.py", "-k", "invented_ids or secret")),
    Mutant("stop-button-ignored", "services/turn/executor.py",
           "        if call is not None:\n            call.cancel()\n",
           "        if call is not None:\n            pass\n",
           ("tests/test_slack_bot.py", "-k", "stop_button")),
    Mutant("compaction-notice-unsaid", "services/turn/executor.py",
           "(result.compaction.notice() if result.compaction else None,",
           "(None,",
           ("tests/test_slack_bot.py", "-k", "edit_and_delete_make_facts")),
    Mutant("last-reply-left-out-of-the-handoff", "services/handoff/compactor.py",
           "carry_tokens=max(cap, carry), last_reply=last_reply)", "carry_tokens=max(cap, carry), last_reply=None)",
           ("tests/test_compaction.py", "-k", "short_answer_right_after")),
    Mutant("plot-checked-after-the-run", "threadkeeper/evalcmd.py",
           "    if args.plot and importlib.util.find_spec(\"matplotlib\") is None:",
           "    if False:",
           ("tests/test_evals.py", "-k", "without_matplotlib")),
    Mutant("home-shows-a-private-channel-to-a-non-member", "services/memory/access.py",
           "                    seen = await self.member(record, person, asked)\n",
           "                    seen = True\n",
           ("tests/test_memory_slack.py", "-k", "home_lists or forged_press_on_one")),
    Mutant("home-shows-a-channel-to-anyone", "services/memory/access.py",
           "                    seen = asked[person]\n", "                    seen = True\n",
           ("tests/test_memory_slack.py", "-k", "home_lists")),
    Mutant("forget-not-checked-at-the-press", "services/app.py",
           "if record is None or not await self.memory.seen_by([record], person):",
           "if record is None:",
           ("tests/test_memory_slack.py", "-k", "forged_press_on_one")),
    Mutant("memory-switch-not-checked-at-the-press", "bot/home.py",
           "        if not await is_admin(client, user):\n", "        if False:\n",
           ("tests/test_memory_slack.py", "-k", "switch_is_an_admins")),
    Mutant("memory-switch-shown-to-everyone", "bot/home.py",
           "        if await is_admin(client, user):\n", "        if True:\n",
           ("tests/test_memory_slack.py", "-k", "switch_is_an_admins or home_lists")),
    Mutant("held-history-misses-the-reply", "persistence/store.py",
           "        segment = self._parse(keys, checkpoint_id, \"[\" + \",\".join(written) + \"]\")",
           "        segment = self._parse(keys, checkpoint_id, \"[\" + \",\".join(written[:-1]) + \"]\")",
           ("tests/test_executor.py", "-k", "holds_after_its_commits")),
    Mutant("lease-released-while-items-wait", "persistence/scripts.py",
           "if waiting == 0 then redis.call('DEL', KEYS[1]) end\nreturn waiting",
           "redis.call('DEL', KEYS[1])\nreturn 0",
           ("tests/test_executor.py", "-k", "mid_turn_messages_go_to_the_next_turn or arriving_while_each_reply")),
    Mutant("held-flags-miss-a-write", "persistence/notes.py",
           "        await self._set(conversation_id, {f\"flag:{name}\": json.dumps(value)})\n        self.heard(",
           "        await self._set(conversation_id, {f\"flag:{name}\": json.dumps(value)})\n        (lambda *a: None)(",
           ("tests/test_slack_bot.py", "-k", "mention_gets_a_threaded_reply or refuses_agent_sessions")),
    Mutant("mention-hint-not-kept-with-the-message", "bot/slack.py",
           "author_id=person,\n            view=view)", "author_id=person,\n            view=None)",
           ("tests/test_slack_bot.py", "-k", "what_the_person_has_open")),
    Mutant("stalled-writer-not-fenced", "persistence/scripts.py",
           "if fence_token ~= '' and fence_holder and fence_holder ~= fence_token then",
           "if false then",
           ("tests/test_store_contract.py", "tests/test_executor.py", "-k",
            "lease_another_worker_holds or stalled_past_its_lease")),
    Mutant("lost-post-sent-again-before-slacks-reads-catch-up", "bot/delivery.py",
           "                lost = True  # Slack may have posted it, and may not show it yet",
           "                lost = False",
           ("tests/test_delivery.py", "-k", "reads_lag")),
    Mutant("retracted-source-written-anyway", "persistence/memory.py",
           "if #hits > 0 then return hits end", "if false then return hits end",
           ("tests/test_memory_retraction.py", "-k", "during")),
    Mutant("write-after-a-retraction-drops-everything", "persistence/memory.py",
           "            records = kept\n", "            records = []\n",
           ("tests/test_memory_retraction.py", "-k", "during_extraction or during_a_merge")),
    Mutant("retraction-leaves-no-tombstone", "services/memory/forgetting.py",
           "        await self.store.tombstone(where.workspace, [mark])\n", "",
           ("tests/test_memory_retraction.py", "-k", "during_extraction or during_consolidation")),
    Mutant("forget-leaves-no-tombstone", "services/memory/forgetting.py",
           "        await self.store.tombstone(where.workspace, sorted(marks))\n", "",
           ("tests/test_memory_retraction.py", "-k", "forgetting_a_thread_during")),
    Mutant("merged-record-forgets-its-parts", "services/memory/consolidation.py",
           "        twin.origins = [*parts, *(p for p in r.parts() if p.id not in {q.id for q in parts})]\n", "",
           ("tests/test_memory_retraction.py", "-k", "merged or merge")),
    Mutant("merged-record-dropped-with-one-retracted-part", "persistence/memory.py",
           "        kept = [p for p in parts if not p.marks() & gone]\n", "        kept = []\n",
           ("tests/test_memory_retraction.py", "-k", "merged or merge")),
    Mutant("merged-record-keeps-the-retracted-parts-text", "persistence/memory.py",
           '"text": lead.text, ', "",
           ("tests/test_memory_retraction.py", "-k", "falls_back")),
    Mutant("extracted-thread-stays-in-the-sweep", "services/memory/extraction.py",
           "            else:  # extracted, or memory is off here: an item arriving puts it back\n"
           "                await self.store.settle(cid, activity)\n",
           "            else:\n                pass\n",
           ("tests/test_memory_sweep.py", "-k", "bounded_passes")),
    Mutant("memory-off-thread-stays-in-the-sweep", "services/memory/extraction.py",
           'if result.outcome == "busy":  # its holder settles it', 'if result.outcome in ("busy", "disabled"):',
           ("tests/test_memory_sweep.py", "-k", "behind_a_hundred")),
    Mutant("failed-extraction-leaves-the-sweep", "services/memory/extraction.py",
           "await self.store.settle(cid, activity, until=result.retry_at - idle)",
           "await self.store.settle(cid, activity)",
           ("tests/test_memory_sweep.py", "-k", "failed_extraction")),
    Mutant("sweep-drops-a-thread-that-got-an-item-meanwhile", "persistence/memory.py",
           "if not s or tonumber(s) ~= tonumber(ARGV[2]) then return 0 end", "if not s then return 0 end",
           ("tests/test_memory_sweep.py", "-k", "during_extraction")),
    Mutant("handoff-planned-for-another-lineage-adopted", "services/handoff/compactor.py",
           "if record.from_checkpoint_id not in history.chain or ", "if ",
           ("tests/test_compaction_ahead.py", "-k", "no_longer_descends")),
    Mutant("handoff-planned-ahead-never-adopted", "services/handoff/compactor.py",
           "        if record is None:\n            return None\n        at = record.message_count\n",
           "        if True:\n            return None\n        at = record.message_count\n",
           ("tests/test_compaction_ahead.py", "-k", "without_calling_the_summarizer or carried")),
    Mutant("handoff-planned-before-an-edit-adopted", "services/handoff/compactor.py",
           "if record.changes != changes_of(notes):", "if False:",
           ("tests/test_compaction_ahead.py", "-k", "edit_after_the_plan")),
    Mutant("fork-leaves-a-stale-planned-handoff", "persistence/scripts.py",
           "if KEYS[7] then redis.call('DEL', KEYS[7]) end", "",
           ("tests/test_compaction_ahead.py", "-k", "without_calling_the_summarizer")),
    Mutant("handoff-planned-ahead-for-a-turn-awaiting-resume", "services/handoff/compactor.py",
           "        if await self.checkpoints.paused_turn(conversation_id) is not None:\n            return  # a turn",
           "        if False:\n            return  # a turn",
           ("tests/test_compaction_ahead.py", "-k", "awaits_resume")),
    Mutant("handoff-planned-ahead-kept-across-a-fork", "persistence/scripts.py",
           "  if redis.call('HGET', KEYS[2], at .. ':kind') ~= 'turn' then return 0 end\n", "",
           ("tests/test_compaction_ahead.py", "-k", "no_longer_descends")),
]



def run(mutant: Mutant, python: str) -> tuple[str, float]:
    """``killed``, ``survived`` or ``error: …`` (the text to break is missing or not unique), and seconds."""
    path = ROOT / mutant.path
    source = path.read_text()
    found = source.count(mutant.original)
    if found != 1:
        return f"error: the text to break occurs {found} times in {mutant.path}", 0.0
    start = time.monotonic()
    try:
        path.write_text(source.replace(mutant.original, mutant.broken))
        done = subprocess.run([python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                               *mutant.tests], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        path.write_text(source)
    seconds = time.monotonic() - start
    if done.returncode == 1:
        return "killed", seconds
    if done.returncode == 0:
        return "survived", seconds
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    return f"error: pytest exited {done.returncode} ({tail[0]})", seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Apply each one-line breakage, run its tests, and restore.")
    parser.add_argument("words", nargs="*", help="only mutants whose name contains one of these")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip checking first that the named tests pass on the unbroken code")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.words or any(w in m.name for w in args.words)]
    if args.list:
        for m in chosen:
            print(f"{m.name}  {m.path}  {' '.join(m.tests)}")
        return 0
    if not chosen:
        print(f"No mutant's name contains {' or '.join(args.words)}", file=sys.stderr)
        return 2
    # SIGTERM ends the run like Ctrl-C does, so the file being mutated is put back by the ``finally`` above.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if not args.no_baseline:  # a test failing on the unbroken code would count every mutant as killed
        for tests in dict.fromkeys(m.tests for m in chosen):
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if done.returncode != 0:
                print(f"The tests fail before any breakage ({' '.join(tests)}):\n{done.stdout[-2000:]}",
                      file=sys.stderr)
                return 2
    survived, errors = [], []
    for m in chosen:
        verdict, seconds = run(m, sys.executable)
        print(f"{verdict:<9} {m.name} ({seconds:.1f} s)", flush=True)
        if verdict == "survived":
            survived.append(m.name)
        elif verdict != "killed":
            errors.append(m.name)
    killed = len(chosen) - len(survived) - len(errors)
    print(f"{killed} of {len(chosen)} mutants killed; survived: {', '.join(survived) or 'none'}"
          + (f"; errors: {', '.join(errors)}" if errors else ""))
    return 1 if survived or errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("Interrupted; the file being broken was put back.", file=sys.stderr)
        sys.exit(130)
