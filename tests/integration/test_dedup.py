"""Dedup records in buckets of the clock: one width per deployment, every writer's TTL seen.

Writers with other dedup TTLs and skewed clocks see each other's records; a
bucket width that cannot be read is never guessed; arguments are checked
before anything is written.
"""

from __future__ import annotations

import time

import pytest
from redis.exceptions import ResponseError

from reliabilityd.events import TrialEvent
from reliabilityd.store import Store, StoreCorrupt, connect, dedup
from reliabilityd.store._scripts import APPLY
from reliabilityd.store.keys import digests
from tests.support.servers import RedisServer

SUITE = "s"
TTL = 60


def trials(names: range, outcome: str = "pass") -> list[TrialEvent]:
    return [TrialEvent(SUITE, f"task {i % 3}", f"run {i}", outcome) for i in names]  # type: ignore[arg-type]


async def new_apply(
    store: Store, events: list[TrialEvent], ttl: int = TTL, now: float | None = None
) -> tuple[int, int]:
    (applied,) = await store.ingest.apply({SUITE: events}, windows={}, dedup_ttl=ttl, now=now)
    return applied.counted, applied.duplicates


async def buckets(store: Store) -> list[bytes]:
    return [k async for k in store.client.scan_iter(match=store.key(SUITE, "dedup:*"))]


async def test_a_chunk_records_its_trials_in_one_bucket_set(store: Store) -> None:
    events = trials(range(20))
    assert await new_apply(store, events) == (20, 0)
    assert await new_apply(store, events) == (0, 20)
    assert await store.ingest.dedup_width(TTL) == TTL // 4
    (bucket,) = await buckets(store)
    assert await store.client.scard(bucket) == 20
    # The bucket expires by itself: the dedup TTL after its end, no sooner.
    assert TTL < await store.client.ttl(bucket) <= TTL + TTL // 4 + 1


async def test_a_duplicate_within_one_chunk_counts_once(store: Store) -> None:
    events = trials(range(5))
    assert await new_apply(store, events + events[:2]) == (5, 2)


async def test_a_record_in_an_earlier_bucket_is_still_a_duplicate(store: Store) -> None:
    ttl = 40  # buckets of 10 s
    now = time.time()
    assert await new_apply(store, trials(range(1)), ttl, now=now) == (1, 0)
    # The writer's clock a bucket on, then two (given, not slept: a busy machine
    # cannot let a record expire in between).
    assert await new_apply(store, trials(range(2)), ttl, now=now + 12) == (1, 1)
    assert await new_apply(store, trials(range(3)), ttl, now=now + 27) == (1, 2)
    assert len(await buckets(store)) == 3


async def test_writers_with_other_ttls_and_clocks_see_each_others_records(store: Store) -> None:
    now = time.time()
    assert await new_apply(store, trials(range(10)), TTL, now=now) == (10, 0)
    width = await store.ingest.dedup_width(TTL)
    # A longer TTL, a shorter one, clocks apart by most of a bucket: the same
    # digests in the same numbered buckets.
    assert await new_apply(store, trials(range(12)), 7200, now=now + 0.45 * width) == (2, 10)
    assert await new_apply(store, trials(range(14)), 5, now=now - 0.45 * width) == (2, 12)
    assert (await store.reads.read_state(SUITE)).counters.trials == 14
    # The longest TTL keeps the bucket: a shorter one written later never shortens it.
    lives = [int(await store.client.ttl(k)) for k in await buckets(store)]
    assert max(lives) > 7000


async def test_a_reader_with_a_short_ttl_sees_what_a_long_ttl_writer_recorded(
    redis_server: RedisServer, prefix: str
) -> None:
    first, long_ttl, short_ttl = (Store(connect(redis_server.url), prefix) for _ in range(3))
    try:
        assert await new_apply(first, trials(range(100, 101)), TTL) == (1, 0)  # buckets of 15 s
        now = time.time()
        # Written 300 s ago by a writer whose records live 7,200 s...
        assert await new_apply(long_ttl, trials(range(5)), 7200, now=now - 300) == (5, 0)
        # ...and redelivered now to one whose own TTL is 60 s.
        assert await new_apply(short_ttl, trials(range(6)), TTL, now=now) == (1, 5)
    finally:
        for store in (first, long_ttl, short_ttl):
            await store.client.aclose()


