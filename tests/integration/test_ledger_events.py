"""Live events with ``ledger`` set: recorded in the import ledger as they are counted."""

from __future__ import annotations

import json
from pathlib import Path

from reliabilityd.events import TrialEvent, decode
from reliabilityd.importers._import import import_file
from reliabilityd.store import Store


async def expire_dedup(store: Store, suite: str) -> None:
    buckets = [k async for k in store.client.scan_iter(match=store.key(suite, "dedup:*"))]
    await store.client.delete(*buckets)


async def test_a_ledgered_trial_never_counts_twice(store: Store, tmp_path: Path) -> None:
    payload = json.dumps(
        [
            {"suite": "s", "task": "a", "trial": "r/1", "outcome": "pass", "ledger": True},
            {"suite": "s", "task": "a", "trial": "r/2", "outcome": "fail", "ledger": True},
            {"suite": "s", "task": "b", "trial": "r/1", "outcome": "pass"},
        ]
    ).encode()
    events, rejected = decode(payload)
    assert not rejected
    assert [e.ledger for e in events] == [True, True, False]
    (first,) = await store.ingest.apply({"s": events}, windows={}, dedup_ttl=60)
    assert (first.counted, first.duplicates) == (3, 0)
    await expire_dedup(store, "s")
    # A redelivery after the dedup records expired: the ledgered two are duplicates.
    (again,) = await store.ingest.apply({"s": events}, windows={}, dedup_ttl=60)
    assert (again.counted, again.duplicates) == (1, 2)
    # An import of the same trials later counts the ledgered ones not at all.
    await expire_dedup(store, "s")
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in json.loads(payload)[:2]))
    report = await import_file(store, path)
    assert (report.counted, report.already) == (0, 2)
    assert await store.reads.task_counts("s") == {"a": (2, 1), "b": (2, 2)}


async def test_order_is_kept_across_ledgered_and_plain_runs(store: Store) -> None:
    """A window keeps the last outcomes in commit order, whichever script applied them."""
    events = [
        TrialEvent("w", "a", str(i), "pass" if i % 3 else "fail", ledger=i % 2 == 0)
        for i in range(7)
    ]
    await store.ingest.apply({"w": events}, windows={"w": 4}, dedup_ttl=60)
    state = await store.reads.read_state("w", windows=True)
    assert state.windows == ["0110"]  # trials 3..6: fail, pass, pass, fail, oldest first
