"""OpenAI-compatible responses over a conversation: the upstream model answers with the memory
tools of the conversation's store and scope, which the server runs itself as the caller."""
