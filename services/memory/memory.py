"""Memory across conversations: what a team told the bot in one conversation helps in the next, within its scope.

:class:`Memory` is the one object the rest of the code uses. It composes memory's jobs, each over the same
:class:`MemoryStore`: who may see what and where memory is on (:mod:`.access`), a conversation's new messages
turned into records (:mod:`.extraction`), a scope's records merged (:mod:`.consolidation`), the records a turn is
shown (:mod:`.reading`), and what memory lets go of (:mod:`.forgetting`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from threadkeeper.persistence import CheckpointStore, Message, NotesStore
from threadkeeper.persistence.memory import MemoryRecord, MemoryStore, MemoryVersion, Visibility

from ..conversation import Conversation
from ..models import ModelClient, Tokenizer
from .access import Access, CachedAccess, ChannelAccess, NoAccess
from .config import MemoryConfig
from .consolidation import Consolidator
from .extraction import Extraction, Extractor
from .forgetting import Forgetting
from .reading import MemoryBlock, Reader, Source


class Memory:
    """Extraction, consolidation, the read path and forgetting, over one :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore, checkpoints: CheckpointStore, notes: NotesStore, tokenizer: Tokenizer, *,
                 config: MemoryConfig | None = None, access: ChannelAccess | None = None,
                 model: ModelClient | None = None,
                 clock: Callable[[], float] = time.time, retention_days: float = 30.0) -> None:
        self.store, self.checkpoints, self.notes, self.tokenizer = store, checkpoints, notes, tokenizer
        config = config or MemoryConfig()
        self.gate = Access(store, config, CachedAccess(access or NoAccess(), config.membership_seconds))
        self.consolidation = Consolidator(store, config=config, clock=clock)
        self.extraction = Extractor(store, checkpoints, notes, tokenizer, self.gate, self.consolidation,
                                    config=config, model=model, clock=clock, retention_days=retention_days)
        self.reading = Reader(store, tokenizer, self.gate, clock=clock)
        self.forgetting = Forgetting(store, self.extraction, self.reading)

    # -- what every job shares: set once here, for all of them ---------------------------------

    @property
    def config(self) -> MemoryConfig:
        return self.gate.config

    @config.setter
    def config(self, config: MemoryConfig) -> None:
        self.gate.config = self.extraction.config = self.consolidation.config = config

    @property
    def clock(self) -> Callable[[], float]:
        return self.reading.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.extraction.clock = self.consolidation.clock = self.reading.clock = clock

    @property
    def access(self) -> ChannelAccess:
        """Who may see a channel's memory, as the transport knows it (the bot sets Slack's, cached)."""
        return self.gate.channels

    @access.setter
    def access(self, access: ChannelAccess) -> None:
        self.gate.channels = access

    @property
    def model(self) -> ModelClient | None:
        return self.extraction.model

    @property
    def retention_days(self) -> float:
        return self.extraction.retention_days

    # -- access --------------------------------------------------------------------------------

    async def visibility(self, conversation: Conversation) -> Visibility:
        return await self.gate.visibility(conversation)

    async def enabled(self, where: Conversation) -> bool:
        return await self.gate.enabled(where)

    def allowed(self, where: Conversation) -> bool:
        return self.gate.allowed(where)

    async def channel_enabled(self, workspace: str, channel: str) -> bool:
        return await self.gate.channel_enabled(workspace, channel)

    async def seen_by(self, records: list[MemoryRecord], person: str) -> list[MemoryRecord]:
        return await self.gate.seen_by(records, person)

    # -- phase 1: extraction; phase 2: consolidation -------------------------------------------

    async def extract(self, conversation: Conversation, *, force: bool = False) -> Extraction:
        return await self.extraction.extract(conversation, force=force)

    async def sweep(self) -> list[Extraction]:
        return await self.extraction.sweep()

    async def consolidate(self, workspace: str, scope: str) -> MemoryVersion | None:
        return await self.consolidation.consolidate(workspace, scope)

    # -- read path -----------------------------------------------------------------------------

    async def block(self, conversation: Conversation, query: str, *, asker: str | None,
                    cap_tokens: int, speakers: Sequence[str] = ()) -> MemoryBlock:
        return await self.reading.block(conversation, query, asker=asker, cap_tokens=cap_tokens, speakers=speakers)

    async def cited(self, conversation: Conversation, reply: str, shown: Sequence[str]) -> list[Source]:
        return await self.reading.cited(conversation, reply, shown)

    # -- retraction and forgetting -------------------------------------------------------------

    async def retract(self, conversation: Conversation, message_id: str) -> int:
        return await self.forgetting.retract(conversation, message_id)

    async def revise(self, conversation: Conversation, message: Message) -> int:
        return await self.forgetting.revise(conversation, message)

    async def forget_conversation(self, conversation: Conversation) -> int:
        return await self.forgetting.forget_conversation(conversation)

    async def forget(self, workspace: str, record_id: str) -> bool:
        return await self.forgetting.forget(workspace, record_id)

    async def forget_workspace(self, workspace: str) -> int:
        return await self.forgetting.forget_workspace(workspace)