@pytest.mark.parametrize("value", [b"\xff not a number", b"15.5", b"0", b"-15", b"10" * 9])
async def test_an_unreadable_width_pauses_writes_and_is_never_guessed(
    store: Store, redis_server: RedisServer, prefix: str, value: bytes
) -> None:
    assert await new_apply(store, trials(range(3))) == (3, 0)
    await store.client.set(store.keys.dedup_width, value)
    # A writer that read a good width keeps it...
    store.ingest._dedup = (
        None
        if store.ingest._dedup is None
        else (store.ingest._dedup[0], store.ingest._dedup[1], 0.0)
    )
    assert await new_apply(store, trials(range(5))) == (2, 3)
    # ...one that never did refuses to write (ingest pauses with this reason).
    other = Store(connect(redis_server.url), prefix)
    try:
        with pytest.raises(StoreCorrupt, match="dedup-width"):
            await new_apply(other, trials(range(8)))
        assert (await store.reads.read_state(SUITE)).counters.trials == 5
        # Without the width, the next writer takes the one its buckets carry.
        await store.client.delete(store.keys.dedup_width)
        assert await new_apply(other, trials(range(8))) == (3, 5)
        assert await other.ingest.dedup_width(TTL) == TTL // 4
    finally:
        await other.client.aclose()


async def test_a_lost_width_comes_back_as_the_one_its_buckets_carry(
    redis_server: RedisServer, prefix: str
) -> None:
    first = Store(connect(redis_server.url), prefix)
    later = Store(connect(redis_server.url), prefix)
    try:
        assert await new_apply(first, trials(range(5)), TTL) == (5, 0)
        await first.client.delete(first.keys.dedup_width)
        # A writer with another TTL would pick another width; the buckets name theirs.
        assert await new_apply(later, trials(range(6)), 7200) == (1, 5)
        assert await later.ingest.dedup_width(7200) == TTL // 4
    finally:
        await first.client.aclose()
        await later.client.aclose()


async def test_arguments_out_of_shape_fail_before_anything_is_written(store: Store) -> None:
    events = trials(range(3))
    keys, args = store.ingest.apply_call(SUITE, events, TTL, 0, repr(time.time()), width=15)
    bad = list(args)
    bad[4] = 10**12  # a bucket life Redis would refuse once the records were in
    with pytest.raises(ResponseError, match="arguments out of shape"):
        await store.client.eval(APPLY, len(keys), *keys, *bad)
    with pytest.raises(ResponseError, match="arguments out of shape"):
        await store.client.eval(APPLY, len(keys) - 1, *keys[:-1], *args)  # a bucket key short
    assert await store.client.exists(*keys) == 0  # no record, no count: a retry counts all
    assert await new_apply(store, events) == (3, 0)


def hexes(events: list[TrialEvent]) -> list[str]:
    return [d.hex() for d in digests([(e.task, e.trial) for e in events])]


async def test_the_import_ledger_names_trials_by_the_hex_of_their_digests(store: Store) -> None:
    events = trials(range(4))
    await store.client.hset(
        store.keys.imported(SUITE), mapping=dict.fromkeys(hexes(events)[:2], "1")
    )
    result = await store.imports.apply_import(
        SUITE, events + trials(range(4, 6)), window=0, dedup_ttl=TTL
    )
    assert (result.counted, result.already) == (4, 2)
    assert set(await store.client.hkeys(store.keys.imported(SUITE))) == {
        h.encode() for h in hexes(trials(range(6)))
    }
    # A live redelivery of an imported trial is a duplicate too.
    assert await new_apply(store, trials(range(5, 6))) == (0, 1)


async def test_a_long_ttl_gets_wide_buckets_and_a_much_longer_one_is_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    day = 2 * 86400  # a one-day session's dedup TTL
    assert await new_apply(store, trials(range(3)), day) == (3, 0)
    width = await store.ingest.dedup_width(day)
    assert width == day // 4
    assert len(dedup.plan(width, day, time.time()).buckets) <= 7
    assert "dedup_many_buckets" not in caplog.text
    store.ingest._dedup = None
    assert await new_apply(store, trials(range(4)), 20 * day) == (1, 3)
    assert "dedup_many_buckets" in caplog.text
