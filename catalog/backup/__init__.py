"""Backup and restore of one store: its portable archive (export) and its restore (import)."""
