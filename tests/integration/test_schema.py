"""The migrations produce the schema the code expects, once, even when raced."""

import asyncio
import uuid

import pytest

from mtad import db
from mtad.base import errors, lifecycle
from mtad.db import migrate
from mtad.mailboxes import accounts
from mtad.signing import dkim
from mtad.spool import campaigns
from tests.pg import admin, query, with_database


async def enum_values(database: db.Database, name: str) -> list[str]:
    rows = await query(database, f"SELECT unnest(enum_range(NULL::{name}))::text AS v")
    return [r["v"] for r in rows]


async def test_postgres_enums_mirror_the_python_enums(database: db.Database) -> None:
    assert await enum_values(database, "delivery_state") == [s.value for s in lifecycle.State]
    assert await enum_values(database, "delivery_reason") == [r.value for r in lifecycle.Reason]
    assert await enum_values(database, "account_state") == [s.value for s in accounts.State]
    assert await enum_values(database, "reservation_state") == [s.value for s in accounts.ReservationState]
    assert await enum_values(database, "dkim_key_state") == [s.value for s in dkim.KeyState]
    assert await enum_values(database, "campaign_state") == [s.value for s in campaigns.State]


EXPECTED_COLUMNS = {
    "messages": {
        "id", "tenant", "sender", "message_id", "idempotency_key", "size", "body", "smtputf8",
        "client_address", "received_at", "pool", "account_pool", "dkim_fields", "dkim_keys", "dkim_header",
        "campaign",
    },
    "deliveries": {
        "id", "message", "recipient", "domain", "state", "priority", "attempts", "next_attempt_at",
        "lease_owner", "lease_expires_at", "attempt_id", "last_code", "last_enhanced", "last_text",
        "reason", "created_at", "updated_at", "route_group", "failures", "campaign",
    },
    "events": {"id", "at", "kind", "message", "delivery", "tenant", "data", "xid"},
    "event_consumers": {"name", "position_xid", "position_id", "updated_at"},
    "webhook_messages": {
        "id", "endpoint", "event", "message", "payload", "state", "attempts", "next_at", "leased_by", "leased_until",
        "last_error", "created_at", "done_at", "request", "webhook_id",
    },
    "webhook_delivered": {"endpoint", "events"},
    "webhook_endpoints": {
        "id", "tenant", "url", "events", "secret", "previous_secret", "previous_until", "created_at", "batch",
    },
    "inboxes": {
        "account", "host", "port", "uidvalidity", "last_uid", "node", "lease_until", "read_at", "error", "created_at",
    },
    "tenants": {"name", "password_hash", "state", "created_at", "updated_at"},
    "nodes": {"id", "hostname", "pid", "started_at", "heartbeat_at", "delivers", "reloaded_at", "reload_result",
              "listening", "controls_applied"},
    "controls": {"one", "version"},
    "idempotency_keys": {"tenant", "key", "message", "expires_at"},
    "schema_migrations": {"version", "name", "applied_at"},
    "schema_functions": {"files", "installed"},
    "buckets": {"route_group", "source", "rate", "sessions", "changed_by", "changed_at", "updated_at"},
    "warmup": {"address", "provider", "day", "day_started", "sent", "deferred", "complaints", "updated_at"},
    "warmup_complaints": {"address", "provider", "minute", "complaints"},
    "bucket_usage": {
        "route_group", "source", "node", "local_rate", "allowed", "tokens", "in_flight", "decreases", "increases",
        "updated_at",
    },
    "accounts": {
        "id", "name", "address", "pool", "host", "port", "tls", "login", "mechanism", "secret", "state",
        "state_until", "state_reason", "daily_cap", "min_gap", "gap_jitter_low", "gap_jitter_high", "per_second",
        "per_minute", "per_hour", "time_zone", "created_at", "updated_at", "oauth_token_url", "oauth_client_id",
        "oauth_client_secret", "oauth_scope", "health_since",
    },
    "account_reservations": {"id", "account", "reserved_at", "next_gap", "state", "delivery", "settled_at", "node",
                             "recipients", "campaign"},
    "suppressions": {"tenant", "address", "reason", "detail", "event", "delivery", "created_at", "expires_at"},
    "soft_bounces": {"event", "tenant", "address", "delivery", "at"},
    "account_days": {"account", "day", "sends"},
    "source_addresses": {"address", "pool", "turn", "turn_sends", "parked_until", "updated_at"},
    "source_leases": {"address", "node", "sends", "taken_at", "expires_at"},
    "tenant_states": {
        "tenant", "paused_at", "paused_by", "paused_reason", "resumed_at", "probation", "probation_since",
        "probation_sent", "graduated_at",
    },
    "tenant_usage": {"tenant", "period", "starts", "messages"},
    "suspensions": {"kind", "key", "reason", "created_at", "until"},
    "reroutes": {"provider", "pool", "reason", "created_at", "until"},
    "reputation_counts": {
        "scope", "tenant", "key", "minute", "delivered", "deferred", "bounced", "complained", "unsubscribed",
        "refused",
    },
    "dkim_keys": {
        "id", "domain", "selector", "algorithm", "private_key", "record", "state", "created_at", "changed_at",
        "published_at", "published_ttl",
    },
    "mta_sts_policies": {
        "domain", "policy_id", "mode", "mx", "max_age", "fetched_at", "expires_at", "failure", "failed_at",
    },
    "tls_report_counts": {
        "day", "domain", "policy_type", "result", "mx_host", "receiving_ip", "sending_ip", "detail", "sessions",
    },
    "tls_reports": {"day", "domain", "report_id", "made_at", "sent_to", "failures"},
    "unknown_sends": {"delivery", "account", "since", "looked_at", "folder"},
    "campaigns": {"id", "tenant", "name", "state", "reason", "created_at", "changed_at", "max_per_hour",
                  "max_per_day", "pool_paused"},
    "campaign_sends": {"campaign", "hour", "sends"},
    "campaign_moves": {"campaign", "bucket", "n", "at"},
    "campaign_counts": {"campaign", "bucket", "n"},
    "campaign_minutes": {"campaign", "minute", "settled"},
}  # fmt: skip


