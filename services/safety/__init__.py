"""What may never be stored or sent as the assistant's own words: secrets (redacted) and standing instructions
(kept only as what a person said)."""

from .instructions import (
    addresses_the_assistant,
    introduces_material,
    is_instruction,
    readable,
    sentences,
    split_instructions,
    stated_as_fact,
    statements,
    unstated,
    without_instructions,
)
from .lines import holds_secret, rejected, values
from .redact import read_rules, redact, redact_after, secrets_in, tail

__all__ = [
    "addresses_the_assistant",
    "introduces_material",
    "holds_secret",
    "is_instruction",
    "readable",
    "read_rules",
    "redact",
    "redact_after",
    "rejected",
    "secrets_in",
    "sentences",
    "split_instructions",
    "stated_as_fact",
    "statements",
    "tail",
    "unstated",
    "values",
    "without_instructions",
]
