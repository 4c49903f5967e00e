"""Entries: the one owner of entry behaviour (operations in, typed rows out); `archive`: the
entries and history a store's archive holds (`catalog.backup`)."""

from catalog.entries.repo import EntryRow, archive
from catalog.entries.service import Page, Written

__all__ = ["EntryRow", "Page", "Written", "archive"]
