"""The audit log's recorder: one hash-chained event per request (and per system event, and per
operation of background work: `background`), appended durably before the request is answered.
Its SQL is in `repo`. Reading and verifying it is the `auditors` slice's."""

from catalog.recorder.background import background
from catalog.recorder.background import record as record_background
from catalog.recorder.pseudonyms import mark
from catalog.recorder.writer import (
    AuditWriter,
    PendingEvent,
    audited,
    begin_operation,
    current,
    note_decision,
    note_outcome,
    note_params,
    note_refusal,
    note_result,
    note_success_status,
    operation,
    record_system_events,
)

__all__ = [
    "AuditWriter",
    "PendingEvent",
    "audited",
    "background",
    "begin_operation",
    "current",
    "mark",
    "note_decision",
    "note_outcome",
    "note_params",
    "note_refusal",
    "note_result",
    "note_success_status",
    "operation",
    "record_background",
    "record_system_events",
]