async def test_migrations_produce_the_expected_tables_and_indexes(database: db.Database) -> None:
    rows = await query(
        database, "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'"
    )
    indexes = {r["indexname"] for r in await query(database, "SELECT indexname FROM pg_indexes")}
    found: dict[str, set[str]] = {}
    for row in rows:
        found.setdefault(row["table_name"], set()).add(row["column_name"])
    assert found == EXPECTED_COLUMNS
    assert {"deliveries_due", "deliveries_lease_expiry", "deliveries_message", "events_message", "events_account",
            "account_reservations_confirmed"} <= indexes  # fmt: skip
    # Room on each page for the version the attempt id makes (a HOT update).
    [options] = await query(database, "SELECT reloptions FROM pg_class WHERE relname = 'deliveries'")
    assert options["reloptions"] == ["fillfactor=50"]


async def test_migrations_apply_once_even_when_two_nodes_race(pg_admin_dsn: str) -> None:
    name = f"race_{uuid.uuid4().hex[:12]}"
    await admin(pg_admin_dsn, f"CREATE DATABASE {name}")
    dsn = with_database(pg_admin_dsn, name)
    try:
        first, second = await asyncio.gather(migrate.apply(dsn), migrate.apply(dsn))
        assert sorted(m.version for m in first + second) == [m.version for m in migrate.available()]
        assert await migrate.apply(dsn) == []
        database = await db.Database.connect(dsn)
        try:
            rows = await database.fetch("migrate/applied")
        finally:
            await database.close()
        assert [r["version"] for r in rows] == [m.version for m in migrate.available()]
    finally:
        await admin(pg_admin_dsn, f"DROP DATABASE {name} WITH (FORCE)")


async def test_events_are_append_only(database: db.Database) -> None:
    await query(database, "INSERT INTO events (kind, message, data) VALUES ('received', $1, '{}')", uuid.uuid4())
    with pytest.raises(errors.SpoolError, match="append-only"):
        async with database.transaction() as tx:
            await tx.execute_text("UPDATE events SET kind = 'delivered'")


