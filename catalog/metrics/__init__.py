"""`GET /metrics`: the server's own figures in the Prometheus text format (READ_AUDIT)."""

from catalog.metrics.service import CONTENT_TYPE, render

__all__ = ["CONTENT_TYPE", "render"]
