"""What ``threadkeeper bench`` writes: messages as a committed turn stores them, and conversations of them."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import lru_cache

from threadkeeper.persistence import CheckpointOutcome, CheckpointStore, Message, MessageFlags, Role, TextPart, Usage
from threadkeeper.services.models import Tokenizer
from threadkeeper.services.recall import Recall, line_counted
from threadkeeper.services.safety import redact_after
from threadkeeper.services.text import notes


def filler(n: int, i: int) -> str:
    """``n`` characters of message ``i`` (log-like prose that varies with ``i``)."""
    base = f"message {i}: the deploy of build {1000 + i} to eu-west-{i % 3} finished; latency p99 {i % 700} ms. "
    return (base * (n // len(base) + 1))[:n]


TOKENIZER = Tokenizer("gpt-4o")
"""The offline model's tokenizer: what a committed turn counts its messages and notes with."""


def committed(message: Message) -> Message:
    """``message`` as a committed turn stores it: its note and token counts made once."""
    note = notes.make_note(message.text, message.created_at) or ""
    message = message.model_copy(update={"note": note, "note_tokens": [TOKENIZER.count(" " + note)] if note else []})
    return line_counted(TOKENIZER.counted(message), TOKENIZER)


ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "api_key run": lambda n: ("api_key" * n)[:n],
    "api_key run then =": lambda n: ("api_key" * n)[:n - 1] + "=",
    "colon then api_key run": lambda n: ":" + ("api_key" * n)[:n - 1],
    "name characters with secret names": lambda n: ("ab.c-d_secret_token-" * n)[:n - 1] + "=",
    "a=": lambda n: ("a=" * n)[:n],
    "password is": lambda n: ("password is " * n)[:n],
    "one token character": lambda n: "x" * n,
    "token characters then =": lambda n: "x" * (n - 1) + "=",
    "a-": lambda n: ("a-" * n)[:n],
    "scheme characters then ://@": lambda n: ("a-" * n)[:n - 4] + "://@",
    "a random token then scheme characters": lambda n: "Zq8rT5vwX2yB7nM4kP9sL3dW " + ("a-" * n)[:n - 25],
    "always sentences": lambda n: ("You always answer in French. " * n)[:n],
    "always words": lambda n: ("tell x always " * n)[:n],
    "openings": lambda n: ("whenever x, please " * n)[:n],
    "second person verb then a long word": lambda n: "always devi " + "a" * n,
    "blank lines in a code block": lambda n: "```\n" + "\n" * n + "```",
    "spaces in a code block": lambda n: "```" + " " * n + "```",
}
"""Messages of about ``n`` characters built to make a text filter read the same characters again and again (a run
of name characters full of secret names, a run of scheme characters, one long token, many openings): any channel
member can send one."""


def redaction_ms_adversarial(n: int) -> float:
    """Milliseconds to redact the slowest of :data:`ADVERSARIAL`'s messages of ``n`` characters as a turn takes it,
    after its author's previous message (the same text): the fastest of three runs of each."""
    def once(text: str) -> float:
        started = time.perf_counter()
        redact_after(text, text)
        return time.perf_counter() - started

    return round(max(min(once(make(n)) for _ in range(3)) for make in ADVERSARIAL.values()) * 1000, 1)


@lru_cache(maxsize=12_000)
def message(i: int, role: Role = "user", chars: int = 400) -> Message:
    """A stored message as a committed turn writes it: token count and note computed once, and kept (messages are
    frozen): the bench writes the same first messages into many conversations (every history size, each compaction
    run, the listing)."""
    return committed(Message(id=f"{1700000000 + i}.000100" if role == "user" else f"a{i}", role=role,
                             parts=[TextPart(text=filler(chars, i))], author="U1" if role == "user" else None,
                             tokens=0, created_at=1_700_000_000.0 + i, ref=i + 1))


def note_cost_us(count: int = 2_000) -> float:
    """Microseconds to compute one message's note (what a commit adds per message), cache cold."""
    texts = [filler(300, 10_000_000 + i) for i in range(count)]
    notes._note.cache_clear()
    started = time.perf_counter()
    for i, text in enumerate(texts):
        notes.make_note(text, 1_700_000_000.0 + i)
    return round((time.perf_counter() - started) / count * 1e6, 1)


async def fill(store: CheckpointStore, cid: str, messages: int, *, per_turn: int = 2, chars: int = 400) -> str:
    """A conversation of ``messages`` messages, ``per_turn`` to a committed turn: each turn started holding its
    messages and then committed (two round trips, as a worker writes a turn whose messages it has), the user's
    and the assistant's alternating. Returns the head."""
    head: str | None = None
    for start in range(0, messages, per_turn):
        batch = [message(start + j, "user" if (start + j) % 2 == 0 else "assistant", chars)
                 for j in range(min(per_turn, messages - start))]
        cp = await store.start_turn(cid, parent_id=head, from_head=False, messages=batch)
        await store.commit(cid, cp.id, expected_head=head,
                           outcome=CheckpointOutcome(usage=Usage(input_tokens=sum(m.tokens for m in batch)),
                                                     usage_covered_messages=0))
        head = cp.id
    assert head is not None
    return head


def chat_text(rng: random.Random, words: int) -> str:
    """Chat-like text: words drawn from a skewed 20,000-word vocabulary (a few common, most rare)."""
    return " ".join(f"w{int(rng.paretovariate(0.8)) % 20_000}" for _ in range(words))


_CHAT: list[Message] = []
_CHAT_RNG = random.Random(7)


def chat_messages(count: int) -> list[Message]:
    """The first ``count`` messages of one chat (:func:`chat_text`, five people), as committed turns store them: made
    once per process, so many conversations of the same messages are written quickly."""
    while len(_CHAT) < count:
        i, rng = len(_CHAT), _CHAT_RNG
        text = chat_text(rng, rng.randint(8, 40))
        _CHAT.append(committed(Message(id=f"{1700000000 + i}.000100", role="user", parts=[TextPart(text=text)],
                                       author=f"U{i % 5}", tokens=0, created_at=1_700_000_000.0 + i, ref=i + 1)))
    return _CHAT[:count]


async def fill_epochs(store: CheckpointStore, cid: str, messages: int, *, per_epoch: int = 250,
                      per_turn: int = 10, recall: Recall | None = None) -> str:
    """A conversation of ``messages`` chat messages (:func:`chat_messages`) over compaction epochs of ``per_epoch``
    each. With ``recall``, each compaction is followed by what a worker's turn after it does for recall: its index
    takes the sealed epoch, and stores what it derived from it, and once its reply is out the runs its sealed epochs
    make (what a worker starting cold reads)."""
    chat = chat_messages(messages)
    head: str | None = None
    for start in range(0, messages, per_turn):
        if head is not None and start % per_epoch == 0:
            handoff = Message(id=f"h{start}", role="user", parts=[TextPart(text="[handoff]")], tokens=3,
                              flags=MessageFlags(handoff=True))
            fork = await store.fork_compaction(cid, forked_from=head, messages=[handoff], covered_ids=[])
            head = fork.id
            if recall is not None:
                await recall.sync(cid, await store.load_history(cid, head))
                await recall.after_reply(cid)
        cp = await store.start_turn(cid, parent_id=head, from_head=False)
        await store.append(cid, cp.id, chat[start:start + per_turn])
        await store.commit(cid, cp.id, expected_head=head)
        head = cp.id
    assert head is not None
    return head
