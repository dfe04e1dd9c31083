"""Web and infrastructure plumbing at the bottom of the house: access checks, the sign-in
throttle, middleware, the embedded broker transport, migration helpers. It imports nothing of
the layers above it."""
