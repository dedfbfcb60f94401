"""Secret redaction for everything a handoff, a note, the stored ledger or the summarizer's input contains.

Four layers, each finding values that :func:`redact` replaces by a ``[REDACTED …]`` marker:

1. **Known formats**, from the rule set maintained by the ``detect-secrets`` project: every regex-based
   detector its plugin registry lists (Slack tokens and webhook URLs, AWS, GitHub, GitLab, SendGrid, Stripe,
   Azure storage ``AccountKey=``, JWTs, npm, PyPI, OpenAI, Twilio, …), except its public-IP rule (an address
   is not a secret). A newer ``detect-secrets`` brings its new formats with it.
2. **Formats it does not cover**: whole private-key blocks, model-provider and Google keys, GitHub
   fine-grained and Slack app tokens, Stripe test keys, ``Authorization:`` headers (``Basic``, ``Bearer``,
   …), passwords in URLs (also with no user name: ``redis://:pw@host``).
3. **What a secret is called**: the value of an assignment whose name says secret (``DB_PASSWORD=…``,
   ``"api_key": "…"``, ``AccountKey=…``; a value of digits only, such as ``max_tokens: 4096``, is left alone),
   and a password stated in prose, in English, German, French, Spanish, Portuguese or Italian ("the password
   for the staging db is X", "das Passwort ist X", "le mot de passe est X"): the word after "is" is the secret
   unless it is a common word of those languages ("the password is stored in the vault") or a number of
   fewer than 6 digits ("the token budget is 4096").
4. **Entropy**: a run of 20 or more letters, digits and ``+=_-`` that mixes upper case, lower case and digits
   and carries at least 3.9 bits of Shannon entropy per character, outside a URL's host and path (a document
   id in a link is not a secret; a signature in its query string may be). Hex-only ids (commit hashes, UUIDs)
   and words are never redacted by entropy.

:func:`secrets_in` gives the values themselves, so a summary can be checked for repeating one.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from functools import lru_cache

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector

from ..lexicon import common

_SKIPPED_DETECTORS = frozenset({"Public IP (ipv4)", "Basic Auth Credentials", "Private Key"})
"""Detectors not used: an IP address is not a secret; passwords in URLs and whole private-key blocks have
rules below that cover more (a URL with no user name; the key's body, not only its first line)."""


def _maintained_rules() -> list[tuple[str, re.Pattern[str], bool]]:
    """(marker, pattern, whether the pattern needs a word that names a secret: "key", "pwd", "token", …)."""
    rules: list[tuple[str, re.Pattern[str], bool]] = []
    # detect-secrets annotates the mapping with a type variable only its return mentions: its classes are plugins
    detectors: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in sorted(detectors.items()):
        if secret_type in _SKIPPED_DETECTORS or not issubclass(plugin, RegexBasedDetector):
            continue
        label = f"[REDACTED {secret_type.upper()}]"
        rules.extend((label, pattern, "(?:key|pwd" in pattern.pattern or "secret[-_]?" in pattern.pattern)
                     for pattern in plugin().denylist)
    return rules


_MAINTAINED = _maintained_rules()

_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                          r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)", re.DOTALL)
_OWN: list[tuple[str, re.Pattern[str], bool]] = [(label, pattern, False) for label, pattern in (
    ("[REDACTED SLACK TOKEN]", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}")),
    ("[REDACTED SLACK TOKEN]", re.compile(r"\bxapp-[A-Za-z0-9-]{10,}")),
    ("[REDACTED API KEY]", re.compile(r"\bsk-(?:ant-|proj-|live-)?[A-Za-z0-9_-]{16,}")),
    ("[REDACTED GITHUB TOKEN]", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("[REDACTED GITHUB TOKEN]", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("[REDACTED GITLAB TOKEN]", re.compile(r"\bgl[a-z]{2,6}-[A-Za-z0-9_-]{20,}")),
    ("[REDACTED STRIPE KEY]", re.compile(r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("[REDACTED AWS KEY]", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    ("[REDACTED API KEY]", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
)]

_HEADER = re.compile(r"(?i)\b((?:proxy-)?authori[sz]ation\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest|negotiate|"
                     r"apikey|sharedaccesssignature)\s+)?)([^\s\"',;]{6,})")
_BEARER = re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)")
_SCHEME = (r"(?<![a-z0-9+.-])(?=[a-z0-9+.-]*+://)(?>[a-z0-9+.-]*?\b(?=[a-z]))"
           r"([a-z][a-z0-9+.-]*+://)")
"""A URL's scheme and ``://`` (its group 1), found in one look at the run of scheme characters before ``://``: a
match starts only where such a run starts, and settles on the first place in it a scheme may begin (after a
non-word character), so a long run of ``a-a-a-…`` costs its length once, not once for each place in it."""
_URL_PASSWORD = re.compile(_SCHEME + r"([^\s:/@]*:)([^\s@/]+)@")

_SECRET_NAME = re.compile(r"(?i)passw(?:or)?d|pwd|secret|api[_-]?key|(?:access|account|private|signing|encryption|"
                          r"master|shared[_-]?access)[_-]?key|token|credential|passphrase")
_SECRET_WORDS = ("passw", "pwd", "secret", "key", "token", "credential", "passphrase")
_NAME_RUN = re.compile(r"[\w.-]+")
"""A run of the characters a name is made of (letters and digits of any script, ``_``, ``.``, ``-``)."""
_ASSIGNMENT = re.compile(r"""([A-Za-z0-9_.-]+["']?\s*[:=]\s*["']?)([^\s,;'"]{6,})""")

_PROSE = re.compile(
    r"(?i)\b(?:passwords?|passwd|passphrase|passcode|pin code|api key|secret key|access token|"
    r"passwort|kennwort|mot de passe|contraseña|contrasena|clave|senha|palavra-passe|parola d'ordine)\b"
    r"[^.!?;\n]{0,60}?\b(?:is|was|are|ist|lautet|war|est|était|es|era|é|è|sono|sind)\s*:?\s+"
    r"[\"'`“«]?([^\s\"'`”»]{4,})")
_PROSE_WORDS = ("passw", "passc", "passphrase", "pin code", "api key", "secret key", "access token", "kennwort",
                "mot de passe", "contrase", "clave", "senha", "palavra-passe", "parola d")

_URL = re.compile(_SCHEME + r"[^\s<>|?#]*")
_VALUE = re.compile(r"[\w-]{24,}")
_LONG = re.compile(r"[\w+/=.\-]{12,}")
_RUN = re.compile(r"(?<![A-Za-z0-9+_-])[A-Za-z0-9+_-]{20,}={0,3}(?![A-Za-z0-9+=_-])")
_SEGMENT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_MIN_BITS = 3.9
_EDGES = frozenset(" \t\n\"'=:")


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())


def _random_looking(token: str) -> bool:
    if not (any(c.isupper() for c in token) and any(c.islower() for c in token)
            and sum(c.isdigit() for c in token) >= 2):
        return False
    if _entropy(token) < _MIN_BITS:
        return False
    worded = sum(len(s) for s in _SEGMENT.findall(token) if len(s) >= 3 and common(s.lower(), languages=("en",)))
    return worded * 2 < len(token)  # an identifier made of words (getUserById2024Handler) is not random


@lru_cache(maxsize=4096)
def _common_word(word: str) -> bool:
    word = word.strip(".,;:!?)").lower()
    return common(word)


def _windows(text: str) -> list[tuple[int, int]]:
    """Where layers 1, 2 and 4 look: around each run of 12 or more token characters that is not a plain word
    (it holds a digit, one of ``_+/=`` or a capital after its first letter), from 64 characters before it (a rule may
    need the name before a value) to just after it. Every format those layers know is such a run, and most
    messages have none, so most text is never scanned by their patterns."""
    out: list[tuple[int, int]] = []
    for m in _LONG.finditer(text):
        token = m.group()
        if not (any(c.isdigit() or c in "_+/=" for c in token) or not token[1:].islower()):
            continue  # words, hyphenated or dotted ("follow-up-meeting", "example.com") are no secret
        start, end = max(0, m.start() - 64), min(len(text), m.end() + 8)
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _found(text: str) -> list[tuple[int, int, str]]:
    """Spans (start, end, marker) of secret values in ``text``, possibly overlapping."""
    spans: list[tuple[int, int, str]] = []
    low = text.lower()
    named = any(word in low for word in _SECRET_WORDS) or "pw" in low or "pass" in low
    windows = _windows(text)
    if "PRIVATE KEY" in text:
        spans.extend((m.start(), m.end(), "[REDACTED PRIVATE KEY]") for m in _PRIVATE_KEY.finditer(text))
    # the rules that need a secret's name before its value all need a value of 24 characters or more
    valued = [(a, b) for a, b in windows if _VALUE.search(text, a, b)] if named else []
    for label, pattern, needs_name in (*_MAINTAINED, *_OWN):
        for m in (m for start, end in (valued if needs_name else windows) for m in pattern.finditer(text, start, end)):
            start, end = m.span()
            while start < end and text[start] in _EDGES:  # some rules match the delimiter around a value
                start += 1
            while end > start and text[end - 1] in _EDGES and text[end - 1] != "=":
                end -= 1
            if end > start:
                spans.append((start, end, label))
    if "auth" in low:
        spans.extend((m.start(2), m.end(2), "[REDACTED]") for m in _HEADER.finditer(text))
    if "earer" in low:
        spans.extend((m.start(2), m.end(2), "[REDACTED]") for m in _BEARER.finditer(text))
    if "://" in text and "@" in text:
        spans.extend((m.start(3), m.end(3), "[REDACTED]") for m in _URL_PASSWORD.finditer(text))
    if ("=" in text or ":" in text) and named and _SECRET_NAME.search(text):
        spans.extend(_assignments(text))
    if any(word in low for word in _PROSE_WORDS):
        for m in _PROSE.finditer(text):
            value = m.group(1).rstrip(".,;:!?)")
            if len(value) >= 4 and not _common_word(value) and not value.startswith("[REDACTED") \
                    and not (value.isdigit() and len(value) < 6):  # "the token budget is 4096"
                spans.append((m.start(1), m.start(1) + len(value), "[REDACTED]"))
    urls: list[tuple[int, int]] | None = None
    for m in (m for start, end in windows for m in _RUN.finditer(text, start, end)):
        if _random_looking(m.group()):
            if urls is None:
                urls = [(u.start(1), u.end()) for u in _URL.finditer(text)]
            if not any(a <= m.start() < b for a, b in urls):
                spans.append((m.start(), m.end(), "[REDACTED HIGH ENTROPY STRING]"))
    return spans


def _assignments(text: str) -> list[tuple[int, int, str]]:
    """Values of assignments whose name says secret (``DB_PASSWORD=…``, ``"api_key": "…"``): found from each
    name that says secret, so a long log costs in proportion to those names, not to its assignments. An assignment
    is read once from the start of the run of name characters that holds the name ("aws_secret_access_key",
    "DB_PASSWORD"), however many names that say secret the run holds, so a run of 40,000 characters costs its
    length, not its length once for each name in it."""
    out = []
    done = -1
    tried = -1
    runs = _NAME_RUN.finditer(text)
    run = next(runs, None)
    for name in _SECRET_NAME.finditer(text):
        while run is not None and run.end() <= name.start():
            run = next(runs, None)
        start = run.start() if run is not None and run.start() <= name.start() else name.start()
        if start <= done or start == tried:
            continue  # inside the last assignment, or its run was read already
        tried = start
        match = _ASSIGNMENT.match(text, start)
        if match is None or not _SECRET_NAME.search(match.group(1)):
            continue
        value = match.group(2)
        if not value.startswith("[REDACTED") and not value.isdigit():
            out.append((match.start(2), match.end(2), "[REDACTED]"))
        done = match.end(2)
    return out


def _merged(text: str) -> list[tuple[int, int, str]]:
    """Non-overlapping spans; of two that overlap, the one that starts first (the longer on a tie) wins and
    is widened to cover both."""
    out: list[tuple[int, int, str]] = []
    for start, end, label in sorted(_found(text), key=lambda s: (s[0], -s[1])):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2])
        else:
            out.append((start, end, label))
    return out


def secrets_in(text: str) -> set[str]:
    """The secret values :func:`redact` would remove from ``text``."""
    return {text[start:end] for start, end, _ in _merged(text)}


def redact(text: str) -> str:
    """``text`` with every secret value the module's rules find replaced by a marker naming its kind."""
    spans = _merged(text)
    if not spans:
        return text
    out, last = [], 0
    for start, end, label in spans:
        out += [text[last:start], label]
        last = end
    out.append(text[last:])
    return "".join(out)
