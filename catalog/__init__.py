"""A governed memory catalog for AI agents."""

__version__ = "0.1.0"
