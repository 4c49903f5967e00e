"""Lineage: which entries were derived from which, and which requests read or wrote which stores."""
