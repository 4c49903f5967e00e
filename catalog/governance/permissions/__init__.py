"""Permissions: granting and revoking privileges, and explaining a principal's effective ones;
`archive`: the grants a store's archive holds (`catalog.backup`)."""

from catalog.governance.permissions import archive_repo as archive

__all__ = ["archive"]
