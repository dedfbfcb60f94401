"""Key layout. Every key of one conversation shares the hash tag ``{conversation_id}``.

``<prefix>:{<conversation>}:state``  hash  head, version, active turn, timestamps
``<prefix>:{<conversation>}:cp``     hash  ``<id>:meta|status|n|tok|out|consumed|parent|kind``
``<prefix>:{<conversation>}:msgs``   hash  ``<id>:<index>`` → message JSON
``<prefix>:{<conversation>}:order``  list  checkpoint ids in creation order
``<prefix>:{<conversation>}:inbox``  list  inbox items waiting for the next turn
``<prefix>:{<conversation>}:dead``   list  inbox items no version of this code could read (kept for operators)
``<prefix>:{<conversation>}:notes``  hash  mutable per-conversation facts (pins, edits, flags)
``<prefix>:{<conversation>}:lease``  string  the lease token (expires)
``<prefix>:{<conversation>}:prepared``  string  the next handoff, planned ahead from a named checkpoint of the current
    epoch (expires; a fork deletes it in the same script)
``<prefix>:{<conversation>}:preparing``  string  the lease of the job that plans it (expires)
``<prefix>:{<conversation>}:thread``  string  for a reply's own id (``slack:<team>:<channel>:<reply ts>``): the
    ts of the thread it was posted in, so a deletion that names only the reply finds its thread (expires)
``<prefix>:{<conversation>}:vectors``  hash  ``<model and text digest>`` → a message's embedding (float16), when an
    embedding model is configured (expires with the conversation)
``<prefix>:{<conversation>}:recall``  hash  ``<checkpoint>`` → what recall derived from the messages of the sealed epoch
    that ends there (each message's search terms, what names it holds); ``<checkpoint>:c`` → their cards (each
    message's id, role, author, reference, time and tokens: what recall holds of it without its text);
    ``<checkpoint>:p`` → the header of the BM25 segment those messages make, ``<checkpoint>:p:<bucket>`` → a bucket of
    its postings; each written once (expires with the conversation)
``<prefix>:{<conversation>}:dedup:<id>``  string  seen event ids and message ts (expire)
``<prefix>:pending``  sorted set  conversations with work owed (queued items, a reply not yet delivered): the sweep's
    registry; added on every append, removed by the lease holder once the conversation is drained
``<prefix>:activity``  sorted set  conversations by their last inbound item (what memory's extraction finds
    idle conversations by; no sweep reads it)
``<prefix>:conversations``  sorted set  every stored conversation by the time its state last changed (what
    ``threadkeeper conversations`` lists, most recent first, without a scan); ``<prefix>:conversations:indexed``
    says the conversations stored before the directory existed were added to it
``<prefix>:dead``  sorted set  conversations holding dead letters, by when the last one was set aside
``<prefix>:{install:<enterprise>-<team>}``  hash  a workspace's Slack installation and bot token (installs mode)
``<prefix>:oauth-state:<state>``  string  an OAuth state issued by ``/slack/install`` (expires)
``<prefix>:{view:<workspace>:<user>}``  string  what a person has open in Slack now, a hint for their turns (expires)
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ThreadkeeperError


def pending_key(prefix: str) -> str:
    """The sweep's registry: conversations with work owed, so a sweep costs what is pending, not what is stored."""
    return f"{prefix}:pending"


def activity_key(prefix: str) -> str:
    """Conversations by the time of their last inbound item: memory's extraction reads the idle ones."""
    return f"{prefix}:activity"


def directory_key(prefix: str) -> str:
    """Every stored conversation by the time its state last changed: a listing reads it instead of scanning keys."""
    return f"{prefix}:conversations"


def directory_built_key(prefix: str) -> str:
    """Present once the conversations stored before the directory existed were added to it."""
    return f"{prefix}:conversations:indexed"


def dead_registry_key(prefix: str) -> str:
    """Conversations that hold dead letters (inbox items set aside as unreadable)."""
    return f"{prefix}:dead"


def installation_key(prefix: str, enterprise_id: str | None, team_id: str | None) -> str:
    """A workspace's Slack installation (``none`` for a missing part, as Slack's own stores name them)."""
    return f"{prefix}:{{install:{enterprise_id or 'none'}-{team_id or 'none'}}}"


def oauth_state_key(prefix: str, state: str) -> str:
    return f"{prefix}:oauth-state:{state}"


@dataclass(frozen=True)
class ConversationKeys:
    prefix: str
    conversation_id: str

    def __post_init__(self) -> None:
        if not self.conversation_id or any(c in self.conversation_id for c in "{}\n\r"):
            raise ThreadkeeperError(
                f"invalid conversation id {self.conversation_id!r}: it must be non-empty and contain "
                "no braces or line breaks"
            )

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.conversation_id}}}"

    @property
    def state(self) -> str:
        return f"{self.base}:state"

    @property
    def checkpoints(self) -> str:
        return f"{self.base}:cp"

    @property
    def messages(self) -> str:
        return f"{self.base}:msgs"

    @property
    def order(self) -> str:
        return f"{self.base}:order"

    @property
    def inbox(self) -> str:
        return f"{self.base}:inbox"

    @property
    def dead(self) -> str:
        return f"{self.base}:dead"

    @property
    def notes(self) -> str:
        return f"{self.base}:notes"

    @property
    def lease(self) -> str:
        return f"{self.base}:lease"

    @property
    def prepared(self) -> str:
        return f"{self.base}:prepared"

    @property
    def preparing(self) -> str:
        return f"{self.base}:preparing"

    @property
    def thread(self) -> str:
        return f"{self.base}:thread"

    @property
    def vectors(self) -> str:
        return f"{self.base}:vectors"

    @property
    def recall(self) -> str:
        return f"{self.base}:recall"

    def dedup(self, key: str) -> str:
        return f"{self.base}:dedup:{key}"

    @property
    def durable(self) -> list[str]:
        """The conversation's keys that live for the retention period (order matters to Lua)."""
        return [self.state, self.checkpoints, self.messages, self.order, self.inbox, self.notes]
