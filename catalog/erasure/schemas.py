"""Wire types of erasure (the system routes). Inputs forbid unknown fields."""

from __future__ import annotations

import msgspec

from catalog.wire import Input
from catalog.wire.inputs import Scope


class EraseRequest(Input, kw_only=True):
    scope: Scope


class ErasedStore(msgspec.Struct, kw_only=True):
    memory_store: str
    deleted: int


class EraseResult(msgspec.Struct, kw_only=True):
    scope: str
    deleted: int  # entries, in every store
    stores: list[ErasedStore]  # the stores that held entries of the scope, with how many
    also_deleted: dict[str, int] = {}  # the scope's conversations and sessions (actor = scope)
    held: list[str] = []  # stores under legal hold: their entries of the scope were left alone


class EraseSubjectRequest(Input, kw_only=True):
    subject: Scope


class EraseSubjectResult(msgspec.Struct, kw_only=True):
    subject: str
    erased: dict[str, int]  # entries deleted, by store
    held: list[str]  # stores under legal hold that keep the subject's entries
    also_deleted: dict[str, int]  # conversations and sessions
    audit_key_destroyed: bool  # its audit events can no longer be tied to it
