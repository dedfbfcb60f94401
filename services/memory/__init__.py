"""Memory across conversations: records derived from idle conversations, consolidated per scope, and shown to a
turn within what the asking person may see."""

from .memory import (
    CITED,
    MEMORY_HEADER,
    MEMORY_ID,
    CachedAccess,
    ChannelAccess,
    Extraction,
    Memory,
    MemoryConfig,
    NoAccess,
    PrivacyUnknownError,
    consolidated,
)

__all__ = [
    "CITED", "MEMORY_HEADER", "MEMORY_ID", "CachedAccess", "ChannelAccess", "Extraction", "Memory", "MemoryConfig", "NoAccess",
    "PrivacyUnknownError", "consolidated",
]
