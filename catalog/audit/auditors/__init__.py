"""Auditors' access to the audit log: listing events with filters, and verifying the chain."""
