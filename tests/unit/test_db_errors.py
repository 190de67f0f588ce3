"""asyncpg's exceptions as mtad's errors, translated once at the edge."""

import asyncpg

from mtad import db
from mtad.base import errors


def test_a_connection_out_of_step_with_a_killed_server_is_unavailable_not_a_crash() -> None:
    # Seen when the postmaster was killed during a LISTEN: not an InterfaceError, yet the
    # connection is as unusable as a closed one; the caller takes another.
    found = db.translate(asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"))
    assert isinstance(found, errors.DatabaseUnavailable)


def test_a_unique_violation_is_a_conflict() -> None:
    assert isinstance(db.translate(asyncpg.UniqueViolationError("duplicate key")), errors.Conflict)
