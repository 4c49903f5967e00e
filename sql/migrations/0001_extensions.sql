-- First of all: pgvector, so the pool can register its codec.
CREATE EXTENSION IF NOT EXISTS vector;
