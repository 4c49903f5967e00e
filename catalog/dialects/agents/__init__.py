"""The agent-memory dialect (AgentKit SDK compatible) over the same stores and entries."""
