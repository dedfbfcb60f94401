"""Durable conversation state on Redis: checkpoints, head, inbox, lease, dedup.

Knows no Slack and no LLM. Public entry points: :class:`CheckpointStore`, :class:`Inbox`,
:class:`LeaseManager`, :func:`connect`, and the models in :mod:`persistence.models`.
"""

from typing import TYPE_CHECKING

from threadkeeper.persistence.faces import lazy_names

if TYPE_CHECKING:
    from .base import new_id
    from .cache import message_bytes
    from .connection import connect, durability, eviction, eviction_warning, ping
    from .epochs import EpochIndexStore
    from .errors import (
        CorruptRecordError,
        HeadConflictError,
        InvalidTransitionError,
        LeaseLostError,
        NotFoundError,
        StoreUnavailableError,
        ThreadkeeperError,
    )
    from .forget import Forgetter
    from .inbox import Inbox, LeaseManager, why_unreadable
    from .keys import ConversationKeys
    from .memory import ExtractionJob, MemoryOrigin, MemoryRecord, MemoryStore, MemoryVersion, message_mark
    from .models import (
        Checkpoint,
        CheckpointKind,
        CheckpointMeta,
        CheckpointOutcome,
        CheckpointStatus,
        CitedSource,
        ConversationState,
        ConversationSummary,
        History,
        ImagePart,
        InboxItem,
        Lease,
        LineageEntry,
        Message,
        MessageFlags,
        PreparedHandoff,
        Role,
        TextPart,
        ToolCallPart,
        ToolResultPart,
        Usage,
        carried_tokens,
        messages_so_far,
    )
    from .notes import MessageChange, Notes, NotesStore
    from .pace import Pace
    from .reading import settled
    from .signals import Signals
    from .store import CheckpointStore, Commit, EpochChain, Opening, compaction_checkpoint
    from .vectors import VectorStore

_HOMES: dict[str, tuple[str, ...]] = {
    ".base": ("new_id",),
    ".cache": ("message_bytes",),
    ".connection": ("connect", "durability", "eviction", "eviction_warning", "ping"),
    ".errors": (
        "CorruptRecordError", "HeadConflictError", "InvalidTransitionError", "LeaseLostError", "NotFoundError",
        "StoreUnavailableError", "ThreadkeeperError",
    ),
    ".forget": ("Forgetter",),
    ".inbox": ("Inbox", "LeaseManager", "why_unreadable"),
    ".keys": ("ConversationKeys",),
    ".memory": ("ExtractionJob", "MemoryOrigin", "MemoryRecord", "MemoryStore", "MemoryVersion", "message_mark"),
    ".models": (
        "Checkpoint", "CheckpointKind", "CheckpointMeta", "CheckpointOutcome", "CheckpointStatus", "CitedSource",
        "ConversationState", "ConversationSummary", "History", "ImagePart", "InboxItem", "Lease", "LineageEntry",
        "Message", "MessageFlags", "PreparedHandoff", "Role", "TextPart", "ToolCallPart", "ToolResultPart", "Usage",
        "carried_tokens", "messages_so_far",
    ),
    ".notes": ("MessageChange", "Notes", "NotesStore"),
    ".pace": ("Pace",),
    ".reading": ("settled",),
    ".signals": ("Signals",),
    ".store": ("CheckpointStore", "Commit", "EpochChain", "Opening", "compaction_checkpoint"),
    ".vectors": ("VectorStore",),
    ".epochs": ("EpochIndexStore",),
}
"""Where each public name lives, imported when first asked for: the errors and the stored shapes without the
Redis client and the stores (6 MB), which a command may load after what it needs first."""

__all__ = [
    "Forgetter", "durability", "eviction", "eviction_warning", "ExtractionJob", "MemoryOrigin", "MemoryRecord", "MemoryStore", "MemoryVersion", "message_mark", "Checkpoint", "CheckpointKind", "CheckpointMeta", "CheckpointOutcome", "CitedSource", "CheckpointStatus",
    "CheckpointStore", "Commit", "ConversationKeys", "EpochChain", "ConversationState", "ConversationSummary", "CorruptRecordError", "HeadConflictError", "History",
    "ImagePart", "Inbox", "Pace", "Signals", "InboxItem", "InvalidTransitionError", "LeaseLostError", "Lease", "LeaseManager", "Opening", "LineageEntry", "Message", "MessageChange", "Notes", "NotesStore",
    "MessageFlags", "NotFoundError", "PreparedHandoff", "Role", "StoreUnavailableError", "TextPart", "ThreadkeeperError", "ToolCallPart",
    "ToolResultPart", "Usage", "VectorStore", "EpochIndexStore", "carried_tokens", "compaction_checkpoint", "connect", "message_bytes", "messages_so_far", "new_id", "ping", "settled", "why_unreadable",
]


__getattr__ = lazy_names(__name__, _HOMES)
