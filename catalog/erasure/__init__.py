"""Erasure: a scope, or a data subject, taken out of every slice that keeps it (right to be forgotten)."""
