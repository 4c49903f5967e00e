"""Lineage: which entry was derived from which entries, conversations or sessions (edges by entry
id and key, and by store, scope and thread), and which request read or wrote which store."""

from catalog.lineage.repo import EntryRef, TranscriptRef
from catalog.lineage.service import check_origin, erase_scope, record

__all__ = ["EntryRef", "TranscriptRef", "check_origin", "erase_scope", "record"]
