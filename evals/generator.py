"""A seeded generator of long, realistic Slack threads with planted items and probes.

Threads mix chatter, status updates and pasted logs with planted items whose ground truth is known:
identifiers (ticket keys, URLs, SHAs, file paths, quantities, names, places, dates), decisions (some
reversed), asks to the bot (some superseded or resolved later), constraints and preferences, pinned
messages, and facts whose message is later edited or deleted. Each planted item has a probe.

Styles (``style=``):

* ``"work"``: an engineering thread over several working days.
* ``"casual"``: 2–3 friends chatting over several weeks in sessions hours or days apart; mostly chatter
  and questions to each other, with facts people tell about themselves.
* ``"multilingual"``: a work thread where about a third of the messages (planted ones included) are in
  Spanish, German or Japanese; identifiers stay the answers.
* ``"messy"``: a work thread with long pasted logs and stack traces, and messages (planted decisions
  among them) whose ``ts`` is earlier than the previous message's: posted while the bot was thinking,
  delivered late.

The output is the replay input format plus ``probes``: messages carry ``ts`` (Slack seconds since the
epoch; also the id) and ``reply`` (true only for messages addressed to the bot); a message may also be
an edit or delete event (``{"id", "author", "edits": ID, "text"}`` / ``{"id", "author", "deletes": ID,
"text": ""}``). Suspect probes say which happened in ``change`` (``"edited"`` / ``"deleted"``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import phrases as ph

STYLES = ("work", "casual", "multilingual", "messy")
_LATE_SHARE = 0.075
"""Share of a messy thread's chatter delivered late (its ts 1–30 s before the previous message's)."""


@dataclass
class Thread:
    """One generated thread: replay messages plus the probes that grade what a context kept."""

    conversation_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"conversation_id": self.conversation_id, "messages": self.messages, "probes": self.probes}


class _Builder:
    """Appends messages on a clock that runs in sessions (working days, or chats hours/days apart)."""

    def __init__(self, rng: random.Random, start: int, conversation_id: str, style: str) -> None:
        self.rng = rng
        self.style = style
        self.thread = Thread(conversation_id)
        self.clock = float(start)
        self.last = float(start)
        self.session_left = 0
        self.ids: set[str] = set()
        self.people = rng.sample(ph.FRIENDS, rng.choice([2, 3])) if style == "casual" else ph.PEOPLE
        self.last_asker = ""
        self.pending: list[tuple[str, str]] = []
        self.counts: dict[str, int] = {}

    def _advance(self) -> float:
        rng = self.rng
        if self.session_left <= 0:
            if self.style == "casual":
                self.session_left = rng.randint(8, 40)
                self.clock += rng.uniform(3 * 3600, 3 * 86400)
            else:
                self.session_left = rng.randint(80, 200)
                self.clock += rng.uniform(14 * 3600, 17 * 3600)
        self.session_left -= 1
        self.clock += rng.uniform(10, 300) if self.style == "casual" else rng.uniform(5, 240)
        return self.clock

    def _stamp(self, t: float) -> str:
        while True:
            mid = f"{int(t)}.{self.rng.randrange(1, 999_999):06d}"
            if mid not in self.ids:
                self.ids.add(mid)
                return mid

    def person(self, besides: str = "") -> str:
        return self.rng.choice([p for p in self.people if p != besides] or self.people)

    def say(self, text: str, author: str | None = None, *, late: bool = False, **extra: Any) -> str:
        """Post a message; ``late`` gives it a ts 1–30 s before the previous message's (delivered late)."""
        t = self.last - self.rng.uniform(2, 29) if late and self.thread.messages else self._advance()
        mid = self._stamp(t)
        self.last = float(mid)
        author = author or self.person()
        reply = text.startswith(ph.BOT)
        if reply:
            self.last_asker = author
        self.thread.messages.append({"id": mid, "author": author, "text": text, "ts": mid, "reply": reply, **extra})
        return mid

    def probe(self, kind: str, question: str, answer: str, evidence: list[str], **extra: Any) -> None:
        self.thread.probes.append({"id": f"p{len(self.thread.probes) + 1}", "kind": kind, "question": question,
                                   "answer": answer, "evidence": evidence, **extra})

    def counter(self, name: str) -> int:
        """How many items of ``name`` were planted before this one (cycles identifier kinds and tools)."""
        self.counts[name] = self.counts.get(name, 0) + 1
        return self.counts[name] - 1

    def lang(self) -> str:
        """The language of the next message: English, or in a multilingual thread a third of the time not."""
        if self.style == "multilingual" and self.rng.random() < 1 / 3:
            return self.rng.choice(ph.LANGS)
        return "en"

    # chatter ------------------------------------------------------------------------------------------

    def noise(self) -> None:
        rng = self.rng
        if self.style == "casual":
            self._casual_noise()
            return
        late = self.style == "messy" and rng.random() < _LATE_SHARE
        lang, r = self.lang(), rng.random()
        paste = 0.25 if self.style == "messy" else 0.15
        if r < 0.02:
            self.say(rng.choice(["{bot} thanks!", "{bot} can you help?", "{bot} what time is it in UTC?"])
                     .format(bot=ph.BOT), late=late)
        elif r < 0.45:
            text = rng.choice(ph.SMALL_TALK[lang])
            author = self.person(besides=self.last_asker) if text.startswith("nvm") else None
            self.say(text, author, late=late)
        elif r < 1 - paste:
            self.say(rng.choice(ph.STATUS[lang]).format(svc=rng.choice(ph.SERVICES), p=self.person()), late=late)
        else:
            self.say(self.long_paste() if self.style == "messy" else self.log_paste(), late=late)

    def _casual_noise(self) -> None:
        rng = self.rng
        if self.pending:
            text, author = self.pending.pop(0)
            self.say(text, author)
            return
        if rng.random() < 0.45:
            question, answers = rng.choice(ph.CASUAL_EXCHANGES)
            asker = self.person()
            self.say(question, asker)
            self.pending.append((rng.choice(answers), self.person(besides=asker)))
            return
        text = rng.choice(ph.CASUAL_CHATTER)
        self.say(text, self.person(besides=self.last_asker) if text.startswith("nvm") else None)

    def log_paste(self) -> str:
        svc = self.rng.choice(ph.SERVICES)
        lines = self._log_lines(svc, self.rng.randint(4, 12))
        if self.rng.random() < 0.5:
            lines += ["Traceback (most recent call last):", f'  File "/srv/{svc}/app/handlers.py", line '
                      f"{self.rng.randint(10, 400)}, in handle", "    return self.backend.call(req)",
                      "TimeoutError: upstream did not answer in time"]
        return "here's what I'm seeing:\n```\n" + "\n".join(lines) + "\n```"

    def _log_lines(self, svc: str, n: int) -> list[str]:
        rng = self.rng
        return [f"2025-03-{rng.randint(1, 28):02d}T10:{i % 60:02d}:{rng.randint(0, 59):02d}Z "
                f"{rng.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} {svc} request handled in {rng.randint(3, 900)}ms "
                f"trace={rng.getrandbits(64):016x}" for i in range(n)]

    def long_paste(self) -> str:
        """A 40–150 line paste: logs with a Python, Java or Go stack trace in the middle."""
        rng = self.rng
        svc = rng.choice(ph.SERVICES)
        total = rng.randint(40, 150)
        kind = rng.choice(["python", "java", "go"])
        trace: list[str]
        if kind == "python":
            trace = ["Traceback (most recent call last):"]
            for _ in range(rng.randint(6, 20)):
                trace += [f'  File "/srv/{svc}/app/{rng.choice(["handlers", "client", "retry", "db"])}.py", '
                          f"line {rng.randint(10, 900)}, in {rng.choice(['handle', 'call', '_send', 'execute'])}",
                          f"    {rng.choice(['return self.backend.call(req)', 'resp = await conn.fetch(q)'])}"]
            trace.append(rng.choice(["TimeoutError: upstream did not answer in time",
                                     "KeyError: 'tenant_id'", "ConnectionResetError: [Errno 104] reset by peer"]))
        elif kind == "java":
            trace = [f'Exception in thread "worker-{rng.randint(1, 64)}" java.lang.IllegalStateException: '
                     f"{svc} pool exhausted"]
            trace += [f"\tat com.example.{svc.replace('-', '')}.{rng.choice(['Handler', 'Pool', 'Client'])}."
                      f"{rng.choice(['handle', 'acquire', 'send'])}({rng.choice(['Handler', 'Pool'])}.java:"
                      f"{rng.randint(20, 700)})" for _ in range(rng.randint(10, 40))]
            trace += ["Caused by: java.net.SocketTimeoutException: Read timed out", "\t... 27 more"]
        else:
            trace = ["panic: runtime error: invalid memory address or nil pointer dereference",
                     "[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x4b2f1d]", ""]
            for g in range(rng.randint(2, 6)):
                trace.append(f"goroutine {rng.randint(1, 900)} [{rng.choice(['running', 'select', 'IO wait'])}]:")
                for _ in range(rng.randint(3, 8)):
                    trace += [f"{svc.replace('-', '')}/internal.{rng.choice(['serve', 'dial', 'flush'])}(...)",
                              f"\t/src/{svc}/internal/server.go:{rng.randint(10, 600)} +0x{rng.getrandbits(12):x}"]
                trace.append("")
        logs = self._log_lines(svc, max(0, total - len(trace)))
        cut = rng.randint(0, len(logs))
        lines = (logs[:cut] + trace + logs[cut:])[:total]
        intro = rng.choice(["full log from the last run:", "stack trace from prod, sorry it's long", "this again:"])
        return intro + "\n```\n" + "\n".join(lines) + "\n```"


