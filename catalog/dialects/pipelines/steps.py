"""What a step of a pipeline run after its sessions is (`Step`), what it is given (`StepRun`) and
what it answers (`Done`); the steps themselves are listed in `registry`, in the order a run takes
them.

A pipeline names the steps its runs take (`memory_pipelines.steps`); a run the steps it takes,
with each one's options (`pipeline_runs.steps`: {name: {option: value}}), and the report of each
step it has done (`pipeline_runs.reports`: {name: report}), written once the step is done, so that
a run taken over afterwards does not do it again. The worker runs each step the run takes and has
no report of yet, after checking that whom the run answers to may still do every step of it, and
records a `pipelines.run` event whose phase is the step's name. A new step is a module with its
`Step` and one line in `registry`: no column, no branch of the worker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.pipelines.repo import PipelineRow


@dataclass(frozen=True)
class StepRun:
    """What a step is given: the pipeline, its creator (whom every write acts as), the scopes of
    the run's sessions that were extracted or unchanged (their actors, in order: never a model's
    choice) and the step's options on this run."""

    ctx: Context
    owner: Principal
    pipeline: PipelineRow
    scopes: list[str]
    options: dict[str, Any]


@dataclass(frozen=True)
class Done:
    """A step's outcome: its report (kept on the run), the parameters and the count of its audit
    event, and the reason the event keeps (its first failure)."""

    report: dict[str, Any]
    params: dict[str, Any]
    result_count: int
    reason: str | None = None


@dataclass(frozen=True)
class Step:
    name: str  # the key of its options and report on a run; the phase of its audit event
    run: Callable[[StepRun], Awaitable[Done]]
    # the report without what it names of a data subject (None: it names nothing of it)
    erase: Callable[[dict[str, Any], str], dict[str, Any] | None]
