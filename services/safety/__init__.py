"""What may never be stored or sent as the assistant's own words: secrets (redacted) and standing instructions
(kept only as what a person said)."""

from .instructions import is_instruction, split_instructions, without_instructions
from .redact import redact, secrets_in

__all__ = [
    "is_instruction",
    "redact",
    "secrets_in",
    "split_instructions",
    "without_instructions",
]