Followups = dict[int, list[Callable[[], None]]]


def _identifier_value(rng: random.Random, i: int, svc: str) -> tuple[str, str]:
    kind = i % 5
    if kind == 0:
        return f"{rng.choice(ph.PROJECTS)}-{rng.randint(100, 9999)}", "ticket key"
    if kind == 1:
        return f"https://grafana.example.com/d/{rng.getrandbits(40):010x}/{svc}-overview", "URL"
    if kind == 2:
        sha = f"{rng.getrandbits(40):010x}"
        while sha.isdigit() or sha.isalpha():
            sha = f"{rng.getrandbits(40):010x}"
        return sha, "commit SHA"
    if kind == 3:
        return (f"services/{svc}/{rng.choice(['config', 'handlers', 'retry', 'schema'])}_{rng.randint(2, 99)}.py",
                "file path")
    return f"{rng.randint(120, 980)} ms", "quantity"


def _plant_work(b: _Builder, fam: str, i: int, later: int, followups: Followups) -> None:
    """Plant one work item of family ``fam`` (its later reversal, supersession or edit goes to ``followups``)."""
    rng = b.rng
    lang = b.lang()
    if fam == "identifier":
        svc = rng.choice(ph.SERVICES)
        value, what = _identifier_value(rng, b.counter("identifier"), svc)
        mid = b.say(rng.choice(ph.IDENTIFIERS[lang][what]).format(v=value, svc=svc))
        b.probe("identifier", ph.IDENTIFIER_QUESTIONS[what].format(svc=svc), value, [mid])
    elif fam == "decision":
        old, new = ph.TOOLS[b.counter("decision") % len(ph.TOOLS)]
        topic = rng.choice(ph.SERVICES)
        text, answer = (s.format(x=old, t=topic) for s in rng.choice(ph.DECISIONS[lang]))
        mid = b.say(text, late=b.style == "messy" and rng.random() < 0.5)
        if rng.random() < 0.4:
            def reverse(old: str = old, new: str = new, topic: str = topic, mid: str = mid,
                        first: str = answer) -> None:
                rtext, ranswer = (s.format(old=old, new=new, t=topic) for s in rng.choice(ph.REVERSALS[b.lang()]))
                rid = b.say(rtext, late=b.style == "messy" and rng.random() < 0.5)
                b.probe("decision", f"What did we decide for {topic}?", ranswer, [rid])
                b.probe("reversed_decision", f"Is {old} still the choice for {topic}?", first, [mid, rid])
            followups.setdefault(later, []).append(reverse)
        else:
            b.probe("decision", f"What did we decide for {topic}?", answer, [mid])
    elif fam == "ask":
        svc, who, d = rng.choice(ph.SERVICES), b.person(), rng.choice(ph.DELIVERABLES)
        mid = b.say(rng.choice(ph.ASKS[lang]).format(bot=ph.BOT, d=d, svc=svc), who)
        fate = rng.random()
        if fate < 0.35:
            def supersede(svc: str = svc, who: str = who, mid: str = mid, d: str = d) -> None:
                nid = b.say(rng.choice(ph.SUPERSEDES[b.lang()]).format(bot=ph.BOT, old=d, svc=svc), who)
                b.probe("superseded_ask", f"Is the {d} for {svc} still wanted?", "no", [mid, nid])
                b.probe("open_ask", f"What did {who} ask for {svc}?", f"capacity plan for {svc}", [nid])
            followups.setdefault(later, []).append(supersede)
        elif fate < 0.6:
            def resolve(svc: str = svc, mid: str = mid, d: str = d, who: str = who) -> None:
                rid = b.say(rng.choice(ph.RESOLVES[b.lang()]).format(d=d, svc=svc), b.person(besides=who))
                b.probe("resolved_ask", f"Is the {d} for {svc} still open?", "no", [mid, rid])
            followups.setdefault(later, []).append(resolve)
        else:
            b.probe("open_ask", f"What did {who} ask for {svc}?", f"{d} for {svc}", [mid])
    elif fam == "constraint":
        svc = rng.choice(ph.SERVICES)
        text = rng.choice(ph.CONSTRAINTS[lang]).format(svc=svc)
        b.probe("constraint", f"What constraint applies to {svc}?", text, [b.say(text)])
    elif fam == "pin":
        url = f"https://wiki.example.com/oncall/{rng.getrandbits(24):06x}"
        text = rng.choice(ph.PINS[lang]).format(svc=rng.choice(ph.SERVICES), url=url)
        b.probe("pinned", "Where is the on-call handbook?", text, [b.say(text, pinned=True)])
    elif fam == "edit":
        svc, limit, template = rng.choice(ph.SERVICES), rng.randint(200, 900), rng.choice(ph.LIMITS[lang])
        _plant_suspect(b, template.format(svc=svc, n=limit), template.format(svc=svc, n=limit // 2),
                       f"What is the public rate limit for {svc}?", i, followups)


def _plant_suspect(b: _Builder, text: str, corrected: str, question: str, i: int, followups: Followups) -> None:
    """A fact whose message is edited (to ``corrected``) or deleted a few messages later."""
    author = b.person()
    mid = b.say(text, author)
    deleted = b.rng.random() < 0.5

    def change() -> None:
        if deleted:
            b.say("", author, deletes=mid)
        else:
            b.say(corrected, author, edits=mid)
        b.probe("suspect", question, text, [mid], change="deleted" if deleted else "edited")
    followups.setdefault(i + b.rng.randint(5, 30), []).append(change)


def _plant_casual(b: _Builder, fam: str, i: int, later: int, followups: Followups) -> None:
    """Plant one item in a chat among friends: facts about themselves, plans, asks to the bot."""
    rng = b.rng
    who = b.person()
    if fam == "identifier":
        template, question, what = rng.choice(ph.CASUAL_FACTS)
        pet, names = rng.choice(ph.PETS)
        value = {"pet": rng.choice(names), "city": rng.choice(ph.CITIES),
                 "date": f"{rng.randint(1, 28)} {rng.choice(ph.MONTHS)}",
                 "time": f"1:{rng.randint(35, 59)}:{rng.randint(0, 59):02d}",
                 "money": f"{rng.randint(1, 3)},{rng.randint(1, 9)}50",
                 "instrument": rng.choice(ph.INSTRUMENTS)}[what]
        mid = b.say(template.format(pet=pet, v=value, month=rng.choice(ph.MONTHS)), who)
        b.probe("identifier", question.format(who=who, pet=pet), value, [mid])
    elif fam == "decision":
        template, question = rng.choice(ph.CASUAL_PLANS)
        pool = ph.RESTAURANTS if "dinner" in template else ph.CITIES
        old, new = rng.sample(pool, 2)
        mid = b.say(template.format(v=old), who)
        if rng.random() < 0.3:
            def reverse(old: str = old, new: str = new, mid: str = mid, question: str = question) -> None:
                rid = b.say(f"change of plan: {old} fell through, we're going with {new} instead", b.person())
                b.probe("decision", question, new, [rid])
                b.probe("reversed_decision", f"Is {old} still the plan?", old, [mid, rid])
            followups.setdefault(later, []).append(reverse)
        else:
            b.probe("decision", question, old, [mid])
    elif fam == "ask":
        city = rng.choice(ph.CITIES)
        mid = b.say(rng.choice(ph.CASUAL_ASKS).format(bot=ph.BOT, v=city), who)
        if rng.random() < 0.35:
            def supersede(mid: str = mid, who: str = who, city: str = city) -> None:
                nid = b.say(f"{ph.BOT} scratch that, instead can you find a sushi place near {city}?", who)
                b.probe("superseded_ask", f"Does {who} still want the first request for {city}?", "no", [mid, nid])
                b.probe("open_ask", f"What did {who} ask for?", f"sushi place near {city}", [nid])
            followups.setdefault(later, []).append(supersede)
        else:
            b.probe("open_ask", f"What did {who} ask the bot about {city}?", city, [mid])
    elif fam == "constraint":
        text = rng.choice(ph.CASUAL_CONSTRAINTS)
        b.probe("constraint", f"What should we keep in mind for {who}?", text, [b.say(text, who)])
    elif fam == "pin":
        text = f"Pinned: shared trip doc is https://docs.example.com/trip/{rng.getrandbits(24):06x}"
        b.probe("pinned", "Where is the trip doc?", text, [b.say(text, who, pinned=True)])
    elif fam == "edit":
        hh, mm = rng.randint(7, 22), rng.choice([5, 10, 25, 40, 55])
        _plant_suspect(b, f"my flight lands at {hh}:{mm:02d} on Friday", f"my flight lands at {hh - 1}:{mm:02d} "
                       "on Friday", "When does the flight land on Friday?", i, followups)


MIN_MESSAGES = 100
"""The fewest messages a generated thread has room for its planted facts and their follow-ups in."""


def generate_thread(seed: int, *, messages: int = 1500, items: int = 24, style: str = "work") -> Thread:
    """A thread of about ``messages`` messages (at least :data:`MIN_MESSAGES`) with ``items`` planted identifiers (and
    proportionally fewer decisions, asks, constraints, pins and edited facts) spread across it, in the given
    ``style``."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; expected one of {', '.join(STYLES)}")
    if messages < MIN_MESSAGES:
        raise ValueError(f"a generated thread needs at least {MIN_MESSAGES} messages, not {messages}")
    rng = random.Random(f"{style}:{seed}" if style != "work" else seed)
    b = _Builder(rng, 1_700_000_000 + seed * 1_000_000, f"eval:thread-{seed}" + ("" if style == "work" else
                                                                                 f"-{style}"), style)
    families = ["identifier"] * items + ["decision"] * max(2, items // 4) + ["ask"] * max(2, items // 4) + \
               ["constraint"] * max(2, items // 6) + ["pin"] * max(1, items // 12) + ["edit"] * max(1, items // 12)
    rng.shuffle(families)
    room = max(1, messages - 50) if style != "casual" else max(1, messages // 4)
    slots = sorted(rng.sample(range(10, max(11, messages - 40)), k=min(len(families), room, max(1, messages - 50))))
    plan = [""] * messages
    for slot, fam in zip(slots, families):
        plan[slot] = fam
    plant = _plant_casual if style == "casual" else _plant_work
    followups: Followups = {}
    for i in range(messages):
        for action in followups.pop(i, []):
            action()
        if plan[i]:
            plant(b, plan[i], i, min(messages - 5, i + rng.randint(40, 300)), followups)
        else:
            b.noise()
    for i in sorted(followups):
        for action in followups[i]:
            action()
    return b.thread