async def test_a_leased_delivery_must_have_an_owner(database: db.Database) -> None:
    with pytest.raises(errors.SpoolError, match="leased_has_owner"):
        async with database.transaction() as tx:
            await tx.execute_text(
                "INSERT INTO deliveries (message, recipient, domain, state, next_attempt_at, created_at, updated_at)"
                " VALUES (gen_random_uuid(), 'a@b.c', 'b.c', 'leased', now(), now(), now())"
            )


# What makes a function what it is, for every function of a schema; the argument
# and result types of the session's search_path print unqualified.
FUNCTIONS = """
    SELECT p.proname AS name, pg_get_function_identity_arguments(p.oid) AS arguments,
           pg_get_function_result(p.oid) AS result, p.prokind::text AS kind, l.lanname AS language,
           p.provolatile::text AS volatility, p.proconfig AS config, p.prosrc AS body
    FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
    WHERE p.pronamespace = $1::regnamespace
    ORDER BY 1, 2
"""


async def functions_in(conn: db.Connection, schema: str) -> list[dict[str, object]]:
    return [dict(r) for r in await conn._conn.fetch(FUNCTIONS, schema)]


async def rows_of(dsn: str, text: str) -> list[tuple[object, ...]]:
    database = await db.Database.connect(dsn, max_size=1)
    try:
        return sorted(tuple(row) for row in await query(database, text))
    finally:
        await database.close()


async def functions_of(dsn: str) -> list[dict[str, object]]:
    conn = await db.connect_once(dsn)
    try:
        return await functions_in(conn, "public")
    finally:
        await db.close(conn)


async def test_the_functions_are_exactly_those_of_the_function_files(dsn: str) -> None:
    # The files run again into a schema of their own (the tables they read stay in
    # public): what they define there must be what the migrated database has, no
    # more (an old overload, a function no file defines) and no other text.
    conn = await db.connect_once(dsn)
    try:
        async with conn.transaction():
            await conn.execute_text("CREATE SCHEMA from_files; SET LOCAL search_path = from_files, public")
            for function in migrate.functions():
                await conn.execute_text(function.text)
            from_files = await functions_in(conn, "from_files")
            in_database = await functions_in(conn, "public")
    finally:
        await db.close(conn)
    assert {f["name"] for f in from_files} >= {"mtad_reserve", "mtad_choose", "events_are_append_only"}
    assert in_database == from_files


async def test_a_database_upgraded_from_before_the_function_files_ends_like_a_fresh_one(
    pg_admin_dsn: str, template_dsn: str
) -> None:
    # A database migrated by a release without the function files, one of whose
    # functions then read otherwise: migrated again, it has the functions as the
    # files say, like a fresh one, and applying once more changes nothing.
    name = f"upgrade_{uuid.uuid4().hex[:12]}"
    await admin(pg_admin_dsn, f"CREATE DATABASE {name}")
    dsn = with_database(pg_admin_dsn, name)
    try:
        conn = await db.connect_once(dsn)
        try:
            await conn.execute("migrate/create_table")
            for migration in migrate.available():
                async with conn.transaction():
                    await conn.execute_text(migration.text)
                    await conn.execute("migrate/record", migration.version, migration.name)
            await conn.execute_text(
                "CREATE OR REPLACE FUNCTION mtad_account_day(zone text, at timestamptz) RETURNS tstzrange"
                " LANGUAGE sql STABLE AS $$ SELECT tstzrange(at, at + interval '1 day') $$"
            )
        finally:
            await db.close(conn)
        fresh = await functions_of(template_dsn)
        assert await functions_of(dsn) != fresh
        assert await migrate.apply(dsn) == []
        assert await functions_of(dsn) == fresh
        versions = "SELECT proname, xmin::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
        written = await rows_of(dsn, versions)
        assert await migrate.apply(dsn) == []  # nothing changed: the files are not run again
        assert await rows_of(dsn, versions) == written
        await admin(dsn, "CREATE OR REPLACE FUNCTION mtad_account_day(zone text, at timestamptz) RETURNS tstzrange"
                         " LANGUAGE sql STABLE AS $$ SELECT tstzrange(at, at + interval '2 days') $$")  # fmt: skip
        assert await migrate.apply(dsn) == []  # changed by hand: the files run again
        assert await functions_of(dsn) == fresh
    finally:
        await admin(pg_admin_dsn, f"DROP DATABASE {name} WITH (FORCE)")
