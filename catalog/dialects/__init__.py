"""The compatibility dialects: the APIs of other ecosystems, each over the same governed core
(entries, search, governance, audit), so their clients work unchanged.

- `agents`: Databricks' agent-memory API (`/api/2.0/agents/memory-stores`, the AgentKit SDK);
- `sessions`: session stores, their sessions and items (`/api/2.0/agents/session-stores`);
- `extraction` and `pipelines`: a session's transcript into memories, by hand or on a schedule;
- `conversations` and `responses`: the OpenAI-compatible API (`/v1`, `/ai-gateway/mlflow/v1`);
- `transcripts`: conversations and session items searched as episodic memory;
- `mcp`: the memory tools as an MCP server.
"""
