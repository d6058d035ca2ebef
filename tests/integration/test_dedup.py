"""Dedup records in buckets of the clock, the layout, and a rolling upgrade.

The earlier version's APPLY script (tests/data/apply-per-trial-records.lua,
verbatim) runs beside the current one on the same suite, as a replica of the
earlier version and an upgraded one would: neither may count a trial the
other did, in either order, until the layout moves to sets.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec
import pytest
from redis.exceptions import ResponseError

from reliabilityd.cli._main import main
from reliabilityd.events import TrialEvent
from reliabilityd.store import dedup
from reliabilityd.store._scripts import APPLY
from reliabilityd.store._store import _OUTCOME_CODE, Store, connect
from tests.support.helpers import wait_until
from tests.support.servers import RedisServer

OLD_APPLY = (Path(__file__).parent.parent / "data" / "apply-per-trial-records.lua").read_text()
SUITE = "s"
TTL = 60


def trials(names: range, outcome: str = "pass") -> list[TrialEvent]:
    return [TrialEvent(SUITE, f"task {i % 3}", f"run {i}", outcome) for i in names]  # type: ignore[arg-type]


async def old_apply(store: Store, events: list[TrialEvent], ttl: int = TTL) -> tuple[int, int]:
    """The earlier version's commit of ``events``: (counted, duplicates)."""
    keys = [store.key(SUITE, name) for name in ("meta", "tasks", "hist", "lottery")]
    keys += [store.keys.seen(SUITE, e.task, e.trial) for e in events]
    args: list[str | int] = [ttl, 0, "1.0"]
    for e in events:
        args += (e.task, _OUTCOME_CODE[e.outcome])
    reply = await store.client.eval(OLD_APPLY, len(keys), *keys, *args)
    # The earlier version also listed the suite, as every writer does.
    await store.client.sadd(store.suites_key, SUITE)
    return int(reply[0]), int(reply[3])


async def new_apply(
    store: Store, events: list[TrialEvent], ttl: int = TTL, now: float | None = None
) -> tuple[int, int]:
    (applied,) = await store.apply({SUITE: events}, windows={}, dedup_ttl=ttl, now=now)
    return applied.counted, applied.duplicates


async def per_trial_records(store: Store, events: list[TrialEvent]) -> int:
    return int(
        await store.client.exists(*(store.keys.seen(SUITE, e.task, e.trial) for e in events))
    )


async def buckets(store: Store) -> list[bytes]:
    return [k async for k in store.client.scan_iter(match=store.key(SUITE, "dedup:*"))]


