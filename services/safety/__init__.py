"""What may never be stored or sent as the assistant's own words: secrets (redacted) and standing instructions
(kept only as what a person said)."""

from .instructions import is_instruction, split_instructions, without_instructions
from .lines import holds_secret, rejected, values
from .redact import redact, secrets_in

__all__ = [
    "holds_secret",
    "is_instruction",
    "redact",
    "rejected",
    "secrets_in",
    "split_instructions",
    "values",
    "without_instructions",
]
