"""The audit trail:

- `log`: appending every request's event to the hash chain, durable before the answer, with
  scopes and paths as pseudonyms (used by every layer above it);
- `lineage`: what each entry was derived from, and which request read or wrote what;
- `auditors`: what auditors read (events, chain verification, lineage) over HTTP.
"""
