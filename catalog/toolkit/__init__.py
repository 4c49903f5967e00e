"""The agent toolkit: `MEMORY_INSTRUCTIONS` (the system prompt for memory), and the memory tools
defined once (`TOOLS`, `call`, `run_call`), each run as its entry operation. The MCP server
(`catalog.dialects.mcp`), responses and extraction all offer these same tools."""

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
