"""The MQTT client's keep-alive on virtual time (``_mqtt._keepalive``).

A simulated ping loop: checks every quarter keep-alive, each up to ``lag``
late (a busy event loop); a broker that answers each PINGREQ after up to
``delay`` seconds, until it freezes (a half-open connection). The bounds
the module states hold for every schedule Hypothesis draws: an answering
broker is never taken for dead, and a frozen one is noticed within 1.25
keep-alives of its last byte, plus the lag of one check.
"""

from __future__ import annotations

import heapq

from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd._mqtt._keepalive import KeepAlive

EVERY = 60.0  # keep-alive seconds; every bound scales with it
TICK = EVERY / 4


def _run(lags: list[float], delays: list[float], freeze_at: float) -> tuple[float | None, float]:
    """(when the loop declared the connection dead or None, the last byte's time)."""
    keepalive = KeepAlive(EVERY, 0.0)
    last_in = 0.0  # the CONNACK
    answers: list[float] = []  # arrival times of PINGRESPs in flight
    now = 0.0
    pings = 0
    for lag in lags:
        now += TICK + lag
        while answers and answers[0] <= now:
            arrived = heapq.heappop(answers)
            if arrived < freeze_at:
                last_in = max(last_in, arrived)
        action = keepalive.check(now, last_in)
        if action == "dead":
            assert now - last_in > EVERY  # never before a whole keep-alive of silence
            return now, last_in
        if action == "ping":
            heapq.heappush(answers, now + delays[pings % len(delays)])
            pings += 1
    return None, last_in


lags = st.lists(st.floats(0, TICK / 4), min_size=40, max_size=80)
delays = st.lists(st.floats(0, TICK / 2), min_size=1, max_size=20)


@given(lags=lags, delays=delays)
@example(lags=[TICK / 4] * 40, delays=[TICK / 2])  # every check late, every answer slow
def test_a_broker_that_answers_is_never_taken_for_dead(
    lags: list[float], delays: list[float]
) -> None:
    dead, _ = _run(lags, delays, freeze_at=float("inf"))
    assert dead is None


@given(lags=lags, delays=delays, freeze=st.floats(0, 20 * EVERY))
@example(lags=[0.0] * 40, delays=[0.0], freeze=TICK * 2 + 1e-9)
def test_a_frozen_broker_is_noticed_within_one_and_a_quarter_keepalives(
    lags: list[float], delays: list[float], freeze: float
) -> None:
    dead, last_in = _run(lags, delays, freeze_at=freeze)
    horizon = sum(TICK + lag for lag in lags)
    if freeze + EVERY + TICK + max(lags) > horizon:
        return  # the simulated loop ends before the bound: nothing to judge
    assert dead is not None
    assert last_in <= freeze
    assert dead - last_in <= EVERY + TICK + max(lags)
    assert dead - freeze <= 1.25 * EVERY + max(lags)


def test_pings_go_out_every_half_keepalive() -> None:
    keepalive = KeepAlive(EVERY, 0.0)
    pinged = [t for t in (TICK * i for i in range(1, 17)) if keepalive.check(t, t) == "ping"]
    assert pinged == [TICK * i for i in range(2, 17, 2)]
