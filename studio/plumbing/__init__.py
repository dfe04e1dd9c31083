"""Moved to stackbone.plumbing (issue 29, docs/embedding.md). Each module here is a shim whose
import gives the moved module itself, so old imports (and attributes a test sets) keep working."""
