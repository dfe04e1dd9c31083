"""Moved to stackbone.plumbing (issue 29, docs/embedding.md). Each module here is a shim whose import
warns (DeprecationWarning, naming the new path) and gives the moved module itself, so old imports
(and attributes a test sets) keep working for one release (studio/_moved.py)."""
