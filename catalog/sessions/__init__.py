"""Session stores of the agent dialect (`/api/2.0/agents/session-stores`)."""
