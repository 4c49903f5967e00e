"""Entries: the one owner of entry behaviour (operations in, typed rows out)."""

from catalog.entries.repo import EntryRow
from catalog.entries.service import Page, Written

__all__ = ["EntryRow", "Page", "Written"]
