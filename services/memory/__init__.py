"""Memory across conversations: records derived from idle conversations, consolidated per scope, and shown to a
turn within what the asking person may see."""

from .memory import (
    CITED,
    MEMORY_HEADER,
    MEMORY_ID,
    CachedAccess,
    ChannelAccess,
    IdAccess,
    Memory,
    MemoryConfig,
    consolidated,
    locate,
)

__all__ = [
    "CachedAccess",
    "ChannelAccess",
    "CITED",
    "consolidated",
    "IdAccess",
    "locate",
    "Memory",
    "MEMORY_HEADER",
    "MEMORY_ID",
    "MemoryConfig",
]
