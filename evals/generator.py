"""A seeded generator of long, realistic Slack work threads with planted items and probes.

Threads mix small talk, status updates and pasted logs with planted items whose ground truth is
known: identifiers (ticket keys, URLs, SHAs, file paths, quantities), decisions (some reversed), open
asks, asks later superseded or resolved, constraints and preferences, pinned messages, and facts whose
message is later edited or deleted. Each planted item has a probe.

The output is the replay input format plus ``probes``; messages may also be edit or delete events
(``{"id", "author", "edits": ID, "text"}`` / ``{"id", "author", "deletes": ID, "text": ""}``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

PEOPLE = ["alice", "bob", "carol", "dan", "erin", "farid"]
SERVICES = ["billing", "payments-api", "ledger", "search", "notifications", "auth-gateway", "checkout", "reporting"]
PROJECTS = ["OPS", "PAY", "INFRA", "SRCH", "DATA", "SEC"]
TOOLS = [("Kafka", "NATS"), ("Postgres 16", "CockroachDB"), ("Terraform", "Pulumi"), ("gRPC", "REST"),
         ("blue-green deploys", "canary deploys"), ("Datadog", "Grafana Cloud"), ("Redis Streams", "SQS")]
SMALL_TALK = ["morning all", "coffee run, anyone?", "lol", "brb, standup", "nice", "happy friday!",
              "who's at the offsite next week?", "my build is still running…", "ugh, vpn again", "thanks!",
              "ok", "on it", "anyone seen the new dashboard colors?", "back", "lunch?", "+1"]
STATUS = ["{svc} deploy finished, error rate back to normal", "looking at the {svc} alerts now",
          "{svc} latency looks a bit higher than yesterday but within SLO", "reviewing the {svc} PR this afternoon",
          "{svc} canary is healthy so far", "I think the flaky test in {svc} is back", "pairing with {p} on {svc}",
          "the {svc} dashboard is slow to load again", "rebased the {svc} branch, CI is green"]


@dataclass
class Thread:
    conversation_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "messages": self.messages, "probes": self.probes}


class _Builder:
    def __init__(self, rng: random.Random, base_ts: int, conversation_id: str) -> None:
        self.rng = rng
        self.base_ts = base_ts
        self.thread = Thread(conversation_id)
        self.n = 0

    def next_id(self) -> str:
        self.n += 1
        return f"{self.base_ts + self.n}.{self.rng.randrange(1, 999_999):06d}"

    def say(self, text: str, author: str | None = None, **extra: Any) -> str:
        mid = self.next_id()
        self.thread.messages.append({"id": mid, "author": author or self.rng.choice(PEOPLE), "text": text,
                                     "ts": mid, **extra})
        return mid

    def probe(self, kind: str, question: str, answer: str, evidence: list[str], **extra: Any) -> None:
        self.thread.probes.append({"id": f"p{len(self.thread.probes) + 1}", "kind": kind, "question": question,
                                   "answer": answer, "evidence": evidence, **extra})

    def noise(self) -> None:
        r = self.rng.random()
        if r < 0.45:
            self.say(self.rng.choice(SMALL_TALK))
        elif r < 0.85:
            self.say(self.rng.choice(STATUS).format(svc=self.rng.choice(SERVICES), p=self.rng.choice(PEOPLE)))
        else:
            self.say(self.log_paste())

    def log_paste(self) -> str:
        svc = self.rng.choice(SERVICES)
        lines = []
        for i in range(self.rng.randint(4, 12)):
            ms = self.rng.randint(3, 900)
            lines.append(f"2025-03-{self.rng.randint(1, 28):02d}T10:{i:02d}:{self.rng.randint(0, 59):02d}Z "
                         f"{self.rng.choice(['INFO', 'WARN', 'ERROR'])} {svc} request handled in {ms}ms "
                         f"trace={self.rng.getrandbits(64):016x}")
        if self.rng.random() < 0.5:
            lines += ["Traceback (most recent call last):", f'  File "/srv/{svc}/app/handlers.py", line '
                      f"{self.rng.randint(10, 400)}, in handle", "    return self.backend.call(req)",
                      "TimeoutError: upstream did not answer in time"]
        return "here's what I'm seeing:\n```\n" + "\n".join(lines) + "\n```"


def _identifier(rng: random.Random, i: int) -> tuple[str, str, str]:
    kind = i % 5
    svc = rng.choice(SERVICES)
    if kind == 0:
        key = f"{rng.choice(PROJECTS)}-{rng.randint(100, 9999)}"
        return key, f"Filed {key} for the {svc} timeouts, please add notes there.", "ticket key"
    if kind == 1:
        url = f"https://grafana.example.com/d/{rng.getrandbits(40):010x}/{svc}-overview"
        return url, f"The dashboard for {svc} is {url}", "URL"
    if kind == 2:
        sha = f"{rng.getrandbits(40):010x}"
        while sha.isdigit() or sha.isalpha():
            sha = f"{rng.getrandbits(40):010x}"
        return sha, f"The regression came in with commit {sha} in {svc}.", "commit SHA"
    if kind == 3:
        path = f"services/{svc}/{rng.choice(['config', 'handlers', 'retry', 'schema'])}_{rng.randint(2, 99)}.py"
        return path, f"The retry settings live in {path} if anyone needs to change them.", "file path"
    qty = f"{rng.randint(120, 980)} ms"
    return qty, f"Measured p99 for {svc} at {qty} after the cache change.", "quantity"


def generate_thread(seed: int, *, messages: int = 1500, items: int = 24) -> Thread:
    """A thread of about ``messages`` messages with ``items`` planted items of each family spread across it."""
    rng = random.Random(seed)
    b = _Builder(rng, 1_700_000_000 + seed * 1_000_000, f"eval:thread-{seed}")
    plan: list[str] = []
    families = ["identifier"] * items + ["decision"] * max(2, items // 4) + ["ask"] * max(2, items // 4) + \
               ["constraint"] * max(2, items // 6) + ["pin"] * max(1, items // 12) + ["edit"] * max(1, items // 12)
    rng.shuffle(families)
    slots = sorted(rng.sample(range(10, max(11, messages - 40)), k=min(len(families), max(1, messages - 50))))
    plan = [""] * messages
    for slot, fam in zip(slots, families):
        plan[slot] = fam
    followups: dict[int, list[Any]] = {}
    ident_i = 0
    tool_i = 0
    for i in range(messages):
        for action in followups.pop(i, []):
            action()
        fam = plan[i]
        if not fam:
            b.noise()
            continue
        later = min(messages - 5, i + rng.randint(40, 300))
        if fam == "identifier":
            value, text, what = _identifier(rng, ident_i)
            ident_i += 1
            mid = b.say(text)
            b.probe("identifier", f"What is the {what} mentioned for this?", value, [mid])
        elif fam == "decision":
            old, new = TOOLS[tool_i % len(TOOLS)]
            tool_i += 1
            topic = rng.choice(SERVICES)
            mid = b.say(f"We decided to go with {old} for {topic}.", "alice")
            if rng.random() < 0.4:
                def reverse(old=old, new=new, topic=topic, mid=mid) -> None:
                    rid = b.say(f"Reversing the decision on {topic}: we decided to go with {new} instead of {old}.",
                                "bob")
                    b.probe("decision", f"What did we decide for {topic}?", f"go with {new}", [rid])
                    b.probe("reversed_decision", f"Is {old} still the choice for {topic}?", f"go with {old}",
                            [mid, rid])
                followups.setdefault(later, []).append(reverse)
            else:
                b.probe("decision", f"What did we decide for {topic}?", f"go with {old} for {topic}", [mid])
        elif fam == "ask":
            svc, who = rng.choice(SERVICES), rng.choice(PEOPLE)
            text = f"@threadkeeper can you draft the rollback checklist for {svc} before the freeze?"
            mid = b.say(text, who)
            fate = rng.random()
            if fate < 0.35:
                def supersede(svc=svc, who=who, mid=mid) -> None:
                    nid = b.say(f"Scratch that, instead can you draft the capacity plan for {svc} for Q3?", who)
                    b.probe("superseded_ask", f"Is the rollback checklist for {svc} still wanted?", "no",
                            [mid, nid])
                    b.probe("open_ask", f"What did {who} ask for {svc}?", f"capacity plan for {svc}", [nid])
                followups.setdefault(later, []).append(supersede)
            elif fate < 0.6:
                def resolve(svc=svc, mid=mid) -> None:
                    rid = b.say(f"Done: the rollback checklist for {svc} is drafted and linked in the runbook.")
                    b.probe("resolved_ask", f"Is the rollback checklist for {svc} still open?", "no", [mid, rid])
                followups.setdefault(later, []).append(resolve)
            else:
                b.probe("open_ask", f"What did {who} ask for {svc}?", f"rollback checklist for {svc}", [mid])
        elif fam == "constraint":
            svc = rng.choice(SERVICES)
            text = rng.choice([f"We must keep {svc} under 2 GB of memory per pod until the migration is done.",
                               f"Reminder: {svc} changes must not ship on Fridays this quarter.",
                               f"Carol prefers Terraform modules over raw HCL for anything touching {svc}."])
            mid = b.say(text)
            b.probe("constraint", f"What constraint applies to {svc}?", text, [mid])
        elif fam == "pin":
            text = f"Pinned: on-call handbook for {rng.choice(SERVICES)} is https://wiki.example.com/oncall/" \
                   f"{rng.getrandbits(24):06x}"
            mid = b.say(text, "erin", pinned=True)
            b.probe("pinned", "Where is the on-call handbook?", text, [mid])
        elif fam == "edit":
            svc = rng.choice(SERVICES)
            limit = rng.randint(200, 900)
            mid = b.say(f"The public rate limit for {svc} is {limit} req/s.", "dan")
            deleted = rng.random() < 0.5

            def change(mid=mid, svc=svc, limit=limit, deleted=deleted) -> None:
                if deleted:
                    b.say("", "dan", deletes=mid)
                else:
                    b.say(f"The public rate limit for {svc} is {limit // 2} req/s.", "dan", edits=mid)
                b.probe("suspect", f"What is the public rate limit for {svc}?",
                        f"The public rate limit for {svc} is {limit} req/s.", [mid])
            followups.setdefault(min(messages - 5, i + rng.randint(5, 30)), []).append(change)
    for i in sorted(followups):
        for action in followups[i]:
            action()
    return b.thread
