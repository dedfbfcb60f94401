"""Memory across conversations: records derived from idle conversations, consolidated per scope, and shown to a
turn within what the asking person may see."""

from .access import CachedAccess, ChannelAccess, NoAccess, PrivacyUnknownError
from .config import MemoryConfig
from .consolidation import consolidated
from .extraction import MEMORY_ID, Extraction
from .memory import Memory
from .reading import CITED, MEMORY_HEADER, Source, sources_line

__all__ = [
    "CITED", "MEMORY_HEADER", "MEMORY_ID", "CachedAccess", "ChannelAccess", "Extraction", "Memory", "MemoryConfig", "NoAccess",
    "PrivacyUnknownError", "Source", "consolidated", "sources_line",
]
