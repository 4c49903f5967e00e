"""The erase functions of slices above erasure, which it cannot import (the layers: a slice imports
only those below it): a memory pipeline's runs (`catalog.dialects.pipelines`). Each registers here
when its package is imported (the application imports every slice) and `erasure.service.erase_subject`
runs it in its transaction, after the slices below."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg

# (the transaction, the subject) → how many of the slice's rows changed
SubjectEraser = Callable[[asyncpg.Connection, str], Awaitable[int]]

_SUBJECT: dict[str, SubjectEraser] = {}


def on_erase_subject(name: str, eraser: SubjectEraser) -> None:
    """Register what a slice erases of a data subject; `name` says what (`pipeline_runs`)."""
    _SUBJECT[name] = eraser


def subject_erasers() -> list[tuple[str, SubjectEraser]]:
    return sorted(_SUBJECT.items())
