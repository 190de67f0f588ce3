"""Holdings: what a node holds, what is worked on, and the messages its jobs keep."""

import uuid
from datetime import UTC, datetime

from mtad.deliver.holdings import Holdings, Message
from mtad.spool.leases import Leased

M1, M2 = uuid.uuid4(), uuid.uuid4()


def leased(delivery: int, message: uuid.UUID = M1) -> Leased:
    now = datetime.now(UTC)
    return Leased(delivery, message, f"r{delivery}@example.com", "example.com", 0, 0, 0, now, False, now)


def message(message_id: uuid.UUID, body: bytes | None) -> Message:
    return Message(message_id, "t1", "app@example.org", "<m@example.org>", len(body or b""), False, None, None, body)


def test_held_worked_on_and_let_go() -> None:
    holdings = Holdings(body_cache=1000)
    one, two, three = leased(1), leased(2), leased(3)
    holdings.hold([one, two, three])
    assert (len(holdings), 2 in holdings, list(holdings)) == (3, True, [1, 2, 3])
    holdings.working([one, two])
    assert (holdings.worked_on, holdings.unstarted()) == (2, [3])  # a stop hands back only 3
    holdings.waiting([two])  # back in a queue
    assert holdings.unstarted() == [2, 3]
    holdings.let_go([1])  # recorded
    assert (len(holdings), holdings.worked_on, 1 in holdings) == (2, 0, False)


def test_a_missed_renewal_lets_go_only_of_what_no_attempt_works_on() -> None:
    holdings = Holdings(body_cache=1000)
    holdings.hold([leased(1), leased(2), leased(3)])
    holdings.working([leased(2)])
    assert holdings.lost([1, 2, 3, 4], kept={3}) == [1]  # 2: its attempt's record decides; 4: not held
    assert list(holdings) == [2, 3]


def test_a_message_stays_while_a_job_of_it_is_pending_and_its_body_is_counted() -> None:
    holdings = Holdings(body_cache=10)
    first = holdings.add(message(M1, holdings.keep_body(b"12345678")))
    assert holdings.add(message(M1, None)) is first  # one per id
    assert (holdings.body_bytes, holdings.body_room) == (8, 2)
    assert holdings.keep_body(b"abc") is None  # no room: read when sent
    second = holdings.add(message(M2, None))
    holdings.set_body(second, b"abcd")  # read for sending: held whatever the room
    assert (holdings.body_bytes, holdings.body_room) == (12, 0)
    holdings.job_added(M1)
    holdings.job_added(M1)
    holdings.job_done(M1)
    assert holdings.message(M1) is first
    holdings.job_done(M1)  # its last job
    assert holdings.message(M1) is None
    assert holdings.body_bytes == 4
    assert holdings.missing([M1, M2]) == [M1]
