"""The budget of HTTP body bytes in flight (daemon._http_bodies.Bodies), on a clock of its own."""

from __future__ import annotations

from reliabilityd.daemon._http_bodies import Bodies
from reliabilityd.daemon._http_server import SLOW_AFTER


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bytes_are_held_until_released_and_never_past_the_limit() -> None:
    clock = Clock()
    bodies = Bodies(1000, clock)
    closed: list[str] = []
    a = bodies.hold(lambda: closed.append("a"))
    assert bodies.take(a, 600)
    bodies.read_done(a)  # in whole: it keeps its bytes and may not be closed for room
    b = bodies.hold(lambda: closed.append("b"))
    clock.now += 10 * SLOW_AFTER
    assert not bodies.take(b, 500)  # only a, which is being committed, holds the rest
    assert bodies.used == 600
    assert bodies.take(b, 400)
    assert bodies.used == 1000
    bodies.release(a)
    assert bodies.used == 400
    bodies.release(b)
    assert bodies.used == 0
    assert closed == []


def test_a_body_that_finds_no_room_closes_the_oldest_slow_reads_first() -> None:
    clock = Clock()
    bodies = Bodies(1000, clock)
    closed: list[str] = []
    old = bodies.hold(lambda: closed.append("old"))
    assert bodies.take(old, 400)
    clock.now += 0.1
    older_than_newer = bodies.hold(lambda: closed.append("second"))
    assert bodies.take(older_than_newer, 400)
    clock.now += SLOW_AFTER  # both are slow now: the first one by a little more
    new = bodies.hold(lambda: closed.append("new"))
    assert bodies.take(new, 300)
    assert closed == ["old"]
    assert bodies.used == 700
    # The closed one holds nothing, can take nothing more, and releasing it is a no-op.
    assert not bodies.take(old, 1)
    bodies.release(old)
    assert bodies.used == 700


def test_reads_younger_than_slow_after_are_never_closed_for_room() -> None:
    clock = Clock()
    bodies = Bodies(1000, clock)
    closed: list[str] = []
    young = bodies.hold(lambda: closed.append("young"))
    assert bodies.take(young, 900)
    clock.now += SLOW_AFTER / 2
    late = bodies.hold(lambda: closed.append("late"))
    assert not bodies.take(late, 200)  # a 503: the burst is not slow
    assert closed == []
    assert bodies.used == 900
