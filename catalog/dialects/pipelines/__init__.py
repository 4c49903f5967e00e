"""Memory pipelines of the agent dialect (`/api/2.0/agents/memory-pipelines`): a session store
distilled into a memory store by runs of memory extraction, done by a background worker in every
server process as the pipeline's creator, durable across crashes."""

from catalog.dialects.pipelines.worker import PipelineWorker

__all__ = ["PipelineWorker"]
