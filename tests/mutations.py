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
           "and len(found) < NEIGHBOURS and", "and len(found) < 0 and",
           ("tests/test_recall.py", "-k", "neighbour_and_what_only")),
    Mutant("recall-neighbour-is-the-bots-reply", "services/recall/index.py",
           'if index.messages[near].role != "assistant":', "if True:",
           ("tests/test_recall.py", "-k", "next_persons_message")),
    Mutant("recall-author-field-unscored", "services/recall/index.py",
           "out = [(score + boost.get(self.authors[position], 0.0), position)",
           "out = [(score + 0.0, position)",
           ("tests/test_recall.py", "-k", "author_is_a_field")),
    Mutant("recall-nothing-found-by-author-alone", "services/recall/index.py",
           "                alone.append((gain, position))\n", "                pass\n",
           ("tests/test_recall.py", "-k", "author_is_a_field")),
    Mutant("memory-searched-by-a-rule-of-its-own", "services/memory/reading.py",
           "for w in search_terms(query) if index.search.documents[w] > 0",
           "for w in query.lower().split() if index.search.documents[w] > 0",
           ("tests/test_memory.py", "-k", "terms_recall_uses")),
    Mutant("retraction-rewrite-undoes-a-merge", "services/memory/forgetting.py",
           "removed=doomed, unchanged=hit)", "removed=doomed)",
           ("tests/test_memory_retraction.py", "-k", "merge_landing")),
    Mutant("reads-ignore-the-tombstones", "persistence/memory.py",
           "set() if retracted else gone, time.time()", "set() if True else gone, time.time()",
           ("tests/test_memory_retraction.py", "-k", "stopped_after")),
    Mutant("memory-sources-left-off-the-reply", "bot/delivery.py",
           "feedback_blocks(parts[-1], checkpoint_id, notice, await self._sources(client, conversation, sources)",
           "feedback_blocks(parts[-1], checkpoint_id, notice, None and await self._sources(client, conversation, sources)",
           ("tests/test_memory_slack.py", "-k", "cites_memory")),
    Mutant("memory-switched-on-waits-for-new-messages", "services/app.py",
           "        if on:\n            await self.memory_store.owe(", "        if False:\n            await self.memory_store.owe(",
           ("tests/test_memory_sweep.py", "-k", "switching_memory_on")),
    Mutant("memory-index-read-whole-after-every-change", "services/memory/reading.py",
           "changes = None if index is None else await self.store.changes(",
           "changes = None if True else await self.store.changes(",
           ("tests/test_memory.py", "-k", "indexed_by_itself")),
    Mutant("memory-index-blind-to-new-tombstones", "services/memory/reading.py",
           "        for mark in changes.gone - self.gone:", "        for mark in set():",
           ("tests/test_memory.py", "-k", "indexed_by_itself")),
    Mutant("lineage-tree-drops-forks", "bot/render.py",
           "            for fork in forks:", "            for fork in []:",
           ("tests/test_budget_and_cli.py", "-k", "lineage_tree_branches")),
    Mutant("budget-bar-counts-the-prompt-as-recent", "bot/render.py",
           'used["prompt" if i == 0 else "recall & memory"] += entry.tokens',
           'used["recent" if i == 0 else "recall & memory"] += entry.tokens',
           ("tests/test_preview.py", "-k", "budget_bar")),
    Mutant("google-api-keys-not-redacted", "services/safety/redact.py",
           'compile(r"\\bAIza[0-9A-Za-z_-]{30,}")', 'compile(r"\\bAIzz[0-9A-Za-z_-]{30,}")',
           ("tests/test_redaction.py",)),
    Mutant("token-assignments-not-redacted", "services/safety/redact.py",
           'master|shared[_-]?access)[_-]?key|token|credential|passphrase")',
           'master|shared[_-]?access)[_-]?key|credential|passphrase")',
           ("tests/test_redaction.py",)),
    # Secrets of any vendor, by shape and by name; identifiers near secret words left alone.
    Mutant("secret-shape-one-case-tokens-kept", "services/safety/redact.py",
           "bits, token = _MIN_BITS_ONE_CASE, joined", "return False",
           ("tests/test_redaction.py", "-k", "shape_or_its_name")),
    Mutant("secret-shape-long-tokens-without-digits-kept", "services/safety/redact.py",
           "bits, token = _MIN_BITS_NO_DIGITS, longest", "return False",
           ("tests/test_redaction.py", "-k", "shape_or_its_name")),
    Mutant("secret-shape-token-cut-at-its-base64-parts", "services/safety/redact.py",
           "start, end = _blob(text, m.start(), m.end(), covered)", "start, end = m.start(), m.end()",
           ("tests/test_redaction.py", "-k", "base64_parts")),
    Mutant("secret-name-keys-in-other-languages-kept", "services/safety/redact.py",
           "            if _token_shaped(value):\n", "            if False:\n",
           ("tests/test_redaction.py", "-k", "shape_or_its_name")),
    Mutant("secret-name-ticket-key-after-key-redacted", "services/safety/redact.py",
           " or _IDENTIFIER.fullmatch(value):", ":",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-name-assignment-about-a-secret-redacted", "services/safety/redact.py",
           "return bool(words) and _ABOUT.fullmatch(words[-1]) is None and",
           "return bool(words) and",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-name-assignment-only-when-the-name-ends-in-a-secret-word", "services/safety/redact.py",
           "return bool(words) and _ABOUT.fullmatch(words[-1]) is None and",
           "return bool(words) and _SECRET_WORD.search(words[-1]) is not None and",
           ("tests/test_redaction.py", "-k", "shape_or_its_name")),
    Mutant("secret-name-assignment-secret-word-inside-another-word", "services/safety/redact.py",
           " and any(_SECRET_WORD.search(w) for w in words)\n", "\n",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-name-file-or-variable-taken-for-the-secret", "services/safety/redact.py",
           'return value.startswith(("[REDACTED", "$", "{", "<", "%", "/", "~/", "./"))',
           'return value.startswith("[REDACTED")',
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-name-assignment-value-from-the-next-line", "services/safety/redact.py",
           """[:=][ \\t]*["']?)""", """[:=]\\s*["']?)""",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-shape-build-numbers-read-as-random", "services/safety/redact.py",
           "worded += sum(len(part) for part in _PARTS.split(token) if part.isdigit())", "worded += 0",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-shape-alphabet-read-as-random", "services/safety/redact.py",
           "return steps * 2 < len(token)", "return True",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-shape-hex-with-a-word-read-as-random", "services/safety/redact.py",
           "and not set(longest) <= _HEX and", "and",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
    Mutant("secret-shape-words-with-a-number-read-as-random", "services/safety/redact.py",
           "len(_KIND_CHANGE.findall(joined)) >= 6", "len(_KIND_CHANGE.findall(joined)) >= 2",
           ("tests/test_redaction.py", "-k", "near_secret_words")),
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
           "dead_registry_key(self.prefix), activity_key(self.prefix),", "dead_registry_key(self.prefix),",
           ("tests/test_store_contract.py", "-k", "forgetting_deletes")),
    Mutant("forgotten-conversation-left-in-the-directory", "persistence/forget.py",
           "activity_key(self.prefix),\n                         directory_key(self.prefix)):",
           "activity_key(self.prefix)):",
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
    Mutant("stream-begun-before-the-draft-flag-says-so", "bot/streaming.py",
           "                await self._ask(stream=True)\n"
           "                await self.stream.append(markdown_text=self.shown)  # chat.startStream\n",
           "                await self.stream.append(markdown_text=self.shown)  # chat.startStream\n"
           "                await self._ask(stream=True)\n",
           ("tests/test_slack_streaming.py", "tests/test_processes.py", "-k",
            "start_lost or (stream_begun and reads-current)")),
    Mutant("stranded-stream-given-up-before-slacks-reads-catch-up", "bot/streaming.py",
           "deadline=mark.since + READ_LAG_SECONDS)", "deadline=mark.since)",
           ("tests/test_slack_streaming.py", "tests/test_processes.py", "-k",
            "(start_lost or stream_begun) and reads-lag")),
    Mutant("reply-posted-beside-a-stream-that-may-still-show", "bot/delivery.py",
           "            return False  # a half-written reply may be in the thread: it goes before this one is posted",
           "            pass",
           ("tests/test_slack_streaming.py", "-k", "cannot_be_read")),
    Mutant("lease-lapses-while-recovery-waits-for-slacks-reads", "services/turn/executor.py",
           "renewing = asyncio.create_task(self._heartbeat(lease))", "renewing = asyncio.create_task(asyncio.sleep(0))",
           ("tests/test_slack_streaming.py", "-k", "lease_is_held")),
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
    Mutant("offline-console-imports-litellm", "threadkeeper/root.py",
           "        if is_offline(name):\n            continue\n"
           "        from threadkeeper.services.models._litellm import litellm\n",
           "        from threadkeeper.services.models._litellm import litellm\n"
           "        if is_offline(name):\n            continue\n",
           ("tests/test_budget_and_cli.py", "-k", "offline_console_starts")),
    Mutant("model-key-refused-read-as-a-passing-failure", "services/models/llm.py",
           "        except (litellm.AuthenticationError, litellm.PermissionDeniedError, litellm.NotFoundError) as exc:\n"
           "            raise self._refused(exc) from exc\n", "",
           ("tests/test_bad_settings.py", "-k", "refused or provider")),
    Mutant("redis-password-refusal-said-to-be-unreachable", "persistence/errors.py",
           "    if isinstance(cause, AuthenticationError):", "    if False:",
           ("tests/test_bad_settings.py", "-k", "password")),
    Mutant("redis-missing-database-said-to-be-unreachable", "persistence/errors.py",
           "database.isdigit() and int(database) > 0", "database == 'none'",
           ("tests/test_bad_settings.py", "-k", "database")),
    Mutant("redis-tls-mismatch-waits-for-every-retry", "persistence/connection.py",
           "        if isinstance(client, aioredis.Redis):\n            await _probe(client)\n", "",
           ("tests/test_bad_settings.py", "-k", "tls")),
    Mutant("half-set-slack-falls-back-to-the-console", "threadkeeper/cli.py",
           "    if half:\n        raise SettingsError(half)\n", "",
           ("tests/test_bad_settings.py", "-k", "slack")),
    Mutant("read-only-command-makes-an-empty-store", "threadkeeper/stores.py",
           "        if read_only and not embedded.exists():", "        if False:",
           ("tests/test_bad_settings.py", "-k", "only_reads")),
    Mutant("conversations-listed-by-a-scan-again", "persistence/store.py",
           "        if not await self._call(self.client.exists(directory_built_key(self.prefix))):",
           "        if True:",
           ("tests/test_conversations_list.py", "-k", "without_a_scan")),
    Mutant("a-written-turn-leaves-the-directory-stale", "persistence/store.py",
           "        return await self._run_then(name, *run, lambda pipe: self._listing(pipe, conversation_id, now))",
           "        return await self._run(name, *run)",
           ("tests/test_conversations_list.py", "-k", "every_write")),
    Mutant("context-counts-what-the-history-holds", "services/turn/preview.py",
           "so_far = messages_so_far(history.messages) if history is not None else 0",
           "so_far = len(history.messages) if history is not None else 0",
           ("tests/test_conversations_list.py", "-k", "one_message_count")),
    Mutant("conversations-count-what-the-head-checkpoint-holds", "persistence/store.py",
           "found = messages_so_far(await self._segment(keys, at, own)) if own > 0 else 0",
           "found = own",
           ("tests/test_conversations_list.py", "-k", "one_message_count")),
    Mutant("a-bad-setting-hides-its-traceback-at-debug-too", "threadkeeper/cli.py",
           '        log.debug("what led to the error below", exc_info=True)', "        pass",
           ("tests/test_bad_settings.py", "-k", "debug")),
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
