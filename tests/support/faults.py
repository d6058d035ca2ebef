"""Fault scenarios and the exact-count assertion shared by the fault tests."""

from __future__ import annotations

import asyncio

import numpy as np

from reliabilityd.events import TrialEvent
from reliabilityd.store import Store
from tests.support.helpers import (
    Truth,
    make_events,
    payloads,
    truth_of,
    wait_until,
)

SUITES = ("alpha", "beta")


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


async def assert_exact(store: Store, truth: Truth, events: list[TrialEvent]) -> None:
    """Everything arrives; after a quiet second nothing more arrives; counts equal the truth."""
    try:
        await wait_until(lambda: counted(store, truth), 60)
    except TimeoutError:
        lost = await missing_events(store, events)
        raise AssertionError(
            f"{len(lost)} events never counted, at positions {lost[:20]}"
        ) from None
    await asyncio.sleep(1.0)
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
