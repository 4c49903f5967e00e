"""Lineage: which entry was derived from which (edges by entry id and key), and which request
read or wrote which store."""

from catalog.lineage.repo import EntryRef
from catalog.lineage.service import record

__all__ = ["EntryRef", "record"]
