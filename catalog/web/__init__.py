"""The HTTP shell around the services, and nothing of the domain:

- `serving`: the connection layer under the app (caps, slow clients, JSON for malformed HTTP);
- `middleware`: a request's id, log line and audit event, and the gate on bodies and parameters;
- `routing`, `openapi`, `deps`: how slices declare routes, their documented errors, their
  dependencies; `errors`: the one mapping of the error hierarchy to the wire;
- `health`: `/healthz`; `limits`: per-principal rate limits.
"""
