"""Secret redaction for everything a handoff contains."""

from __future__ import annotations

import re

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL),
     "[REDACTED PRIVATE KEY]"),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "[REDACTED SLACK TOKEN]"),
    (re.compile(r"\bxapp-[A-Za-z0-9-]{10,}"), "[REDACTED SLACK TOKEN]"),
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"), "[REDACTED API KEY]"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), "[REDACTED GITHUB TOKEN]"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "[REDACTED AWS KEY]"),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), "[REDACTED API KEY]"),
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/-]{20,}=*"), r"\1 [REDACTED]"),
    (re.compile(r"(?i)\b((?:password|passwd|pwd|secret|api[_-]?key|token)\s*[:=]\s*)[^\s,;'\"]{4,}"), r"\1[REDACTED]"),
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1[REDACTED]@"),
]


def redact(text: str) -> str:
    """Replace Slack tokens, API keys, private keys, passwords in URLs and ``password=…`` values."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
