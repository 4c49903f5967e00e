"""The agent toolkit: `MEMORY_INSTRUCTIONS` (the system prompt for memory), and the memory tools
defined once (`TOOLS`, `call`, `run_call`), each run as its entry operation, and the one loop in
which an upstream model calls tools (`converse`). The MCP server (`catalog.dialects.mcp`),
responses and extraction all offer these same tools; a pipeline's maintenance step offers tools of
its own of the same type (`Tool`), run by the same `run_call` in the same loop."""

from catalog.toolkit.calls import Outcome, function_tools, run_call
from catalog.toolkit.instructions import EXTRACTION_INSTRUCTIONS, MEMORY_INSTRUCTIONS
from catalog.toolkit.loop import Ran, converse
from catalog.toolkit.tools import TOOLS, Bound, Tool, ToolError, call

__all__ = [
    "EXTRACTION_INSTRUCTIONS",
    "MEMORY_INSTRUCTIONS",
    "TOOLS",
    "Bound",
    "Outcome",
    "Ran",
    "Tool",
    "ToolError",
    "call",
    "converse",
    "function_tools",
    "run_call",
]
