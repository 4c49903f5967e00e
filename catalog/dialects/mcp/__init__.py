"""The memory tools of one store as an MCP server (`server`), mounted at
`/mcp/memory-stores/{catalog.schema.store}` behind the access seam (`routes`)."""
