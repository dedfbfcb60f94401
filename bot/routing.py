"""Whether a message in a subscribed thread gets a reply: cheap rules first, then the fast model."""

from __future__ import annotations

import logging
import re

from threadkeeper.services import ModelClient, ModelError

log = logging.getLogger("threadkeeper.routing")

_ACK = re.compile(r"^\s*(?:thanks?(?: you)?(?: all| everyone| so much)?|thx|ty|tysm|ok(?:ay)?|k|cool|nice|great|"
                  r"perfect|awesome|got it|sounds good|lol|haha|lgtm|\+1|:[a-z0-9_+-]+:|👍|🙏|🎉|✅)[\s!.]*$",
                  re.IGNORECASE)
_LEADING_MENTION = re.compile(r"^\s*<@([A-Z0-9]+)(?:\|[^>]*)?>")

ROUTER_PROMPT = """You decide whether an assistant bot should answer the latest message in a Slack thread it
takes part in. Answer "yes" if the message asks the bot something, asks the whole thread a question the bot
can help with, or continues a request the bot was handling. Answer "no" for side conversations between
people, acknowledgements, and messages addressed to someone else. Reply with exactly one word: yes or no."""


def rule_route(text: str, bot_user_id: str | None) -> bool | None:
    """True (reply), False (stay quiet) or None (the rules cannot tell)."""
    if bot_user_id and f"<@{bot_user_id}" in text:
        return True
    lead = _LEADING_MENTION.match(text)
    if lead and lead.group(1) != bot_user_id:
        return False
    if _ACK.match(text):
        return False
    return None


async def should_reply(text: str, bot_user_id: str | None, fast_model: ModelClient | None,
                       recent: list[str]) -> bool:
    decided = rule_route(text, bot_user_id)
    if decided is not None:
        return decided
    if fast_model is None or fast_model.offline:
        return False
    context = "\n".join(recent[-6:])
    try:
        reply = await fast_model.complete([{"role": "system", "content": ROUTER_PROMPT},
                                           {"role": "user", "content": f"Thread so far:\n{context}\n\nLatest: {text}"}],
                                          max_output_tokens=4, timeout_seconds=10, kind="routing")
    except ModelError as exc:
        log.warning("router model failed (%s); not replying", exc)
        return False
    return reply.text.strip().lower().startswith("y")
