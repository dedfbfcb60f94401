"""Slack's request signature, checked before a request to the events endpoint costs anything.

Slack signs each request it posts: ``X-Slack-Signature`` is ``v0=`` and the HMAC-SHA256, keyed by the app's signing
secret, of ``v0:<X-Slack-Request-Timestamp>:<the body's bytes>``, and the timestamp is within five minutes of now
(https://docs.slack.dev/authentication/verifying-requests-from-slack/). This is the only check of it: the endpoint
runs it before anything reads the body as text, JSON or a form, so a flood of requests that are not Slack's costs the
headers, or at most one HMAC of a body of bounded size, and never delays the events Slack sends.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

MAX_BODY_BYTES = 1024 * 1024
"""The largest body the endpoint reads (Slack's envelopes are a few kilobytes; a message with rich-text blocks of
40,000 characters stays well under this)."""
MAX_AGE_SECONDS = 5 * 60
"""How far a request's timestamp may be from now (Slack's own bound; an older request may be a replay)."""
OFF_LOOP_BYTES = 64 * 1024
"""A body at least this large is hashed in a worker thread (hashlib lets go of the GIL), off the event loop."""

_TIMESTAMP = re.compile(r"\d{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


class Refusal(NamedTuple):
    """Why a request is not Slack's, as the HTTP status and the reason the response says."""

    status: int
    reason: str


class SignatureGate:
    """The signing secret's check, in two steps: :meth:`headers` before the body is read, :meth:`body` after."""

    def __init__(self, signing_secret: str, *, clock: Callable[[], float] = time.time,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        if not signing_secret:
            raise ValueError("the events endpoint needs the signing secret to check Slack's signature")
        self._key = signing_secret.encode()
        self._clock = clock
        self.max_body_bytes = max_body_bytes

    def headers(self, headers: Mapping[str, str], content_length: int | None) -> Refusal | None:
        """What the headers alone refuse: no signature or timestamp (401), a timestamp that is not a number of
        seconds (400) or too far from now, a signature that cannot be one (401), a declared body over the bound
        (413)."""
        stamp, signature = headers.get("X-Slack-Request-Timestamp"), headers.get("X-Slack-Signature")
        if stamp is not None and not _TIMESTAMP.fullmatch(stamp):
            return Refusal(400, "x-slack-request-timestamp must be a whole number of seconds")
        if stamp is None or signature is None:
            return Refusal(401, "the request is not signed (no x-slack-signature or x-slack-request-timestamp)")
        if abs(self._clock() - int(stamp)) > MAX_AGE_SECONDS:
            return Refusal(401, f"x-slack-request-timestamp is more than {MAX_AGE_SECONDS // 60} minutes from now")
        if not _SIGNATURE.fullmatch(signature):
            return Refusal(401, "x-slack-signature is not v0= and 64 hex digits")
        if content_length is not None and content_length > self.max_body_bytes:
            return Refusal(413, f"the body is larger than {self.max_body_bytes:,} bytes")
        return None

    async def body(self, headers: Mapping[str, str], body: bytes) -> Refusal | None:
        """Whether the signature is the secret's over this body (after :meth:`headers` let the request in)."""
        stamp, signature = headers["X-Slack-Request-Timestamp"], headers["X-Slack-Signature"]
        if len(body) >= OFF_LOOP_BYTES:
            expected = await asyncio.to_thread(self._digest, stamp, body)
        else:
            expected = self._digest(stamp, body)
        if not hmac.compare_digest(expected, signature):
            return Refusal(401, "x-slack-signature does not match the body")
        return None

    def _digest(self, stamp: str, body: bytes) -> str:
        mac = hmac.new(self._key, b"v0:" + stamp.encode() + b":", hashlib.sha256)
        mac.update(body)
        return "v0=" + mac.hexdigest()
