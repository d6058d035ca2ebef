"""The APPLY script against a pure-Python model of its semantics, one event at a time.

The script groups a chunk's events by task and writes each task once; the
model applies every event in order, as the definition reads: first write of
a (task, trial) wins, errors and skips count apart, a counted trial moves its
task's `n:c` (or its window of outcomes) and with it the histogram cell and
the lottery member. Tasks hash, histogram, lottery zset and meta counters
must agree after every batch.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd.events import TrialEvent
from reliabilityd.store import Store, connect
from reliabilityd.store import _ingest as store_module
from tests.support.servers import RedisServer

SUITE = "s"
NOW = 1234.5
_VALUE = re.compile(r"^(\d+):(\d+):?([01]*)$")


class Model:
    """One suite's stored state, updated per event exactly as the definition says."""

    def __init__(self) -> None:
        self.tasks: dict[str, str] = {}
        self.seen: set[tuple[str, str]] = set()
        self.meta: Counter[str] = Counter()

    def apply_chunk(self, events: Sequence[TrialEvent], window: int) -> tuple[int, ...]:
        """Apply one EVAL's events; returns (counted, errors, skips, duplicates, passes)."""
        counted = errors = skips = dups = passes = 0
        for e in events:
            if (e.task, e.trial) in self.seen:
                dups += 1
                continue
            self.seen.add((e.task, e.trial))
            if e.outcome == "error":
                errors += 1
                continue
            if e.outcome == "skip":
                skips += 1
                continue
            n, c, bits = 0, 0, ""
            if e.task in self.tasks:
                match = _VALUE.match(self.tasks[e.task])
                assert match is not None
                n, c, bits = int(match[1]), int(match[2]), match[3]
            hit = int(e.outcome == "pass")
            if window > 0:
                # Counted before the window was set: the window starts now.
                if len(bits) != n:
                    bits = ""
                bits = (bits + str(hit))[-window:]
                self.tasks[e.task] = f"{len(bits)}:{bits.count('1')}:{bits}"
            else:
                self.tasks[e.task] = f"{n + 1}:{c + hit}"
            counted += 1
            passes += hit
        if events:
            self.meta.update(trials=counted, errors=errors, skips=skips, duplicates=dups, version=1)
        return counted, errors, skips, dups, passes

    def hist(self) -> dict[str, int]:
        return dict(Counter(":".join(v.split(":")[:2]) for v in self.tasks.values()))

    def lottery(self) -> set[str]:
        out = set()
        for task, value in self.tasks.items():
            n, c = (int(x) for x in value.split(":")[:2])
            if 0 < c < n:
                out.add(f"{n:010d}:{c:010d}:{task}")
        return out


async def hash_of(store: Store, name: str) -> dict[str, str]:
    raw: Any = await store.client.hgetall(store.key(SUITE, name))
    return {k.decode(): v.decode() for k, v in raw.items()}


async def assert_agrees(store: Store, model: Model) -> None:
    assert await hash_of(store, "tasks") == model.tasks
    assert {k: int(v) for k, v in (await hash_of(store, "hist")).items()} == model.hist()
    lottery: Any = await store.client.zrange(store.key(SUITE, "lottery"), 0, -1, withscores=True)
    assert {m.decode() for m, _ in lottery} == model.lottery()
    assert all(score == 0 for _, score in lottery)
    meta = await hash_of(store, "meta")
    for name in ("trials", "errors", "skips", "duplicates", "version"):
        assert int(meta.get(name, "0")) == model.meta[name], name
    assert meta.get("last_trial_at") == (repr(NOW) if model.meta["trials"] else None)


async def apply_and_check(
    store: Store, model: Model, batch: Sequence[TrialEvent], window: int, chunk: int
) -> None:
    with mock.patch.object(store_module, "CHUNK", chunk):
        applied = await store.ingest.apply(
            {SUITE: batch}, windows={SUITE: window}, dedup_ttl=3600, now=NOW
        )
    want = [0, 0, 0, 0, 0]
    for start in range(0, len(batch), chunk):
        for i, x in enumerate(model.apply_chunk(batch[start : start + chunk], window)):
            want[i] += x
    if batch:
        (got,) = applied
        assert (got.counted, got.errors, got.skips, got.duplicates, got.passes) == tuple(want)
        assert got.version == model.meta["version"]
    await assert_agrees(store, model)


# Few tasks (so they repeat within a chunk), names the member format must keep
# apart, few trial ids (so duplicates come within and across chunks).
_events = st.lists(
    st.builds(
        TrialEvent,
        st.just(SUITE),
        st.sampled_from(["a", "b", "c", "d:1", "e f"]),
        st.integers(0, 12).map(str),
        st.sampled_from(["pass", "pass", "fail", "fail", "error", "skip"]),
    ),
    max_size=40,
)
_batches = st.lists(st.tuples(_events, st.sampled_from([0, 0, 1, 2, 3, 5])), max_size=5)


@given(batches=_batches, chunk=st.sampled_from([1, 2, 3, 7, 2000]))
async def test_apply_agrees_with_the_per_event_model(
    redis_server: RedisServer, batches: list[tuple[list[TrialEvent], int]], chunk: int
) -> None:
    client = connect(redis_server.url)
    store = Store(client, f"t{uuid.uuid4().hex[:10]}")
    model = Model()
    try:
        for batch, window in batches:
            await apply_and_check(store, model, batch, window, chunk)
    finally:
        await client.aclose()


@pytest.mark.parametrize("window", [0, 4])
async def test_a_chunk_wider_than_the_script_slices(
    redis_server: RedisServer, prefix: str, window: int
) -> None:
    """3,000 distinct tasks in one chunk, each seen twice: HMGET, HSET and ZADD go in slices."""
    client = connect(redis_server.url)
    store = Store(client, prefix)
    model = Model()
    tasks = [f"task {i}" for i in range(3000)]
    first = [TrialEvent(SUITE, t, "1", "pass" if i % 3 else "fail") for i, t in enumerate(tasks)]
    second = [TrialEvent(SUITE, t, "2", "fail" if i % 2 else "pass") for i, t in enumerate(tasks)]
    try:
        await apply_and_check(store, model, first + second, window, 6000)
        third = [
            TrialEvent(SUITE, t, "3", "pass" if i % 5 else "fail") for i, t in enumerate(tasks)
        ]
        await apply_and_check(store, model, third[::-1] + first, window, 6000)
        assert len(model.lottery()) > 1000
    finally:
        await client.aclose()
