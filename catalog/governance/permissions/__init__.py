"""Permissions: granting and revoking privileges, and explaining a principal's effective ones."""
