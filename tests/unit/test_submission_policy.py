from mtad import submission
from mtad.spool import commit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_auth_throttle_blocks_after_max_failures_and_forgets_after_the_window() -> None:
    clock = Clock()
    throttle = submission.AuthThrottle(max_failures=3, window=60, now=clock)
    for _ in range(2):
        throttle.failed("192.0.2.1")
        clock.now += 1
    assert not throttle.blocked("192.0.2.1")
    throttle.failed("192.0.2.1")
    assert throttle.blocked("192.0.2.1")
    assert not throttle.blocked("192.0.2.2")
    clock.now += 58  # the first failure leaves the window
    assert not throttle.blocked("192.0.2.1")


def test_queue_ids_are_version_7_and_time_ordered() -> None:
    ids = [commit.new_queue_id(1_700_000_000 + i) for i in range(50)]
    assert all(i.version == 7 for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_long_line_detection_matches_a_split_into_lines() -> None:
    import random

    rng = random.Random(7)
    for _ in range(2000):
        lines = [b"x" * rng.choice([0, 1, 500, 997, 998, 999, 1000, 1500]) for _ in range(rng.randint(1, 6))]
        data = bytearray(b"\r\n" + b"\r\n".join(lines) + b"\r\n")
        longest = max(len(line) for line in lines)
        assert submission.has_long_line(data) is (longest > submission.MAX_LINE - 2), [len(x) for x in lines]
