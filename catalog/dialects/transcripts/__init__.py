"""Transcripts as episodic memory: search over the items of a store's conversations (memory
stores) or sessions (session stores), keyword and semantic, with the privileges of reading them."""
