"""The durable run layer (stackbone.runs) and the web plumbing under it (stackbone.plumbing), as one
Django app: `INSTALLED_APPS += ["stackbone"]` (docs/embedding.md). It knows nothing of limits nor
of the project: limits listens to its signals, and a project wires it in its settings."""
