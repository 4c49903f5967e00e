"""Memory pipelines of the agent dialect (`/api/2.0/agents/memory-pipelines`): a session store
distilled into a memory store by runs of memory extraction, done by a background worker in every
server process as the pipeline's creator, durable across crashes. Erasing a data subject takes it
out of the runs' reports (each step's own rule) and errors (`registry.erase_subject`, registered
with `catalog.erasure`)."""

from catalog.dialects.pipelines import registry
from catalog.dialects.pipelines.worker import PipelineWorker
from catalog.erasers import on_erase_subject

on_erase_subject("pipeline_runs", registry.erase_subject)

__all__ = ["PipelineWorker"]
