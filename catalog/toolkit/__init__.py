"""Memory tools for agents: `MEMORY_INSTRUCTIONS` (the system prompt for memory), the tools
defined once (`TOOLS`, `call`), and the MCP server that serves them."""

from catalog.toolkit.calls import Outcome, function_tools, run_call
from catalog.toolkit.instructions import EXTRACTION_INSTRUCTIONS, MEMORY_INSTRUCTIONS
from catalog.toolkit.tools import TOOLS, Bound, Tool, ToolError, call

__all__ = [
    "EXTRACTION_INSTRUCTIONS",
    "MEMORY_INSTRUCTIONS",
    "TOOLS",
    "Bound",
    "Outcome",
    "Tool",
    "ToolError",
    "call",
    "function_tools",
    "run_call",
]
