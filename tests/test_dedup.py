"""Dedup records in buckets of Redis's clock, and across a rolling upgrade.

A trial's digest goes into the set of the current bucket (dedup_ttl seconds
wide), and a digest in the current or the previous bucket is a duplicate.
The earlier version's APPLY script (tests/data/apply-per-trial-records.lua,
verbatim) runs beside the current one on the same suite, as an old and a new
replica would during an upgrade: neither may count a trial the other did.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reliabilityd.events import TrialEvent
from reliabilityd.keys import digests
from reliabilityd.store import _OUTCOME_CODE, Store, connect
from tests.helpers import wait_until
from tests.servers import RedisServer

OLD_APPLY = (Path(__file__).parent / "data" / "apply-per-trial-records.lua").read_text()
SUITE = "s"


@pytest.fixture
async def store(redis_server: RedisServer, prefix: str) -> AsyncIterator[Store]:
    client = connect(redis_server.url)
    yield Store(client, prefix)
    await client.aclose()


def trials(names: range, outcome: str = "pass") -> list[TrialEvent]:
    return [TrialEvent(SUITE, f"task {i % 3}", f"run {i}", outcome) for i in names]  # type: ignore[arg-type]


async def old_apply(store: Store, events: list[TrialEvent], ttl: int) -> tuple[int, int]:
    """The earlier version's commit of `events`: (counted, duplicates)."""
    keys = [store.key(SUITE, name) for name in ("meta", "tasks", "hist", "lottery")]
    keys += [store.keys.seen(SUITE, e.task, e.trial) for e in events]
    args: list[str | int] = [ttl, 0, "1.0"]
    for e in events:
        args += (e.task, _OUTCOME_CODE[e.outcome])
    reply = await store.client.eval(OLD_APPLY, len(keys), *keys, *args)
    return int(reply[0]), int(reply[3])


async def new_apply(store: Store, events: list[TrialEvent], ttl: int) -> tuple[int, int]:
    (applied,) = await store.apply({SUITE: events}, windows={}, dedup_ttl=ttl)
    return applied.counted, applied.duplicates


async def per_trial_records(store: Store, events: list[TrialEvent]) -> int:
    return int(
        await store.client.exists(*(store.keys.seen(SUITE, e.task, e.trial) for e in events))
    )


async def test_a_new_suite_keeps_no_per_trial_records(store: Store) -> None:
    events = trials(range(20))
    assert await new_apply(store, events, 60) == (20, 0)
    assert await new_apply(store, events, 60) == (0, 20)
    assert await per_trial_records(store, events) == 0
    buckets = [k async for k in store.client.scan_iter(match=store.key(SUITE, "dedup:*"))]
    assert len(buckets) == 1
    assert await store.client.scard(buckets[0]) == 20
    # The bucket expires by itself, after at least the dedup TTL.
    assert 60 <= await store.client.ttl(buckets[0]) <= 120


async def test_a_record_in_the_previous_bucket_is_still_a_duplicate(store: Store) -> None:
    ttl = 2
    assert await new_apply(store, trials(range(1)), ttl) == (1, 0)
    (key,) = [k async for k in store.client.scan_iter(match=store.key(SUITE, "dedup:*"))]
    bucket = int(key.rsplit(b":", 1)[1])

    async def clock_bucket() -> int:
        seconds, _ = await store.client.time()
        return int(seconds) // ttl

    async def next_bucket() -> bool:
        return await clock_bucket() > bucket

    await wait_until(next_bucket, 5)
    assert await clock_bucket() == bucket + 1
    assert await new_apply(store, trials(range(2)), ttl) == (1, 1)


async def test_what_the_earlier_version_counted_is_not_counted_again(store: Store) -> None:
    assert await old_apply(store, trials(range(10)), 60) == (10, 0)
    # Redelivered to an upgraded replica, with new trials among them.
    assert await new_apply(store, trials(range(15)), 60) == (5, 10)
    assert await store.task_counts(SUITE) == {"task 0": (5, 5), "task 1": (5, 5), "task 2": (5, 5)}


async def test_while_an_earlier_version_runs_neither_counts_what_the_other_did(
    store: Store,
) -> None:
    assert await old_apply(store, trials(range(3)), 60) == (3, 0)
    # The new replica saw the old one's work: it keeps per-trial records too.
    assert await new_apply(store, trials(range(3, 9)), 60) == (6, 0)
    assert await per_trial_records(store, trials(range(3, 9))) == 6
    # So the old replica, given the same messages again, counts none of them.
    assert await old_apply(store, trials(range(9)), 60) == (0, 9)
    assert await new_apply(store, trials(range(12)), 60) == (3, 9)
    assert (await store.read_state(SUITE)).counters.trials == 12


async def test_per_trial_records_stop_a_ttl_after_the_earlier_version_was_last_seen(
    store: Store,
) -> None:
    ttl = 1
    await old_apply(store, trials(range(3)), ttl)
    await new_apply(store, trials(range(3, 6)), ttl)
    assert await per_trial_records(store, trials(range(3, 6))) == 3
    await asyncio.sleep(ttl + 1.1)  # past legacy_until (whole seconds of Redis's clock)
    await new_apply(store, trials(range(6, 9)), ttl)
    assert await per_trial_records(store, trials(range(6, 9))) == 0
    # An earlier version applying again turns them back on.
    await old_apply(store, trials(range(9, 10)), ttl)
    await new_apply(store, trials(range(10, 13)), ttl)
    assert await per_trial_records(store, trials(range(10, 13))) == 3


async def test_the_import_ledger_keeps_the_same_digests(store: Store) -> None:
    events = trials(range(4))
    await store.apply_import(SUITE, events, window=0, dedup_ttl=60)
    ledger: list[bytes] = await store.client.hkeys(store.imported_key(SUITE))  # type: ignore[assignment]
    want = sorted(d.hex() for d in digests((e.task, e.trial) for e in events))
    assert sorted(k.decode() for k in ledger) == want
