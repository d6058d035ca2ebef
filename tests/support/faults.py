"""Fault scenarios and the exact-count assertion shared by the fault tests."""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable

import msgspec
import numpy as np

from reliabilityd.events import TrialEvent
from reliabilityd.store import Store
from tests.support.helpers import (
    Truth,
    make_events,
    payloads,
    publish,
    truth_of,
    wait_until,
)

SUITES = ("alpha", "beta")
# The suite of mqtt_flush's markers, apart from the counted ones.
MARKER_SUITE = "marker"


# Their hash tags land on all three nodes of a three-node cluster.
SUITES4 = ("alpha", "beta", "gamma", "delta")


async def counted(store: Store, truth: Truth) -> bool:
    for suite in SUITES:
        c = (await store.reads.read_state(suite)).counters
        want = (truth.trials(suite), truth.errors.get(suite, 0), truth.skips.get(suite, 0))
        got = (c.trials, c.errors, c.skips)
        assert all(g <= w for g, w in zip(got, want, strict=True)), f"counted twice: {got} > {want}"
        if got != want:
            return False
    return True


# make_config's dedup TTL: the default, twice mqtt.session_expiry.
DEDUP_TTL = 2 * 3600


async def missing_events(store: Store, events: list[TrialEvent]) -> list[int]:
    """Positions (in publish order) of first deliveries that left no dedup record."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for i, e in enumerate(events):
        if (e.suite, e.task, e.trial) in seen:
            continue
        seen.add((e.suite, e.task, e.trial))
        if not await store.ingest.is_recorded(e.suite, e.task, e.trial, dedup_ttl=DEDUP_TTL):
            out.append(i)
    return out


Flush = Callable[[], Awaitable[None]]


def mqtt_flush(port: int, topic: str, store: Store) -> Flush:
    """For ``assert_exact``: publish one event of a suite of its own after all the others,
    and wait until it is counted.

    The broker delivers a session's messages in order, redeliveries first,
    and the daemon commits in order: once the marker is counted, whatever
    the broker still held for the daemon before it has been committed too.
    Only for one consumer (a shared subscription splits the order).
    """
    marks = itertools.count()

    async def flush() -> None:
        trial = f"marker-{time.time_ns()}-{next(marks)}"
        marker = TrialEvent(MARKER_SUITE, "marker", trial, "pass")
        await publish(port, topic, [msgspec.json.encode(marker)], client_id="test-marker")

        async def marked() -> bool:
            return await store.ingest.is_recorded(
                MARKER_SUITE, "marker", trial, dedup_ttl=DEDUP_TTL
            )

        await wait_until(marked, 60)

    return flush


async def assert_exact(
    store: Store, truth: Truth, events: list[TrialEvent], *, flush: Flush | None = None
) -> None:
    """Everything arrives, and counts equal the truth (none ever above it).

    With ``flush`` (``mqtt_flush``), the counts are checked again once
    everything sent before the flush's marker has been handled, redeliveries
    included: nothing more arrives that could count twice. Without it the
    caller knows that nothing is left in flight (HTTP answers, stopped
    daemons).
    """
    try:
        await wait_until(lambda: counted(store, truth), 60)
    except TimeoutError:
        lost = await missing_events(store, events)
        raise AssertionError(
            f"{len(lost)} events never counted, at positions {lost[:20]}"
        ) from None
    if flush is not None:
        await flush()
    assert await counted(store, truth)
    for suite in SUITES:
        assert await store.reads.task_counts(suite) == truth.counts(suite)
        state = await store.reads.read_state(suite)
        assert state.hist == truth.hist(suite)
        assert state.counters.duplicates >= truth.duplicates.get(suite, 0)


def scenario(
    rng: np.random.Generator, count: int = 6000
) -> tuple[list[TrialEvent], Truth, list[bytes]]:
    events = make_events(rng, count=count, suites=SUITES, tasks=40)
    return events, truth_of(events), payloads(events, 1)
