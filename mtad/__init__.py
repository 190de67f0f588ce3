"""mtad: a mail transfer agent daemon that keeps its spool in PostgreSQL."""

__version__ = "0.1.0"
