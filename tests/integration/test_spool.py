"""The group-committed accept path and the queue queries, against real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import psutil  # type: ignore[import-untyped]
import pytest

from mtad import db
from mtad.base import errors
from mtad.spool import commit, queue
from tests.integration.spooling import message, running
from tests.pg import query
from tests.proxy import PgProxy


async def test_a_commit_writes_message_deliveries_and_event_together(database: db.Database) -> None:
    async with running(commit.GroupCommitter(database)) as committer:
        msg = message("a@example.com", "B@Bücher.example")
        accepted = await committer.commit(msg)
    assert accepted == commit.Accepted(msg.id, duplicate=False)
    [stored] = await query(database, "SELECT * FROM messages")
    assert stored["id"] == msg.id
    assert bytes(stored["body"]) == msg.body
    assert stored["size"] == len(msg.body)
    rows = await query(database, "SELECT recipient, domain, state::text, attempts FROM deliveries ORDER BY id")
    assert [tuple(r) for r in rows] == [
        ("a@example.com", "example.com", "queued", 0),
        ("B@xn--bcher-kva.example", "xn--bcher-kva.example", "queued", 0),
    ]
    [event] = await query(database, "SELECT kind, message, tenant, data FROM events")
    assert (event["kind"], event["message"], event["tenant"]) == ("received", msg.id, "t1")


async def test_concurrent_commits_share_transactions(database: db.Database) -> None:
    committer = commit.GroupCommitter(database, window=0.05, max_batch=64)
    async with running(committer):
        results = await asyncio.gather(*(committer.commit(message()) for _ in range(150)))
    assert len({r.queue_id for r in results}) == 150
    stats = committer.statistics()
    assert stats.messages == 150
    assert stats.batches <= 10, stats  # 150 messages at most 64 a batch, not 150 transactions
    [count] = await query(database, "SELECT count(*) AS n FROM deliveries")
    assert count["n"] == 150


async def test_the_same_key_is_accepted_once_per_tenant(database: db.Database) -> None:
    async with running(commit.GroupCommitter(database)) as committer:
        first = await committer.commit(message(key="key:order-1"))
        again = await committer.commit(message(key="key:order-1"))
        other_tenant = await committer.commit(message(key="key:order-1", tenant="t2"))
        # Two submissions of one key in the same batch: one message.
        same_batch = await asyncio.gather(*(committer.commit(message(key="key:order-2")) for _ in range(3)))
    assert not first.duplicate
    assert again == commit.Accepted(first.queue_id, duplicate=True)
    assert not other_tenant.duplicate
    assert len({r.queue_id for r in same_batch}) == 1
    assert sorted(r.duplicate for r in same_batch) == [False, True, True]
    [count] = await query(database, "SELECT count(*) AS n FROM messages")
    assert count["n"] == 3
    [count] = await query(database, "SELECT count(*) AS n FROM deliveries")
    assert count["n"] == 3


async def test_a_key_is_free_again_after_its_window(database: db.Database) -> None:
    clock = [datetime.now(UTC)]
    async with running(commit.GroupCommitter(database, now=lambda: clock[0])) as committer:  # 24 h by default
        first = await committer.commit(message(key="key:k"))
        clock[0] += timedelta(hours=23)
        assert (await committer.commit(message(key="key:k"))).duplicate
        clock[0] += timedelta(hours=2)
        later = await committer.commit(message(key="key:k"))
    assert not later.duplicate
    assert later.queue_id != first.queue_id
    async with running(commit.GroupCommitter(database, idempotency_window=60, now=lambda: clock[0])) as committer:
        first = await committer.commit(message(key="key:m"))
        clock[0] += timedelta(seconds=59)
        assert (await committer.commit(message(key="key:m"))).duplicate
        clock[0] += timedelta(seconds=2)
        assert not (await committer.commit(message(key="key:m"))).duplicate


async def test_unreachable_database_fails_cleanly_and_accept_resumes(dsn: str) -> None:
    with PgProxy(dsn) as proxy:
        database = await db.Database.connect(proxy.dsn, max_size=3)
        try:
            async with running(commit.GroupCommitter(database)) as committer:
                assert not (await committer.commit(message())).duplicate
                proxy.cut()
                with pytest.raises(errors.DatabaseUnavailable):
                    await committer.commit(message())
                proxy.restore()
                assert not (await committer.commit(message())).duplicate
        finally:
            await database.close()
    direct = await db.Database.connect(dsn)
    try:
        [count] = await query(direct, "SELECT count(*) AS n FROM messages")
        [deliveries] = await query(direct, "SELECT count(*) AS n FROM deliveries")
    finally:
        await direct.close()
    assert (count["n"], deliveries["n"]) == (2, 2)  # nothing half-written


async def test_commit_after_close_is_refused(database: db.Database) -> None:
    committer = commit.GroupCommitter(database)
    async with running(committer):
        pass
    with pytest.raises(errors.DatabaseUnavailable, match="shutting down"):
        await committer.commit(message())


async def test_queue_queries(database: db.Database) -> None:
    async with running(commit.GroupCommitter(database)) as committer:
        msg = message("a@example.com", "b@example.com")
        await committer.commit(msg)
        await committer.commit(message("c@example.com"))
    everything = [d async for d in queue.deliveries(database)]
    assert [d["recipient"] for d in everything] == ["a@example.com", "b@example.com", "c@example.com"]
    assert [d async for d in queue.deliveries(database, queue.Filters(states=("delivered",)))] == []
    assert await commit.depth(database) == {"queued": 3}

    view = await queue.show(database, str(msg.id))
    assert view.message["sender"] == "app@example.org"
    assert bytes(view.message["head"]).startswith(b"Subject: x")
    assert [d["recipient"] for d in view.deliveries] == ["a@example.com", "b@example.com"]
    assert [e["kind"] for e in view.events] == ["received"]
    by_delivery = await queue.show(database, str(view.deliveries[1]["id"]))
    assert by_delivery.message["id"] == msg.id

    for missing in (str(uuid.uuid4()), "999999", "not-an-id"):
        with pytest.raises(errors.NotFound):
            await queue.show(database, missing)


async def test_run_until_idle_writes_what_is_queued(database: db.Database) -> None:
    committer = commit.GroupCommitter(database, max_batch=3)
    waiting = [asyncio.ensure_future(committer.commit(message())) for _ in range(7)]
    await asyncio.sleep(0)  # let every commit() queue its message
    await committer.run_until_idle()
    results = await asyncio.gather(*waiting)
    assert len({r.queue_id for r in results}) == 7
    assert committer.statistics().batches == 3  # 3 + 3 + 1


async def test_batches_closed_by_their_bytes_are_written_two_at_a_time(dsn: str, database: db.Database) -> None:
    """A batch that reaches max_batch_bytes is written beside the next one, never
    more than two at once. Here another transaction holds a lock the accept statement
    waits for, so the batches in flight can be counted in PostgreSQL. The second
    batch resubmits the first one's keys in the other order: whichever claims them
    first, the other waits for its commit and answers with its queue ids."""
    body = b"Subject: x\r\n\r\n" + b"y" * 4000 + b"\r\n"
    committer = commit.GroupCommitter(database, max_batch_bytes=2 * len(body))
    keys = ["key:a", "key:b", "key:b", "key:a", "key:c", "key:d"]  # three batches of two
    locker = await db.connect_once(dsn)
    try:
        await locker.execute_text("BEGIN")
        await locker.execute_text("LOCK TABLE messages IN SHARE MODE")
        async with running(committer):
            commits = [asyncio.create_task(committer.commit(message(key=key, body=body))) for key in keys]
            for _ in range(500):  # each a round trip to PostgreSQL
                [waiting] = await query(
                    database,
                    "SELECT count(*) AS n FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()",
                )
                if waiting["n"] >= 2:
                    break
            assert waiting["n"] == 2  # the first two batches; the third waits for one of them
            await locker.execute_text("ROLLBACK")
            accepted = await asyncio.gather(*commits)
    finally:
        await db.close(locker)

    # Either batch may claim the keys first: the other one's messages are its duplicates.
    assert (accepted[0].queue_id, accepted[1].queue_id) == (accepted[3].queue_id, accepted[2].queue_id)
    assert [a.duplicate for a in accepted].count(True) == 2
    assert [a.duplicate for a in accepted[4:]] == [False, False]
    assert committer.statistics().batches == 3
    [count] = await query(database, "SELECT count(*) AS n FROM messages")
    assert count["n"] == 4


async def timed(
    committer: commit.GroupCommitter, msg: commit.NewMessage
) -> tuple[float, commit.Accepted | errors.SpoolError]:
    """How long commit() took, and what it returned or raised."""
    loop = asyncio.get_running_loop()
    submitted = loop.time()
    try:
        outcome: commit.Accepted | errors.SpoolError = await committer.commit(msg)
    except errors.SpoolError as exc:
        outcome = exc
    return loop.time() - submitted, outcome


async def test_a_hung_commit_answers_each_message_within_the_timeout_of_its_own_submission(
    dsn: str, database: db.Database
) -> None:
    """Another transaction holds a lock the accept statement waits for: the first
    message's batch hangs in PostgreSQL, three batches queue up behind it. Every
    message is answered 451 within the commit timeout of its own submission (not
    after the batches ahead of it have timed out one by one); the queued batches
    whose messages all expired are never sent; a resubmission is accepted once."""
    timeout = 1.0
    committer = commit.GroupCommitter(database, max_batch=2, timeout=timeout)

    keys = [f"key:{i}" for i in range(7)]
    locker = await db.connect_once(dsn)
    try:
        await locker.execute_text("BEGIN")
        await locker.execute_text("LOCK TABLE messages IN SHARE MODE")  # inserts wait for it
        async with running(committer):
            first = asyncio.create_task(timed(committer, message(key=keys[0])))
            await asyncio.sleep(0.3 * timeout)
            [waiting] = await query(
                database,
                "SELECT count(*) AS n FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()",
            )
            assert waiting["n"] == 1  # the first batch's statement, in PostgreSQL
            queued = [asyncio.create_task(timed(committer, message(key=key))) for key in keys[1:]]
            answers = await asyncio.gather(first, *queued)
            await locker.execute_text("ROLLBACK")
    finally:
        await db.close(locker)

    for elapsed, outcome in answers:
        assert isinstance(outcome, errors.DatabaseUnavailable), outcome  # 451: not accepted, try again
        assert 0.9 * timeout <= elapsed < 1.5 * timeout, answers
    assert isinstance(answers[0][1], errors.OutcomeUnknown)  # its batch was in flight: it may yet commit
    stats = committer.statistics()
    assert (stats.batches, stats.failures) == (0, 2), stats  # the first batch and the next one
    assert stats.expired == 4, stats  # the last two batches: their deadlines had passed when their turn came

    async with running(commit.GroupCommitter(database)) as again:
        resubmitted = [await again.commit(message(key=key)) for key in keys]
    [count] = await query(database, "SELECT count(*) AS n FROM messages")
    assert count["n"] == 7  # each message once, whether its first submission committed or not
    assert len({r.queue_id for r in resubmitted}) == 7


@contextlib.asynccontextmanager
async def frozen(database: db.Database) -> AsyncIterator[None]:
    """PostgreSQL stopped dead until exit: SIGSTOP of the postmaster and every backend."""
    [row] = await query(database, "SELECT pg_backend_pid() AS pid, current_setting('data_directory') AS data")
    processes: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        postmaster = psutil.Process(row["pid"]).parent()
        if postmaster is not None and postmaster.cwd() == row["data"]:
            processes = [postmaster, *postmaster.children()]
    if not processes:
        pytest.skip("the PostgreSQL server is not a process this test can signal")
    try:
        for process in processes:
            process.send_signal(signal.SIGSTOP)
        yield
    finally:
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)


async def test_a_frozen_server_answers_each_message_within_the_timeout_of_its_own_submission(
    database: db.Database,
) -> None:
    """The server stops answering altogether (even the cancel request of the batch
    that timed out hangs, so the writer is held past its own timeout): every message
    is still answered 451 within the commit timeout of its submission, and once the
    server is back the committer writes again at once."""
    timeout = 1.0
    committer = commit.GroupCommitter(database, max_batch=2, timeout=timeout)

    async with running(committer):
        await committer.commit(message())  # a pooled connection is open before the freeze
        async with frozen(database):
            first = asyncio.create_task(timed(committer, message()))
            await asyncio.sleep(0.3 * timeout)
            queued = [asyncio.create_task(timed(committer, message())) for _ in range(4)]
            await asyncio.sleep(timeout)  # the first batch has timed out, its cancel request hangs
            late = [asyncio.create_task(timed(committer, message())) for _ in range(2)]
            answers = await asyncio.gather(first, *queued, *late)
        after = await committer.commit(message())  # within the timeout, or it raises

    for elapsed, outcome in answers:
        assert isinstance(outcome, errors.DatabaseUnavailable), outcome  # 451: not accepted, try again
        assert 0.9 * timeout <= elapsed < 1.5 * timeout, answers
    assert isinstance(answers[0][1], errors.OutcomeUnknown)  # its batch was in flight: it may yet commit
    assert not after.duplicate
