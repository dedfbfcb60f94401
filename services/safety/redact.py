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
   ``"api_key": "…"``, ``AccountKey=…``; not ``credentialsId: …`` or ``access_token_url=…``, which name something
   about a secret, nor ``${DB_PASSWORD}``, which says where it is; a value of digits only, such as
   ``max_tokens: 4096``, is left alone), a password stated in prose, in English, German, French, Spanish, Portuguese or Italian ("the password for the staging
   db is X", "das Passwort ist X", "le mot de passe est X"): the word after "is" is the secret unless it is a common
   word of those languages ("the password is stored in the vault") or a number of fewer than 6 digits ("the token
   budget is 4096"); and a value stated after a word for a key, a token, a secret or credentials in those languages
   ("the stripe key is …", "der Schlüssel lautet …", "la clé est …", "deploy token: …") when it is shaped like a token
   (letters and digits; hex and UUIDs too), never a ticket key or a version ("the key ticket is OPS-4471").
4. **Entropy**: a run of 16 or more letters, digits and ``+_~-`` (dots inside it) that reads as drawn at random (see
   :func:`_random_looking`: both cases with digits; one case with digits in three places or more; a long part of both
   cases without digits), is not made of words and numbers, and lies outside a URL's host and path (a document id in
   a link is not a secret; a signature in its query string may be). The whole token it belongs to goes with it (a
   prefix, base64's ``/ + =``). Hex-only ids (commit hashes, UUIDs, checksums) and words are never redacted by
   entropy: a hex secret is found by its name (layer 3).

Measured on secrets this project did not write: ``threadkeeper eval redaction --source gitleaks --path DIR``
(docs/safety.md).

What it costs: layers 1, 2 and 4 look only around runs of token characters (:func:`_windows`), and a rule runs on
such a part only when it holds the strings every match of the rule holds (``AKIA``, ``xox``, ``=`` or ``:``), read
from the rule's own pattern (:mod:`.literals`); the patterns that ignore case and read the whole text (a name that
says secret, a password in prose, an ``Authorization`` header) are tried only where one of the words they start with
starts. Neither changes what is found, only where a pattern is tried.

:func:`secrets_in` gives the values themselves, so a summary can be checked for repeating one.
:func:`redact_after` redacts a person's message with the end of their previous message in view: a secret split over
the two (a value after a name that ended the previous message, a key pasted in two pieces).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from ..lexicon import common
from .literals import Anchored, fold, folded, needs

if TYPE_CHECKING:
    from detect_secrets.plugins.base import BasePlugin

_SKIPPED_DETECTORS = frozenset({"Public IP (ipv4)", "Basic Auth Credentials", "Private Key"})
"""Detectors not used: an IP address is not a secret; passwords in URLs and whole private-key blocks have
rules below that cover more (a URL with no user name; the key's body, not only its first line)."""


class _Rule(NamedTuple):
    label: str
    pattern: re.Pattern[str]
    needs_name: bool
    """Whether the pattern needs a word that names a secret ("key", "pwd", "token", …) before its value."""
    needs: tuple[re.Pattern[str], ...]
    """What a match holds (:func:`.literals.needs`): one of the strings of each, found by one search."""
    folded: bool
    """Whether the pattern ignores case: its :attr:`needs` are looked for in a window's folded text."""

    @classmethod
    def of(cls, label: str, pattern: re.Pattern[str], needs_name: bool = False) -> _Rule:
        return cls(label, pattern, needs_name, tuple(re.compile("|".join(map(re.escape, sorted(strings))))
                                                     for strings in needs(pattern)),
                   bool(pattern.flags & re.IGNORECASE))

    def may_match(self, window: _Window) -> bool:
        """Whether a match can lie in ``window``: it holds one string of each of :attr:`needs`."""
        text = window.folded if self.folded else window.text
        return all(strings.search(text) for strings in self.needs)


@lru_cache(maxsize=1)
def _maintained_rules() -> tuple[_Rule, ...]:
    """Read from detect-secrets on the first text redacted: importing its plugins (and ``requests``, which they
    import) costs a process 9 MB that a command which never redacts does not pay."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector

    rules: list[_Rule] = []
    # detect-secrets annotates the mapping with a type variable only its return mentions: its classes are plugins
    detectors: Mapping[str, type[BasePlugin]] = get_mapping_from_secret_type_to_class()
    for secret_type, plugin in sorted(detectors.items()):
        if secret_type in _SKIPPED_DETECTORS or not issubclass(plugin, RegexBasedDetector):
            continue
        label = f"[REDACTED {secret_type.upper()}]"
        rules.extend(_Rule.of(label, pattern, "(?:key|pwd" in pattern.pattern or "secret[-_]?" in pattern.pattern)
                     for pattern in plugin().denylist)
    return tuple(rules)


class _Window:
    """A part of a text where layers 1, 2 and 4 look (:func:`_windows`), with its text folded for patterns that ignore
    case, made once for all rules."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.text = text[start:end]
        self._folded: str | None = None

    @property
    def folded(self) -> str:
        if self._folded is None:
            self._folded = fold(self.text)
        return self._folded


_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
                          r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)", re.DOTALL)
