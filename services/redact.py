"""Secret redaction for everything a handoff, a note or the stored ledger contains."""

from __future__ import annotations

import re
from collections.abc import Callable

_PATTERNS: list[tuple[Callable[[str], bool], re.Pattern[str], str]] = [
    # Each pattern runs only when its cheap test on the text passes (most messages hold no secret).
    (lambda t: "PRIVATE KEY" in t,
     re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL),
     "[REDACTED PRIVATE KEY]"),
    (lambda t: "xox" in t, re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "[REDACTED SLACK TOKEN]"),
    (lambda t: "xapp-" in t, re.compile(r"\bxapp-[A-Za-z0-9-]{10,}"), "[REDACTED SLACK TOKEN]"),
    (lambda t: "sk-" in t, re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"), "[REDACTED API KEY]"),
    (lambda t: "gh" in t, re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), "[REDACTED GITHUB TOKEN]"),
    (lambda t: "github_pat_" in t, re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), "[REDACTED GITHUB TOKEN]"),
    (lambda t: "k_live_" in t or "k_test_" in t, re.compile(r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}"),
     "[REDACTED STRIPE KEY]"),
    (lambda t: "eyJ" in t, re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
     "[REDACTED JWT]"),
    (lambda t: "AKIA" in t, re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[REDACTED AWS KEY]"),
    (lambda t: "AIza" in t, re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[REDACTED API KEY]"),
    (lambda t: "earer" in t, re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/-]{20,}=*"), r"\1 [REDACTED]"),
    (lambda t: "://" in t and "@" in t, re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"),
     r"\1[REDACTED]@"),
]

_SECRET_NAME = re.compile(r"(?i)passw(?:or)?d|pwd|secret|api[_-]?key|access[_-]?key|token|credential")
_SECRET_WORDS = ("passw", "pwd", "secret", "key", "token", "credential")
_ASSIGNMENT = re.compile(r"""([A-Za-z0-9_.-]+["']?\s*[:=]\s*["']?)([^\s,;'"]{6,})""")


def _assignments(text: str) -> str:
    """Values of assignments whose name says secret; a value that is not one may be the next one's name
    ("creds: aws_secret_access_key = …"), so the search goes on from it."""
    out: list[str] = []
    pos = last = 0
    while (match := _ASSIGNMENT.search(text, pos)) is not None:
        name, value = match.group(1), match.group(2)
        if _SECRET_NAME.search(name) and not value.startswith("[REDACTED") and not value.isdigit():
            out += [text[last:match.start(2)], "[REDACTED]"]
            last = pos = match.end(2)
        else:
            pos = match.start(2)
    return "".join(out) + text[last:] if out else text


def redact(text: str) -> str:
    """Replace Slack, GitHub, Stripe, AWS, Google and model-provider tokens, JWTs, private keys, passwords in
    URLs, and the values of assignments whose name says secret (``DB_PASSWORD=…``, ``aws_secret_access_key =
    …``, ``"api_key": "…"``; a value of digits only, such as ``max_tokens: 4096``, is left alone)."""
    for applies, pattern, replacement in _PATTERNS:
        if applies(text):
            text = pattern.sub(replacement, text)
    if "=" in text or ":" in text:
        low = text.lower()
        if any(word in low for word in _SECRET_WORDS):
            text = _assignments(text)
    return text
