"""What a request to the model carries: the messages a turn shows (runtime context only for its own turn, a
handoff without the notes a recall stands in for), their rendering to chat messages, short references (``#N``),
and the measure every budget is compared on (the local estimate calibrated by the provider's reported usage)."""

from .measure import CALIBRATION_BOUNDS, calibration, measure
from .refs import REF, label, next_ref, parse
from .render import HANDOFF_HEADER, ContextEntry, current_text, entries, quote, to_chat, visible

__all__ = [
    "CALIBRATION_BOUNDS",
    "HANDOFF_HEADER",
    "calibration",
    "ContextEntry",
    "current_text",
    "entries",
    "label",
    "measure",
    "next_ref",
    "parse",
    "quote",
    "REF",
    "to_chat",
    "visible",
]
