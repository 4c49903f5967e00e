"""The audit log: one chained event per request, readable by auditors."""
