"""The audit log's recorder: one hash-chained event per request (and per system event), appended
durably before the request is answered. Reading and verifying it is the `audit` slice's."""

from catalog.auditlog.writer import (
    AuditContext,
    AuditWriter,
    audited,
    begin_operation,
    current,
    note_decision,
    note_outcome,
    note_params,
    note_result,
    operation,
    record_system_events,
)

__all__ = [
    "AuditContext",
    "AuditWriter",
    "audited",
    "begin_operation",
    "current",
    "note_decision",
    "note_outcome",
    "note_params",
    "note_result",
    "operation",
    "record_system_events",
]