_OWN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("[REDACTED SLACK TOKEN]", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}")),
    ("[REDACTED SLACK TOKEN]", re.compile(r"\bxapp-[A-Za-z0-9-]{10,}")),
    ("[REDACTED API KEY]", re.compile(r"\bsk-(?:ant-|proj-|live-)?[A-Za-z0-9_-]{16,}")),
    ("[REDACTED GITHUB TOKEN]", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("[REDACTED GITHUB TOKEN]", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("[REDACTED GITLAB TOKEN]", re.compile(r"\bgl[a-z]{2,6}-[A-Za-z0-9_-]{20,}")),
    ("[REDACTED STRIPE KEY]", re.compile(r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("[REDACTED AWS KEY]", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    ("[REDACTED API KEY]", re.compile(r"\bAIza[0-9A-Za-z_-]{30,}")),
)


@lru_cache(maxsize=1)
def _rules() -> tuple[_Rule, ...]:
    """The maintained rules and this module's own, with what each needs: read on the first text redacted."""
    return (*_maintained_rules(), *(_Rule.of(label, pattern) for label, pattern in _OWN))


def read_rules() -> None:
    """Read the rules now, detect-secrets' among them (importing it takes a quarter of a second): a worker does so
    before it serves, so no acknowledgement waits for it."""
    _rules()


_HEADER = Anchored(re.compile(r"(?i)\b((?:proxy-)?authori[sz]ation\s*[:=]\s*[\"']?(?:(?:basic|bearer|token|digest|"
                              r"negotiate|apikey|sharedaccesssignature)\s+)?)([^\s\"',;]{6,})"))
_BEARER = Anchored(re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)"))
_SCHEME = (r"(?<![a-z0-9+.-])(?=[a-z0-9+.-]*+://)(?>[a-z0-9+.-]*?\b(?=[a-z]))"
           r"([a-z][a-z0-9+.-]*+://)")
"""A URL's scheme and ``://`` (its group 1), found in one look at the run of scheme characters before ``://``: a
match starts only where such a run starts, and settles on the first place in it a scheme may begin (after a
non-word character), so a long run of ``a-a-a-…`` costs its length once, not once for each place in it."""
_URL_PASSWORD = re.compile(_SCHEME + r"([^\s:/@]*:)([^\s@/]+)@")

_SECRET_NAME = Anchored(re.compile(r"(?i)passw(?:or)?d|pwd|secret|api[_-]?key|(?:access|account|private|signing|"
                                   r"encryption|master|shared[_-]?access)[_-]?key|token|credential|passphrase"))
_ABOUT = re.compile(r"(?i)ids?|names?|ur[li]s?|files?|paths?|dirs?|length|len|size|count|types?|kinds?|format|"
                    r"version|ttl|expiry|expires|expiration|policy|prefix|suffix|header|field|label|var|variable|env|"
                    r"enabled|required|arn|ref|location|store|vault|provider|usage")
"""The last word of a name that is about a secret, not the secret (``credentialsId``, ``access_token_url``)."""
_SECRET_WORD = re.compile(r"(?i)(?:passw(?:or)?ds?|pwd|secrets?|keys?|tokens?|credentials?|creds|passphrase)$")
"""A word of a name that says secret, alone or ending a compound (``Key``, ``accesstoken``; not ``keying``)."""
_SECRET_WORDS = ("passw", "pwd", "secret", "key", "token", "credential", "passphrase")
_NAME_RUN = re.compile(r"[\w.-]+")
"""A run of the characters a name is made of (letters and digits of any script, ``_``, ``.``, ``-``)."""
_ASSIGNMENT = re.compile(r"""([A-Za-z0-9_.-]++["']?\s*+[:=][ \t]*["']?)([^\s,;'"]{6,})""")
"""A name, ``=`` or ``:``, and its value on the same line (``API_KEY=`` at the end of a line has none). The name and
the space after it are read once (``++``, ``*+``): what follows each is none of its characters, so giving some back
never helps a match, and a run of 40,000 name characters with no value is not read again from each end."""

_PROSE = Anchored(re.compile(
    r"(?i)\b(?:passwords?|passwd|passphrase|passcode|pin code|api key|secret key|access token|"
    r"passwort|kennwort|mot de passe|contraseña|contrasena|clave|senha|palavra-passe|parola d'ordine)\b"
    r"[^.!?;\n]{0,60}?\b(?:is|was|are|ist|lautet|war|est|était|es|era|é|è|sono|sind)\s*:?\s+"
    r"[\"'`“«]?([^\s\"'`”»]{4,})"))
_NAMED = Anchored(re.compile(
    r"(?i)(?<!\w)(?:keys?|tokens?|secrets?|credentials?|creds|schlüssel|zugangsdaten|clé|cle|jeton|identifiants|"
    r"chave|chiave|credenciales|credenciais|credenziali)(?!\w)"
    r"[^.!?;:\n]{0,60}?(?:\s(?=[iwaleèésv])(?:is|was|are|ist|lautet|war|est|était|es|era|é|è|sono|sind)\s*:?|:)"
    r"\s+[\"'`“«]?([^\s\"'`”»]{8,})"))
"""A value stated after a word for a key, a token, a secret or credentials, in the languages of :data:`_PROSE` ("the
stripe key is …", "der Schlüssel lautet …", "la clé est …", "deploy token: …"): kept unless it looks like a token (see
:func:`_token_shaped`)."""
_NAMED_WORDS = ("key", "token", "secret", "cred", "schlüssel", "zugangsdaten", "clé", "cle", "jeton", "identifiants",
                "chave", "chiave")
_IDENTIFIER = re.compile(r"[A-Za-z]+[-_#]?\d+|v?\d+(?:[.-]\d+)*")
"""A name and a number (a ticket key ``OPS-4471``, a pull request ``PR-1234``) or a version: an identifier people cite,
never a secret."""
_PROSE_WORDS = ("passw", "passc", "passphrase", "pin code", "api key", "secret key", "access token", "kennwort",
                "mot de passe", "contrase", "clave", "senha", "palavra-passe", "parola d")


def _any_of(words: tuple[str, ...]) -> re.Pattern[str]:
    """One search for any of ``words`` in a lower-case text (``any(word in text for word in words)``, in one pass)."""
    return re.compile("|".join(map(re.escape, words)))


_SECRET_GATE = _any_of((*_SECRET_WORDS, "pw", "pass"))
_PROSE_GATE = _any_of(_PROSE_WORDS)
_NAMED_GATE = _any_of(_NAMED_WORDS)
_TAIL_GATE = _any_of((*_SECRET_WORDS, *_NAMED_WORDS, *_PROSE_WORDS, "pw"))
"""Whether the end of a person's previous message holds a word any rule that names a secret needs."""

_URL = re.compile(_SCHEME + r"[^\s<>|?#]*")
_VALUE = re.compile(r"(?<![\w-])[\w-]{24}")
"""24 characters of a value, from the start of their run: a run is read once, not once from each place in it."""
_LONG = re.compile(r"(?<![\w+/=.\-])[\w+/=.\-]{12,}")
"""A run of 12 or more token characters, tried only where such a run starts (each run is read once)."""
_RUN = re.compile(r"(?<![A-Za-z0-9+_.~-])[A-Za-z0-9+_~-][A-Za-z0-9+_.~-]{14,}[A-Za-z0-9+_~-]"
                  r"(?:={1,3}(?![A-Za-z0-9]))?(?![A-Za-z0-9+_~-]|\.[A-Za-z0-9])")
"""A run of token characters (letters, digits, ``+_~-`` and dots inside it) of 16 or more, with base64's padding: a
dot that ends a sentence is not part of it, an ``=`` between two parts ends it."""
_BLOB = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_.~-")
_SEGMENT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_MIN_BITS = 3.9
_MIN_BITS_ONE_CASE = 3.5
_MIN_BITS_NO_DIGITS = 4.2
_HEX = frozenset("0123456789abcdefABCDEF")
_DIGITS = "0123456789"
_PARTS = re.compile(r"[_.~-]")
_KIND_CHANGE = re.compile(r"(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])")
_EDGES = frozenset(" \t\n\"'=:")


def _entropy(token: str) -> float:
    counts = Counter(token)
    return -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())


def _random_looking(token: str) -> bool:
    """Whether ``token`` reads as drawn at random, and not made of words:

    - letters of both cases with digits, 3.9 bits a character or more;
    - letters of one case with digits in three places or more (``rc0``, ``neo4j``, ``CXX11`` are words with a
      number), 16 characters or more without its ``_ - . ~``, its longest part not hex, 3.5 bits (a smaller alphabet
      carries less);
    - its longest part between ``_ - . ~`` (a prefix such as ``hf_`` or ``pat.`` is not the secret): 30 or more
      letters of both cases, 4.2 bits.

    Hex alone never is (commit hashes, UUIDs, checksums): a hex secret is found by its name.

    ``token`` is ASCII (a run :data:`_RUN` finds), so cases and digits are counted by whole-string operations, each
    one pass in C over a token that may be as long as the message."""
    upper, lower = token.lower() != token, token.upper() != token
    digits = sum(map(token.count, _DIGITS))
    if upper and lower and digits >= 2 and len(token) >= 20:
        bits = _MIN_BITS
    else:
        parts = _PARTS.split(token)
        longest = max(parts, key=len)
        joined = "".join(parts)
        if 2 <= digits <= len(joined) - 4 and not (upper and lower) and not set(longest) <= _HEX and \
                len(_KIND_CHANGE.findall(joined)) >= 6:
            bits, token = _MIN_BITS_ONE_CASE, joined
        elif len(longest) >= 30 and longest.lower() != longest and longest.upper() != longest:
            bits, token = _MIN_BITS_NO_DIGITS, longest
        else:
            return False
    if _entropy(token) < bits:
        return False
    worded = sum(len(s) for s in _SEGMENT.findall(token) if len(s) >= 3 and common(s.lower(), languages=("en",)))
    worded += sum(len(part) for part in _PARTS.split(token) if part.isdigit())
    if worded * 2 >= len(token):
        return False  # made of words and numbers: an identifier (getUserById2024Handler), a build (rc0.15.0_20231217)
    steps = sum(ord(b) - ord(a) == 1 for a, b in zip(token, token[1:]))
    return steps * 2 < len(token)  # an alphabet written out (ABCDEF…xyz0123456789) is no secret


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
    places = low if text.isascii() else folded(text)
    named = _SECRET_GATE.search(low) is not None
    windows = _windows(text)
    if "PRIVATE KEY" in text:
        spans.extend((m.start(), m.end(), "[REDACTED PRIVATE KEY]") for m in _PRIVATE_KEY.finditer(text))
    parts = [_Window(text, a, b) for a, b in windows]
    # the rules that need a secret's name before its value all need a value of 24 characters or more
    valued = [w for w in parts if _VALUE.search(w.text)] if named else []
    for rule in _rules() if parts else ():
        for m in (m for w in (valued if rule.needs_name else parts) if rule.may_match(w)
                  for m in rule.pattern.finditer(text, w.start, w.end)):
            start, end = m.span()
            while start < end and text[start] in _EDGES:  # some rules match the delimiter around a value
                start += 1
            while end > start and text[end - 1] in _EDGES and text[end - 1] != "=":
                end -= 1
            if end > start:
                spans.append((start, end, rule.label))
    if "auth" in low:
        spans.extend((m.start(2), m.end(2), "[REDACTED]") for m in _HEADER.finditer(text, places))
    if "earer" in low:
        spans.extend((m.start(2), m.end(2), "[REDACTED]") for m in _BEARER.finditer(text, places))
    if "://" in text and "@" in text:
        spans.extend((m.start(3), m.end(3), "[REDACTED]") for m in _URL_PASSWORD.finditer(text))
    if ("=" in text or ":" in text) and named and _SECRET_NAME.search(text, places):
        spans.extend(_assignments(text, places))
    if _PROSE_GATE.search(low):
        for m in _PROSE.finditer(text, places):
            value = m.group(1).rstrip(".,;:!?)")
            if len(value) >= 4 and not _common_word(value) and not value.startswith("[REDACTED") \
                    and not (value.isdigit() and len(value) < 6):  # "the token budget is 4096"
                spans.append((m.start(1), m.start(1) + len(value), "[REDACTED]"))
    if _NAMED_GATE.search(low):
        for m in _NAMED.finditer(text, places):
            value = m.group(1).rstrip(".,;:!?)")
            if _token_shaped(value):
                spans.append((m.start(1), m.start(1) + len(value), "[REDACTED]"))
    urls: list[tuple[int, int]] | None = None
    covered = 0
    for m in (m for start, end in windows for m in _RUN.finditer(text, start, end)):
        if m.start() < covered or not _random_looking(m.group()):
            continue
        if urls is None:
            urls = [(u.start(1), u.end()) for u in _URL.finditer(text)]
        if not any(a <= m.start() < b for a, b in urls):
            start, end = _blob(text, m.start(), m.end(), covered)
            spans.append((start, end, "[REDACTED HIGH ENTROPY STRING]"))
            covered = end
    return spans


def _blob(text: str, start: int, end: int, floor: int) -> tuple[int, int]:
    """The whole token a random-looking run belongs to: a secret's parts joined by ``/ + = . ~ _ -`` (base64, a
    prefix, a second part after a dot) go with it, back to ``=`` (a name before it stays) and not before ``floor``
    (where the last one ended), so each character is read once. A dot that ends a sentence is left."""
    while start > floor and text[start - 1] in _BLOB and text[start - 1] != "=":
        start -= 1
    while end < len(text) and text[end] in _BLOB:
        end += 1
    while end > start and text[end - 1] in ".-_~":
        end -= 1
    return start, end


def _reference(value: str) -> bool:
    """Whether a value names where a secret is rather than holding it: a variable (``$API_KEY``, ``${…}``, ``%(…)``),
    a placeholder (``<your token>``) or a file (``/etc/ssl/private/server.key``, ``~/.ssh/id_ed25519``); or is a marker
    already. A link given as a token stays a secret: a webhook's URL is its credential."""
    return value.startswith(("[REDACTED", "$", "{", "<", "%", "/", "~/", "./"))


def _token_shaped(value: str) -> bool:
    """Whether a value stated after a word for a key or a token can be one: 8 characters or more with letters and
    digits, or 16 or more that are no word; never a name and a number, a version or a reference (:func:`_reference`)."""
    if len(value) < 8 or _reference(value) or _IDENTIFIER.fullmatch(value):
        return False
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    return (letters and digits) or (len(value) >= 16 and not _common_word(value))


def _assignments(text: str, places: str | None) -> list[tuple[int, int, str]]:
    """Values of assignments whose name says secret (``DB_PASSWORD=…``, ``"api_key": "…"``): found from each
    name that says secret, so a long log costs in proportion to those names, not to its assignments. An assignment
    is read once from the start of the run of name characters that holds the name ("aws_secret_access_key",
    "DB_PASSWORD"), and the next name is looked for after that run, so a run of 40,000 characters full of names that
    say secret costs its length, not its length once for each name in it."""
    out = []
    pos = 0
    while (name := _SECRET_NAME.search(text, places, pos)) is not None:
        start = _run_start(text, name.start(), pos)
        pos = _NAME_RUN.match(text, name.start()).end()  # type: ignore[union-attr]  # a name is name characters
        match = _ASSIGNMENT.match(text, start)
        if match is None or not _names_a_secret(match.group(1)):
            continue
        value = match.group(2)
        if not _reference(value) and not value.isdigit():
            out.append((match.start(2), match.end(2), "[REDACTED]"))
        pos = max(pos, match.end(2))
    return out


_BEFORE_RUN = re.compile(r"(?s:.*)[^\w.-]")
"""Text up to the last character that is no name character (where a run of name characters starts after it)."""


def _run_start(text: str, at: int, floor: int) -> int:
    """Where the run of name characters (:data:`_NAME_RUN`) holding position ``at`` starts, not before ``floor``: read
    backwards in steps that double, so finding it costs about the run's length however long the run is."""
    step = 64
    while True:
        low = max(floor, at - step)
        before = _BEFORE_RUN.match(text, low, at)
        if before is not None:
            return before.end()
        if low == floor:
            return floor
        step *= 2


def _names_a_secret(name: str) -> bool:
    """Whether an assignment's name (one that holds a word that says secret) names the secret itself
    (``DB_PASSWORD``, ``aws_secret_access_key``, ``_authToken``, ``token_value``), not something about it: a name
    ending in a word for an id, a name, a place, a size, a kind or a setting (``credentialsId``, ``access_token_url``,
    ``secret_length``, ``TokenFile``, ``LLM_SECRET_NAME``) holds no secret, nor one whose secret word is only the
    start of another (``master-keying``). When in doubt, it does."""
    words = _SEGMENT.findall(name)
    return bool(words) and _ABOUT.fullmatch(words[-1]) is None and any(_SECRET_WORD.search(w) for w in words)


def _merged(text: str) -> list[tuple[int, int, str]]:
    """The secrets of ``text`` as non-overlapping spans (:func:`_disjoint`)."""
    return _disjoint(_found(text))


def secrets_in(text: str) -> set[str]:
    """The secret values :func:`redact` would remove from ``text``."""
    return {text[start:end] for start, end, _ in _merged(text)}


def redact(text: str) -> str:
    """``text`` with every secret value the module's rules find replaced by a marker naming its kind."""
    return _replaced(text, _merged(text))


_TAIL = 120
"""Characters of a person's previous message read for a name it ends with (the longest phrase a rule reads before a
value is a word for a secret and 60 characters)."""
_HEAD = 1024
"""Characters of a message's first line read for a value its author named in their previous message."""
_TOKEN_END = re.compile(r"[A-Za-z0-9+/_~-]{4,}$")
_TOKEN_START = re.compile(r"[A-Za-z0-9+/_~-]{4,}")
_OPENING = frozenset(" \t\"'`“«")
_JOINERS = frozenset("'’-.")
"""Signs inside a word of prose (``Here's``, ``History-wise``, ``e.g.``), not of a value."""


def redact_after(earlier: str | None, text: str, *, halves: bool = True) -> tuple[str, str]:
    """A person's message ``text`` redacted with the context of their previous message in the conversation
    (``earlier``, as it was stored): ``(earlier, text)``, each with what :func:`redact` removes and:

    - **a value after a name that ended the previous message** ("the staging db password is" then
      "Xq9-vB7mKt2w"; "token for the deploy bot:" then the token): the value the same rules would remove had the
      two been one message, when it is shaped like a value (:func:`_value_shaped`) or is all the new message says
      and no common word;
      the sentence after it is never touched ("my password is" then "not something I share here");
    - **a token split between the two** ("AKIAIOSFODNN" then "7EXAMPLE"): a run of token characters ending the
      previous message and one starting this one that the rules remove when joined and neither word is common;
      both halves go (the caller stores ``earlier``'s half removed only if it has not stored it yet).

    Only the end of ``earlier`` and the start of ``text`` are read again, so the cost stays linear in the length of
    ``text`` (plus a bounded amount). Without ``halves`` a token split between the two is left for a later read that
    can remove both halves (the first is found only with the second as it was written)."""
    spans = _merged(text)
    if not earlier or not text:
        return earlier or "", _replaced(text, spans)
    tail = earlier.rstrip()[-_TAIL:]
    line = text[:_HEAD].split("\n", 1)[0]
    lead = len(line) - len(line.lstrip())
    if tail and lead < len(line):
        spans.extend(_named_before(tail, line, lead, text))
    cut = _split_token(earlier, line) if halves else None
    if cut is not None:
        earlier_cut, text_end = cut
        spans.append((0, text_end, "[REDACTED]"))
        earlier = earlier[:earlier_cut] + "[REDACTED]"
    return earlier, _replaced(text, _disjoint(spans))


def tail(text: str) -> str:
    """What :func:`redact_after` reads of a previous message ``text``: its last characters before trailing space, and
    whether space follows them. ``redact_after(tail(earlier), text)`` redacts ``text`` as ``redact_after(earlier,
    text)`` does, so the end of a person's last message can be kept instead of the message."""
    stripped = text.rstrip()
    return stripped[-_TAIL:] + text[len(stripped):len(stripped) + 1]


def _named_before(tail: str, line: str, lead: int, text: str) -> list[tuple[int, int, str]]:
    """The value ``line`` starts with that a name ending ``tail`` gives away (see :func:`redact_after`)."""
    low = tail.lower()
    if not _TAIL_GATE.search(low):
        return []
    joined = f"{tail} {line[lead:]}"
    offset = len(tail) + 1
    out = []
    for start, end, label in _merged(joined):
        if not offset <= start <= offset + 1 or (start > offset and joined[offset] not in _OPENING):
            continue  # not the value slot the previous message left open
        value = joined[start:end]
        alone = text.strip().strip("\"'`“”«».,;:!?)*") == value and not _common_word(value)
        if _value_shaped(value) or alone or label != "[REDACTED]":
            out.append((start - offset + lead, end - offset + lead, label))
    return out


def _value_shaped(value: str) -> bool:
    """Whether a word can only be a value, not the first word of a sentence: shaped like a token
    (:func:`_token_shaped`), or letters with digits or signs (``Summer2024``, ``p@ssw0rd``); not a word with an
    apostrophe, a hyphen or dots (``Here's``, ``History-wise``), nor the punctuation that ends it (``Absolutely!``,
    a correction's ``World*``)."""
    core = value.rstrip(".,;:!?)*")
    return _token_shaped(core) or (any(c.isalpha() for c in core) and
                                   any(not c.isalpha() and c not in _JOINERS for c in core))


def _split_token(earlier: str, line: str) -> tuple[int, int] | None:
    """Where a token split between the end of ``earlier`` and the start of ``line`` begins in ``earlier`` and ends
    in ``line``, when the rules remove it joined and neither part is a common word."""
    if not earlier or earlier[-1].isspace() or not line or line[0].isspace():
        return None
    end, start = _TOKEN_END.search(earlier[-_TAIL:]), _TOKEN_START.match(line)
    if end is None or start is None or _common_word(end.group()) or _common_word(start.group()):
        return None
    first = end.group()
    joined = first + start.group()
    for a, b, _ in _merged(joined):
        if a < len(first) < b:
            return len(earlier) - len(first) + a, b - len(first)
    return None


def _disjoint(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Non-overlapping spans; of two that overlap, the one that starts first (the longer on a tie) wins and is widened
    to cover both."""
    out: list[tuple[int, int, str]] = []
    for start, end, label in sorted(spans, key=lambda s: (s[0], -s[1])):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2])
        else:
            out.append((start, end, label))
    return out


def _replaced(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with each of ``spans`` (non-overlapping, in order) replaced by its marker."""
    if not spans:
        return text
    out, last = [], 0
    for start, end, label in spans:
        out += [text[last:start], label]
        last = end
    out.append(text[last:])
    return "".join(out)
