"""The limits of this box. Edit this file (or point STACKBONE_WORKSPACE at your own module);
`manage.py migrate` or `manage.py limits sync` brings the declared values to the database."""

from limits.config import define_workspace

workspace = define_workspace(
    limits={
        "voice-calls": {"capacity": 20, "max_hold": "45m"},
        "partner-api": {"capacity": 5, "max_hold": "10m"},
        "report-exports": {"capacity": 2, "max_hold": "30m"},
    }
)
