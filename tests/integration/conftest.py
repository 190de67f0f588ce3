"""Fixtures of the integration tier: submission servers on the test's own event loop
(tests/integration/submitting.py), a client TLS context, a smarthost, a sink and an IMAP server."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mtad import db, submission
from tests import imap
from tests.integration.submitting import Factory, Submission, submission_server
from tests.sink import Sink


@pytest.fixture
def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@pytest.fixture
def make_submission(database: db.Database, tls_files: tuple[Path, Path]) -> Factory:
    """make_submission(tls=True, **settings) -> async context manager of a running server."""

    def make(*, tls: bool = False, **overrides: Any) -> contextlib.AbstractAsyncContextManager[Submission]:
        return submission_server(database, tls_files if tls else None, **overrides)

    return make


@pytest.fixture
async def smarthost(tls_files: tuple[Path, Path]) -> AsyncIterator[Sink]:
    """A smarthost on 127.0.0.1 (its certificate is for "localhost"): AUTH required after
    STARTTLS, no logins yet (tests add them)."""
    started = await Sink(("127.0.0.1",), tls=submission.tls_context(*tls_files), logins={}).start()
    yield started
    await started.stop()


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    """An SMTP sink on 127.0.0.2 and 127.0.0.3 (the test zone's MX hosts)."""
    started = await Sink(("127.0.0.2", "127.0.0.3")).start()
    yield started
    await started.stop()


@pytest.fixture(scope="module")
def dovecot() -> Iterator[imap.Dovecot]:
    """A Dovecot IMAP server for the module's tests (skipped where Dovecot is missing)."""
    if imap.missing() is not None:
        pytest.skip(str(imap.missing()))
    server = imap.Dovecot()
    server.start()
    try:
        yield server
    finally:
        server.stop()
