"""Lineage: which entry was derived from which entries, conversations or sessions (edges by entry
id and key, and by store, scope and thread), and which request read or wrote which store;
`archive`: the edges a store's archive holds (`catalog.backup`)."""

from catalog.lineage import archive_repo as archive
from catalog.lineage.repo import EntryRef, TranscriptRef
from catalog.lineage.service import check_origin, erase_scope, record

__all__ = ["EntryRef", "TranscriptRef", "archive", "check_origin", "erase_scope", "record"]