async def test_a_new_deployment_keeps_sets_only(store: Store) -> None:
    events = trials(range(20))
    assert await new_apply(store, events) == (20, 0)
    assert await new_apply(store, events) == (0, 20)
    layout = await store.dedup_layout(TTL)
    assert (layout.layout, layout.width) == ("sets", TTL // 4)
    assert await per_trial_records(store, events) == 0
    (bucket,) = await buckets(store)
    assert await store.client.scard(bucket) == 20
    # The bucket expires by itself: the dedup TTL after its end, no sooner.
    assert TTL < await store.client.ttl(bucket) <= TTL + TTL // 4 + 1


async def test_a_duplicate_within_one_chunk_counts_once(store: Store) -> None:
    events = trials(range(5))
    assert await new_apply(store, events + events[:2]) == (5, 2)


async def test_a_record_in_an_earlier_bucket_is_still_a_duplicate(store: Store) -> None:
    ttl = 4  # buckets of 1 s
    assert await new_apply(store, trials(range(1)), ttl) == (1, 0)
    (first,) = await buckets(store)

    async def next_bucket() -> bool:
        return int(time.time()) > int(first.rsplit(b":", 1)[1])

    await wait_until(next_bucket, 5)
    assert await new_apply(store, trials(range(2)), ttl) == (1, 1)
    await asyncio.sleep(1.5)
    assert await new_apply(store, trials(range(3)), ttl) == (1, 2)
    assert len(await buckets(store)) >= 2


async def test_writers_with_other_ttls_and_clocks_see_each_others_records(store: Store) -> None:
    now = time.time()
    assert await new_apply(store, trials(range(10)), TTL, now=now) == (10, 0)
    width = (await store.dedup_layout(TTL)).width
    # A longer TTL, a shorter one, clocks apart by most of a bucket: the same
    # digests in the same numbered buckets.
    assert await new_apply(store, trials(range(12)), 7200, now=now + 0.45 * width) == (2, 10)
    assert await new_apply(store, trials(range(14)), 5, now=now - 0.45 * width) == (2, 12)
    assert (await store.read_state(SUITE)).counters.trials == 14
    # The longest TTL keeps the bucket: a shorter one written later never shortens it.
    lives = [int(await store.client.ttl(k)) for k in await buckets(store)]
    assert max(lives) > 7000


async def test_an_existing_deployment_starts_by_keeping_per_trial_records_too(
    store: Store,
) -> None:
    assert await old_apply(store, trials(range(10))) == (10, 0)
    # Redelivered to an upgraded replica, with new trials among them.
    assert await new_apply(store, trials(range(15))) == (5, 10)
    assert (await store.dedup_layout(TTL)).layout == "keys+sets"
    assert await per_trial_records(store, trials(range(10, 15))) == 5
    assert await store.task_counts(SUITE) == {"task 0": (5, 5), "task 1": (5, 5), "task 2": (5, 5)}


async def test_an_earlier_version_running_on_an_empty_deployment_keeps_per_trial_records(
    store: Store,
) -> None:
    await store.client.set(
        store.heartbeat_key("old-1"), msgspec.json.encode({"at": time.time()}), px=60_000
    )
    assert await new_apply(store, trials(range(3))) == (3, 0)
    assert (await store.dedup_layout(TTL)).layout == "keys+sets"
    assert await old_apply(store, trials(range(3))) == (0, 3)


async def test_while_an_earlier_version_runs_neither_counts_what_the_other_did(
    store: Store,
) -> None:
    await store.client.sadd(store.suites_key, "other")  # a deployment with history
    # The upgraded replica commits first: the earlier one must see it.
    assert await new_apply(store, trials(range(6))) == (6, 0)
    assert await old_apply(store, trials(range(9))) == (3, 6)
    assert await new_apply(store, trials(range(12))) == (3, 9)
    assert await old_apply(store, trials(range(12))) == (0, 12)
    assert (await store.read_state(SUITE)).counters.trials == 12


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_moving_to_sets_waits_for_the_earlier_version_and_honours_its_records(
    store: Store, redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ("--redis", redis_server.url, "--prefix", prefix)
    assert await old_apply(store, trials(range(4))) == (4, 0)
    assert await new_apply(store, trials(range(6))) == (2, 4)
    # An earlier version's heartbeat (no layout field) and an upgraded one's.
    beat = store.heartbeat_key
    await store.client.set(beat("old-1"), msgspec.json.encode({"at": time.time()}), px=60_000)
    await store.client.set(
        beat("new-1"), msgspec.json.encode({"at": time.time(), "dedup_layouts": 1}), px=60_000
    )
    code, _, err = await asyncio.to_thread(cli, capsys, "dedup-layout", "--sets", *where)
    assert code == 1
    assert "old-1" in err
    assert "new-1" not in err
    assert (await dedup.load(store.client, store.keys, TTL)).layout == "keys+sets"

    await store.client.delete(beat("old-1"))  # the last earlier replica stopped
    code, out, _ = await asyncio.to_thread(cli, capsys, "dedup-layout", "--sets", *where)
    assert code == 0, out
    assert "dedup layout: sets" in out
    assert "honoured until" in out
    store._dedup = None  # a writer re-reads the layout every few seconds
    # What the earlier version alone recorded is still a duplicate...
    assert await new_apply(store, trials(range(8))) == (2, 6)
    # ...and nothing new gets a per-trial record.
    assert await per_trial_records(store, trials(range(6, 8))) == 0

    # Back to per-trial records, for a rollback.
    code, out, _ = await asyncio.to_thread(cli, capsys, "dedup-layout", "--keys-and-sets", *where)
    assert code == 0
    assert "an earlier version may start once" in out
    store._dedup = None
    assert await new_apply(store, trials(range(10))) == (2, 8)
    assert await per_trial_records(store, trials(range(8, 10))) == 2


async def test_per_trial_records_stop_mattering_once_none_can_live(store: Store) -> None:
    ttl = 1
    assert await old_apply(store, trials(range(3)), ttl) == (3, 0)
    layout, blockers = await dedup.move(store.client, store.keys, dedup.SETS, ttl)
    assert (layout.layout, blockers) == ("sets", [])
    assert layout.code(time.time()) == "x"
    assert layout.keys_until < time.time() + 60
    assert layout.code(layout.keys_until + 0.01) == "s"


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


@pytest.mark.parametrize(
    "value",
    [
        b"\xff not json",
        b'{"layout": "sets-v2", "width": 15}',
        b'{"layout": "sets", "width": 0}',
        b'{"layout": "sets", "width": -15}',
        b'{"layout": "sets", "width": 100000000000000000}',
    ],
)
async def test_an_unreadable_layout_pauses_writes_and_is_never_guessed(
    store: Store, redis_server: RedisServer, prefix: str, value: bytes
) -> None:
    assert await new_apply(store, trials(range(3))) == (3, 0)
    await store.client.set(store.keys.dedup_layout, value)
    # A writer that read a good layout keeps it...
    store._dedup = None if store._dedup is None else (store._dedup[0], store._dedup[1], 0.0)
    assert await new_apply(store, trials(range(5))) == (2, 3)
    # ...one that never did refuses to write (ingest pauses with this reason).
    other = Store(connect(redis_server.url), prefix)
    try:
        with pytest.raises(dedup.DedupLayoutError, match="dedup-layout --keys-and-sets"):
            await new_apply(other, trials(range(8)))
        assert (await store.read_state(SUITE)).counters.trials == 5
        # The repair keeps the width the buckets carry.
        with pytest.raises(dedup.DedupLayoutError):
            await dedup.move(other.client, other.keys, dedup.SETS, TTL)
        layout, _ = await dedup.move(other.client, other.keys, dedup.KEYS_AND_SETS, TTL)
        assert (layout.layout, layout.width) == ("keys+sets", TTL // 4)
        assert await new_apply(other, trials(range(8))) == (3, 5)
    finally:
        await other.client.aclose()


async def test_a_lost_layout_comes_back_with_the_width_its_buckets_carry(
    redis_server: RedisServer, prefix: str
) -> None:
    first = Store(connect(redis_server.url), prefix)
    later = Store(connect(redis_server.url), prefix)
    try:
        assert await new_apply(first, trials(range(5)), TTL) == (5, 0)
        await first.client.delete(first.keys.dedup_layout)
        # A writer with another TTL would pick another width; the buckets name theirs.
        assert await new_apply(later, trials(range(6)), 7200) == (1, 5)
        layout = await later.dedup_layout(7200)
        assert (layout.layout, layout.width) == ("keys+sets", TTL // 4)
    finally:
        await first.client.aclose()
        await later.client.aclose()


async def test_arguments_out_of_shape_fail_before_anything_is_written(store: Store) -> None:
    layout = dedup.DedupLayout("sets", 15)
    events = trials(range(3))
    keys, args = store._apply_call(SUITE, events, TTL, 0, repr(time.time()), layout=layout)
    bad = list(args)
    bad[6] = 10**12  # a bucket life Redis would refuse once the records were in
    with pytest.raises(ResponseError, match="arguments out of shape"):
        await store.client.eval(APPLY, len(keys), *keys, *bad)
    k_layout = dedup.DedupLayout("keys+sets", 15)
    keys, args = store._apply_call(SUITE, events, TTL, 0, repr(time.time()), layout=k_layout)
    with pytest.raises(ResponseError, match="per-trial key"):
        await store.client.eval(APPLY, len(keys) - 1, *keys[:-1], *args)
    assert await store.client.exists(*keys) == 0  # no record, no count: a retry counts all
    assert await new_apply(store, events) == (3, 0)


async def test_per_trial_keys_are_honoured_as_long_as_any_can_live(
    redis_server: RedisServer, prefix: str, store: Store
) -> None:
    # The earlier version ran with a longer TTL than the config moving the layout.
    assert await old_apply(store, trials(range(5)), 14_400) == (5, 0)
    assert await new_apply(store, trials(range(6))) == (1, 5)
    layout, blockers = await dedup.move(store.client, store.keys, dedup.SETS, TTL)
    assert blockers == []
    assert layout.keys_until > time.time() + 14_000
    store._dedup = None
    # Long after the config's own TTL, the earlier version's keys still count.
    assert await new_apply(store, trials(range(7)), now=time.time() + 7300) == (1, 6)


async def test_the_import_ledger_keeps_the_earlier_digests(store: Store) -> None:
    events = trials(range(4))
    # A ledger written by the earlier version: the hex of each digest.
    hexes = [k.rsplit(":", 1)[1] for k in (store.keys.seen(SUITE, e.task, e.trial) for e in events)]
    await store.client.hset(store.imported_key(SUITE), mapping=dict.fromkeys(hexes[:2], "1"))
    result = await store.apply_import(SUITE, events + trials(range(4, 6)), window=0, dedup_ttl=TTL)
    assert (result.counted, result.already) == (4, 2)
    assert set(await store.client.hkeys(store.imported_key(SUITE))) == {
        k.rsplit(":", 1)[1].encode()
        for k in (store.keys.seen(SUITE, e.task, e.trial) for e in trials(range(6)))
    }
    # A live redelivery of an imported trial is a duplicate too.
    assert await new_apply(store, trials(range(5, 6))) == (0, 1)


async def test_a_long_ttl_gets_wide_buckets_and_a_much_longer_one_is_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    day = 2 * 86400  # a one-day session's dedup TTL
    assert await new_apply(store, trials(range(3)), day) == (3, 0)
    layout = await store.dedup_layout(day)
    assert layout.width == day // 4
    assert len(dedup.plan(layout.width, day, time.time()).buckets) <= 7
    assert "dedup_many_buckets" not in caplog.text
    store._dedup = None
    assert await new_apply(store, trials(range(4)), 20 * day) == (1, 3)
    assert "dedup_many_buckets" in caplog.text
