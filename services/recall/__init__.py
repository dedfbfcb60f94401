"""Recall: the earlier messages of a thread that matter to what was just asked, searched in the durable
history, and the search tool a real model may use to look further."""

from .derived import change_notice_id
from .index import RECALL_HEADER, ConversationIndex, Recall, line_counted, lineage_resolver
from .search_tool import thread_search_tool

__all__ = [
    "change_notice_id",
    "ConversationIndex",
    "Recall",
    "line_counted",
    "lineage_resolver",
    "RECALL_HEADER",
    "thread_search_tool",
]
