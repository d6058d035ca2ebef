"""The token form's throttle: a token bucket per client address, on a clock the test turns."""

from __future__ import annotations

from reliabilityd.daemon._peers import BURST, PER_SECOND, Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_client_gets_its_burst_then_one_try_per_refill() -> None:
    clock = Clock()
    throttle = Throttle(clock=clock)
    for _ in range(BURST):
        assert throttle.retry_after("198.51.100.7") == 0
        throttle.failed("198.51.100.7")
    wait = throttle.retry_after("198.51.100.7")
    assert wait == round(1 / PER_SECOND)
    clock.now += wait
    assert throttle.retry_after("198.51.100.7") == 0
    throttle.failed("198.51.100.7")
    assert throttle.retry_after("198.51.100.7") == wait
    # A quiet client gets its whole burst back, no more.
    clock.now += 3600
    for _ in range(BURST):
        throttle.failed("198.51.100.7")
    assert throttle.retry_after("198.51.100.7") > 0


def test_clients_are_counted_apart_and_ipv6_ones_by_their_64() -> None:
    throttle = Throttle(clock=Clock())
    for _ in range(BURST):
        throttle.failed("2001:db8:1:2::10")
    assert throttle.retry_after("2001:db8:1:2::ffff") > 0  # the same /64: one host
    assert throttle.retry_after("2001:db8:1:3::10") == 0
    assert throttle.retry_after("198.51.100.7") == 0
    for _ in range(BURST):
        throttle.failed("::ffff:198.51.100.9")  # IPv4 through a dual-stack socket
    assert throttle.retry_after("198.51.100.9") > 0


def test_the_clients_remembered_are_bounded_the_least_recent_forgotten_first() -> None:
    throttle = Throttle(clock=Clock(), most=3)
    for client in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        for _ in range(BURST):
            throttle.failed(client)
    assert throttle.retry_after("10.0.0.1") > 0  # seen again: now the most recent
    throttle.failed("10.0.0.4")
    assert throttle.retry_after("10.0.0.2") == 0  # the least recent was forgotten
    assert throttle.retry_after("10.0.0.1") > 0
