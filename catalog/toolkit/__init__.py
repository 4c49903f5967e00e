"""Memory tools for agents: `MEMORY_INSTRUCTIONS` (the system prompt for memory), the tools
defined once (`TOOLS`, `call`), and the MCP server that serves them."""

from catalog.toolkit.instructions import MEMORY_INSTRUCTIONS
from catalog.toolkit.tools import TOOLS, Bound, Tool, ToolError, call

__all__ = ["MEMORY_INSTRUCTIONS", "TOOLS", "Bound", "Tool", "ToolError", "call"]
