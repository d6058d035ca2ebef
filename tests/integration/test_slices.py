"""Slices and the suite cap against a real redis-server (and mosquitto for the daemon).

Counts per slice against a brute-force tally, redelivery, the most slices
and its overflow, the label keys seen, every key inside the suite's hash
slot, slice snapshots and status rows, sliced compare through the Client,
the CLI and HTTP, and the suite cap (atomic under concurrent new suites).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from reliabilityd import Client, Comparison, Side, compare
from reliabilityd.cli import status
from reliabilityd.cli._main import main
from reliabilityd.client import AsyncClient
from reliabilityd.config import HttpConfig, StatsConfig, SuiteOverride
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.stats.estimators import METRICS, metric_cells
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.slices import slice_id
from reliabilityd.store import Series, Slicing, Store
from reliabilityd.testing import TestingSource
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import publish, wait_until
from tests.support.http import get, post, scrape, serving
from tests.support.paired import aligned, brute_force_paired, cdf_level
from tests.support.servers import Mosquitto, RedisServer, free_port

SUITE = "sliced-bot"
BY = ("model", "agent_version")
Tally = dict[str, dict[str, tuple[int, int]]]


def labelled_events(
    rng: np.random.Generator, count: int, *, suite: str = SUITE, tasks: int = 25
) -> list[TrialEvent]:
    """Events over 3 models x 2 versions; one in ten without agent_version, some with region."""
    out = []
    for i in range(count):
        labels: dict[str, Any] = {"model": str(rng.choice(["m-a", "m-b", "m c/x"]))}
        if rng.random() > 0.1:
            labels["agent_version"] = float(rng.choice([1.4, 1.5]))
        if rng.random() < 0.3:
            labels["region"] = "eu"
        outcome = str(rng.choice(["pass", "pass", "fail", "error", "skip"]))
        task = f"task {int(rng.integers(0, tasks)):02d}"
        out.append(TrialEvent(suite, task, f"run-{i}", outcome, labels=labels))  # type: ignore[arg-type]
    return out


def tally(events: list[TrialEvent]) -> tuple[Tally, Counter[str]]:
    """Per slice id, each task's (n, c); and the errors + skips per slice."""
    per: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    other: Counter[str] = Counter()
    for e in events:
        sid = slice_id(BY, e.labels)
        if e.outcome in ("error", "skip"):
            other[sid] += 1
            per[sid]
            continue
        cell = per[sid][e.task]
        cell[0] += 1
        cell[1] += e.outcome == "pass"
    return {s: {t: (n, c) for t, (n, c) in tasks.items()} for s, tasks in per.items()}, other


async def apply(store: Store, events: list[TrialEvent], most: int = 50) -> Any:
    return await store.ingest.apply(
        {SUITE: events},
        windows={},
        dedup_ttl=3600,
        slicing={SUITE: Slicing(BY, most)},
    )


async def test_slices_are_counted_exactly_and_redelivery_counts_nothing(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    events = labelled_events(rng, 3000)
    truth, other = tally(events)
    async with store_for(make_config(redis_url=redis_server.url, mqtt_url="", prefix=prefix)) as s:
        # Chunks of several sizes, in order.
        for start in range(0, len(events), 700):
            await apply(s, events[start : start + 700])
        assert await s.reads.slices(SUITE) == sorted(truth)
        assert "model=m-a,agent_version=" in truth  # no label: the empty value
        assert "model=m%20c%2Fx,agent_version=1.5" in truth  # escaped
        whole: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for sid, counts in truth.items():
            side = Side(
                SUITE,
                {"model": _value(sid, "model"), "agent_version": _value(sid, "agent_version")},
            )
            assert await s.reads.task_counts(side) == counts
            state = await s.reads.read_state(SUITE, slice=sid)
            assert state.hist == Histogram.from_pairs(list(counts.values()))
            assert state.counters.trials == sum(n for n, _ in counts.values())
            assert state.counters.errors + state.counters.skips == other[sid]
            for task, (n, c) in counts.items():
                whole[task][0] += n
                whole[task][1] += c
        # The whole counts every event; the slices partition it.
        assert await s.reads.task_counts(SUITE) == {t: (n, c) for t, (n, c) in whole.items()}
        before = {sid: await s.reads.read_state(SUITE, slice=sid) for sid in truth}
        # Redelivered in other chunks: duplicates in the whole and in each slice, nothing counted.
        applied = await apply(s, events[::-1])
        assert (applied[0].counted, applied[0].duplicates) == (0, len(events))
        for sid in truth:
            again = await s.reads.read_state(SUITE, slice=sid)
            assert again.hist == before[sid].hist
            assert again.counters.trials == before[sid].counters.trials
        dups = 0
        for sid in truth:
            dups += (await s.reads.read_state(SUITE, slice=sid)).counters.duplicates
        assert dups == len(events)
        assert await s.reads.labels_seen(SUITE) == ["agent_version", "model", "region"]


def _value(sid: str, key: str) -> str:
    from reliabilityd.stats.slices import parse_id

    return parse_id(sid)[key]


async def test_past_the_most_slices_events_count_in_the_whole_and_the_overflow(
    redis_server: RedisServer, prefix: str
) -> None:
    models = ["a", "b", "c", "d"]
    events = [
        TrialEvent(SUITE, f"t{i % 5}", f"r{i}", "pass" if i % 3 else "fail", labels={"model": m})
        for i, m in enumerate(models * 10)
    ]
    async with store_for(make_config(redis_url=redis_server.url, mqtt_url="", prefix=prefix)) as s:
        applied = await apply(s, events[:8], most=2)  # a, b come first and take the places
        applied += await apply(s, events[8:], most=2)
        assert sum(a.overflow for a in applied) == 20
        assert await s.reads.slices(SUITE) == ["model=a,agent_version=", "model=b,agent_version="]
        state = await s.reads.read_state(SUITE)
        assert state.counters.trials == 40
        assert state.counters.slice_overflow == 20
        for sid in await s.reads.slices(SUITE):
            assert (await s.reads.read_state(SUITE, slice=sid)).counters.trials == 10
        # No slice of c or d was made, and none of their events went to a or b.
        keys = [k.decode() async for k in s.client.scan_iter(match=f"{prefix}:*model=c*")]
        assert keys == []


async def test_label_keys_seen_are_bounded(redis_server: RedisServer, prefix: str) -> None:
    events = [
        TrialEvent(SUITE, "t", f"r{i}", "pass", labels={f"key{i:02d}": "x"}) for i in range(40)
    ]
    async with store_for(make_config(redis_url=redis_server.url, mqtt_url="", prefix=prefix)) as s:
        await s.ingest.apply({SUITE: events[:20]}, windows={}, dedup_ttl=3600)
        await s.ingest.apply({SUITE: events[20:]}, windows={}, dedup_ttl=3600)
        seen = await s.reads.labels_seen(SUITE)
        assert seen == [f"key{i:02d}" for i in range(32)]
        assert await s.reads.slices(SUITE) == []  # not sliced: nothing but the whole


def hash_tag(key: str) -> str:
    start = key.index("{")
    return key[start + 1 : key.index("}", start + 1)]


async def test_every_slice_key_sits_in_the_suites_hash_slot(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, rng: np.random.Generator
) -> None:
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url=mosquitto.url,
        prefix=prefix,
        stats=StatsConfig(k=[1, 3], ci_interval=0.3, n_boot=200, slice_by=list(BY)),
        alerts=[Rule(name="low", k=3, below=0.99, slices=True)],
    )
    # Few tasks, so most slices' tasks have the rule's k trials and it judges them.
    events = labelled_events(rng, 900, tasks=4)
    truth, _ = tally(events)
    async with running(cfg), store_for(cfg) as s:
        await publish(mosquitto.port, f"{prefix}/trials/x", [msgspec.json.encode(events)])

        async def every_slice_has_its_snapshot() -> bool:
            got = await s.snapshots.documents([Series(SUITE, sid) for sid in truth])
            states = [k async for k in s.client.scan_iter(match=f"{prefix}:*:alert:low[[]*")]
            # The rule's trigger (the default, rate) keeps its statistics per slice.
            rate = [
                k async for k in s.client.scan_iter(match=f"{prefix}:*:slice:*:trigger:low[[]*")
            ]
            # A slice whose tasks all have k trials gets a state (strict UNKNOWN gives none).
            return all(doc is not None for doc in got) and len(states) > 0 and len(rate) > 0

        await wait_until(every_slice_has_its_snapshot, 60)
        keys = [k.decode() async for k in s.client.scan_iter(match=f"{prefix}:*")]
    shared = (f"{prefix}:{{/ci}}", f"{prefix}:{{/suites}}", f"{prefix}:{{/rows}}")
    tagged = [k for k in keys if "{" in k and not k.startswith(shared)]
    assert any(":slice:" in k and k.endswith(":snapshot") for k in tagged)
    assert any(":alert:low[" in k for k in tagged)
    assert any(":slice:" in k and ":trigger:low[" in k for k in tagged)
    assert {hash_tag(k) for k in tagged} == {SUITE}


async def test_daemon_writes_slice_snapshots_and_status_shows_rows_overflow_and_labels(
    redis_server: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    rng: np.random.Generator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url=mosquitto.url,
        prefix=prefix,
        stats=StatsConfig(k=[1, 3], ci_interval=0.3, n_boot=200),
        suites=[SuiteOverride(match="sliced-*", slice_by=list(BY), max_slices=4)],
    )
    events = labelled_events(rng, 1500)
    truth, _ = tally(events)
    kept = sorted(
        truth, key=lambda sid: min(i for i, e in enumerate(events) if slice_id(BY, e.labels) == sid)
    )[:4]
    async with running(cfg), store_for(cfg) as s:
        await publish(mosquitto.port, f"{prefix}/trials/x", [msgspec.json.encode(events)])

        async def slices_current() -> bool:
            for sid in kept:
                state = await s.reads.read_state(SUITE, slice=sid)
                snap = await s.snapshots.fields(SUITE, slice=sid)
                if snap.get("version") != str(state.counters.version) or not state.counters.version:
                    return False
            whole = await s.reads.read_state(SUITE)
            snap = await s.snapshots.fields(SUITE)
            return snap.get("version") == str(whole.counters.version)

        await wait_until(slices_current, 60)
        assert sorted(await s.reads.slices(SUITE)) == sorted(kept)
        overflow = sum(
            len([e for e in events if slice_id(BY, e.labels) == sid])
            for sid in truth
            if sid not in kept
        )
        with Client(redis_server.url, prefix=prefix) as rel:
            assert rel.slices(SUITE) == sorted(kept)
            whole = rel.snapshot(SUITE)
            assert whole is not None
            assert (whole.slices, whole.slice_overflow) == (4, overflow)
            for sid in kept:
                snap = rel.snapshot(SUITE, slice=sid)
                assert snap is not None
                assert snap.slice == sid
                assert snap.suite == SUITE
                assert snap.tasks == len(truth[sid])
                assert snap.trials == sum(n for n, _ in truth[sid].values())
        lines: list[str] = []
        async with AsyncClient(redis_server.url, prefix=prefix) as client:
            code = await status.status(
                client, SUITE, ks=[], rules=[], as_json=False, out=lines.append
            )
        assert code == 0
        out = "\n".join(lines)
        for sid in kept:
            from reliabilityd.stats.slices import shown

            assert f"  [{shown(sid)}]" in out
        assert f"{SUITE}: {overflow} events counted in the suite but in no slice" in out
        assert f"{SUITE}: labels seen, not sliced: region" in out
        scraped = await _scrape_metrics(cfg, s)
    assert scraped[("reliabilityd_slice_overflow_events", (("suite", SUITE),))] == overflow
    for sid in kept:
        key = ("reliabilityd_slice_tasks", (("slice", sid), ("suite", SUITE)))
        assert scraped[key] == len(truth[sid])


async def _scrape_metrics(cfg: Any, store: Store) -> Any:
    http = msgspec.structs.replace(
        cfg,
        http=HttpConfig(port=free_port()),
        mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False),
    )
    async with serving(http) as (_, base):
        return await scrape(base)


# --- sliced compare ---------------------------------------------------------


def versioned_events(rng: np.random.Generator, tasks: int = 40) -> tuple[list[TrialEvent], Tally]:
    """Version 1.4 and 1.5 of one suite on the same tasks, two models each, n uneven."""
    events: list[TrialEvent] = []
    sums: Tally = {"1.4": {}, "1.5": {}}
    p = rng.beta(2.0, 0.7, tasks)
    for version, shift in (("1.4", 0.0), ("1.5", -0.15)):
        for t in range(tasks):
            n = int(rng.integers(5, 16))
            q = min(max(p[t] + shift, 0.0), 1.0)
            passes = 0
            for r in range(n):
                ok = bool(rng.random() < q)
                passes += ok
                model = "m-a" if r % 2 else "m-b"
                events.append(
                    TrialEvent(
                        SUITE,
                        f"task {t:02d}",
                        f"{version}-{r}",
                        "pass" if ok else "fail",
                        labels={"model": model, "agent_version": version},
                    )
                )
            sums[version][f"task {t:02d}"] = (n, passes)
    return events, sums


@pytest.fixture
def versions(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> tuple[Tally, list[str]]:
    events, sums = versioned_events(rng)

    async def go() -> None:
        cfg = make_config(redis_url=redis_server.url, mqtt_url="", prefix=prefix)
        async with store_for(cfg) as s:
            await apply(s, events)

    asyncio.run(go())
    return sums, ["--redis", redis_server.url, "--prefix", prefix]


def test_client_compares_two_slices_as_the_pure_comparison_and_a_brute_force_resampler(
    redis_server: RedisServer,
    prefix: str,
    versions: tuple[Tally, list[str]],
    rng: np.random.Generator,
) -> None:
    sums, _ = versions
    old, new = Side(SUITE, {"agent_version": "1.4"}), Side.parse(SUITE, "agent_version=1.5")
    with Client(redis_server.url, prefix=prefix) as rel:
        got = rel.compare(old, new, 3, n_boot=2000, seed=11)
        with pytest.raises(ValueError, match="not sliced by region"):
            rel.compare(old, Side(SUITE, {"region": "eu"}), 3)
    assert got == compare(
        sums["1.4"], sums["1.5"], 3, n_boot=2000, seed=11, names=(old.label, new.label)
    )
    assert got.baseline == f"{SUITE}[agent_version=1.4]"
    assert got.shared == 40
    nb, cb, nc, cc = aligned(sums["1.4"], sums["1.5"])
    for metric in METRICS:
        diff = got.difference(metric)
        assert diff.ci is not None
        vb, vc = metric_cells(metric, nb, cb, 3), metric_cells(metric, nc, cc, 3)
        low, high = brute_force_paired(vb, vc, "gaffke", 40_000, rng)
        # Each bound at its level of the brute force within five combined MC sds.
        bound = 5.0 * np.sqrt(0.025 * 0.975 * (1 / 2000 + 1 / 40_000))
        assert abs(cdf_level(low, diff.ci[0]) - 0.025) < bound
        assert abs(cdf_level(high, diff.ci[1]) - 0.975) < bound


def test_cli_compare_and_gate_take_label_filters(
    capsys: pytest.CaptureFixture[str], versions: tuple[Tally, list[str]]
) -> None:
    sums, where = versions
    code = main(
        [
            "compare",
            SUITE,
            "--baseline",
            "agent_version=1.4",
            "--candidate",
            "agent_version=1.5",
            "--k",
            "3",
            "--json",
            *where,
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    doc = msgspec.json.decode(out.splitlines()[-1], type=Comparison)
    assert doc == compare(sums["1.4"], sums["1.5"], 3, n_boot=2000, names=doc_names())
    # One suite needs both filters; a label the suite is not sliced by is a usage error.
    assert main(["compare", SUITE, "--baseline", "agent_version=1.4", *where]) == 2
    assert (
        main(["compare", SUITE, "--baseline", "region=eu", "--candidate", "region=us", *where]) == 2
    )
    capsys.readouterr()
    code = main(
        [
            "gate",
            SUITE,
            "--slice",
            "agent_version=1.5",
            "--k",
            "1",
            "--at-least",
            "0.0",
            "--json",
            *where,
        ]
    )
    gate = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (code, gate["verdict"], gate["labels"]) == (0, "pass", {"agent_version": "1.5"})
    # pass@1 of the slices is their pooled per-task mean, c / n averaged over the tasks.
    expected = np.mean([c / n for n, c in sums["1.5"].values()])
    assert gate["estimate"]["tasks"] == 40
    assert gate["estimate"]["value"] == pytest.approx(expected, abs=1e-12)
    code = main(
        [
            "gate",
            SUITE,
            "--slice",
            "agent_version=1.5",
            "--compare-slice",
            "agent_version=1.4",
            "--k",
            "3",
            "--margin",
            "1",
            "--json",
            *where,
        ]
    )
    gate = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (code, gate["verdict"], gate["baseline_labels"]) == (0, "pass", {"agent_version": "1.4"})


def doc_names() -> tuple[str, str]:
    return f"{SUITE}[agent_version=1.4]", f"{SUITE}[agent_version=1.5]"


async def test_http_compare_answers_what_compare_json_prints(
    redis_server: RedisServer,
    prefix: str,
    rng: np.random.Generator,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    events, _ = versioned_events(rng)
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        ks=[1, 3],
        http=HttpConfig(port=free_port()),
    )
    cfg = msgspec.structs.replace(
        cfg,
        mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False),
        stats=msgspec.structs.replace(cfg.stats, n_boot=2000),
    )
    async with store_for(cfg) as s:
        await apply(s, events)
    async with serving(cfg) as (_, base):
        query = (
            f"/v1/compare?suite={SUITE}&baseline=agent_version%3D1.4"
            "&candidate=agent_version%3D1.5&k=3"
        )
        status, body = await get(base, query)
        assert status == 200
        status, on_student = await get(base, query + "&interval=student")
        assert status == 200
        assert (await get(base, query + "&interval=t"))[0] == 400
        assert (await get(base, "/v1/compare?suite=nope&baseline=a%3D1&candidate=a%3D2"))[0] == 404
        assert (await get(base, f"/v1/compare?suite={SUITE}&baseline=region%3Deu&candidate=x%3D1"))[
            0
        ] == 400
        assert (await get(base, f"/v1/compare?suite={SUITE}&baseline=bad"))[0] == 400
    where = ["--redis", redis_server.url, "--prefix", prefix]
    toml = f'[stats]\nk = [1, 3]\nn_boot = 2000\n[redis]\nprefix = "{prefix}"\n'
    path = tmp_path / "reliabilityd.toml"
    path.write_text(toml)
    argv = ["compare", SUITE, "--baseline", "agent_version=1.4", "--candidate"]
    argv += ["agent_version=1.5", "--k", "3", "--json", "-c", str(path), *where]
    code = await asyncio.to_thread(main, argv)
    assert code == 0
    assert body.decode() == capsys.readouterr().out.splitlines()[-1]
    code = await asyncio.to_thread(main, [*argv, "--interval", "student"])
    assert code == 0
    assert on_student.decode() == capsys.readouterr().out.splitlines()[-1]
    doc = msgspec.json.decode(on_student)
    assert doc["differences"]["pass^k"]["interval"] == "student"


# --- the suite cap ------------------------------------------------------------


async def test_new_suites_past_max_suites_are_dead_lettered_and_known_ones_count(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        stats=StatsConfig(k=[1], ci_interval=0.3, n_boot=100, max_suites=3),
    )
    cfg = msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))
    batches = [(["a", "b"], "1"), (["a", "c", "d", "e"], "2"), (["b", "d"], "3")]

    def batch(suites: list[str], tag: str) -> TestingSource:
        events = [TrialEvent(s, "t", f"{tag}-{i}", "pass") for s in suites for i in range(2)]
        return TestingSource(events, topic="test")

    daemon = Daemon(cfg)
    try:
        sinks = [await batch(*b).run(daemon.commit) for b in batches]
        s = daemon.store
        assert await s.reads.suites() == ["a", "b", "c"]
        assert (await s.reads.read_state("a")).counters.trials == 4
        assert (await s.reads.read_state("b")).counters.trials == 4
        assert (await s.reads.read_state("d")).counters.trials == 0
        letters = await s.reads.deadletters()
        assert [(x.suite, x.reason_class) for x in letters] == [("d", "too_many_suites")] * 2 + [
            ("e", "too_many_suites")
        ] * 2 + [("d", "too_many_suites")] * 2
        assert "stats.max_suites (3)" in letters[0].reason
        counted = daemon.metrics.rejected.labels("mqtt", "too_many_suites")._value.get()
        assert counted == 6
        # The sink saw what Redis holds: each batch's counts, its refused events by
        # their place in the batch, and every item acknowledged, in order.
        assert [sink.counted() for sink in sinks] == [4, 4, 2]
        refused = [sorted(sink.committed[0].not_counted) for sink in sinks]
        assert refused == [[], [4, 5, 6, 7], [2, 3]]
        assert sinks[1].reason_classes() == ["too_many_suites"] * 4
        assert [sink.acknowledged for sink in sinks] == [list(range(n)) for n in (4, 8, 4)]
    finally:
        await daemon.store.client.aclose()


async def test_the_suite_cap_and_a_grant_quota_hold_under_concurrent_new_suites(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url="", prefix=prefix)
    async with store_for(cfg) as one, store_for(cfg) as two:
        # Every fourth suite is a grant's (quota 10), the rest are the shared pool's (40).
        names = [[f"s{i}-{w}" for i in range(60)] for w in ("one", "two")]

        def pool(suite: str) -> tuple[str, int]:
            return ("team", 10) if int(suite[1:].split("-", maxsplit=1)[0]) % 4 == 0 else ("", 40)

        async def admit(store: Store, suites: list[str]) -> set[str]:
            refused: set[str] = set()
            for i in range(0, len(suites), 3):
                chunk = suites[i : i + 3]
                refused |= set(await store.ingest.admit({s: pool(s) for s in chunk}, 50))
            return refused

        refused = await asyncio.gather(admit(one, names[0]), admit(two, names[1]))
        admitted = set(await one.reads.suites())
        assert len(admitted) == 50
        assert len([s for s in admitted if pool(s)[0] == "team"]) == 10
        assert admitted | refused[0] | refused[1] == set(names[0]) | set(names[1])
        assert not admitted & (refused[0] | refused[1])
        sizes: dict[bytes, bytes] = await one.client.hgetall(one.keys.pool_sizes)  # type: ignore[assignment]
        assert {k.decode(): int(v) for k, v in sizes.items()} == {"team": 10, "": 40}


def test_a_label_that_cannot_name_a_slice_is_dead_lettered_with_the_reason(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        stats=StatsConfig(k=[1], slice_by=["model"]),
    )
    cfg = msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))

    async def go() -> None:
        daemon = Daemon(cfg)
        try:
            good = TrialEvent(SUITE, "t", "1", "pass", labels={"model": "x"})
            bad = TrialEvent(SUITE, "t", "2", "pass", labels={"model": {"name": "x"}})
            sink = await TestingSource([[good, bad]], source="http:test").run(daemon.commit)
            assert sink.reason_classes() == ["invalid_field"]
            assert list(sink.committed[0].not_counted) == [1]
            assert (await daemon.store.reads.read_state(SUITE)).counters.trials == 1
            (letter,) = await daemon.store.reads.deadletters()
            assert letter.reason.startswith("labels.model is dict")
            assert letter.reason_class == "invalid_field"
        finally:
            await daemon.store.client.aclose()

    asyncio.run(go())


async def test_http_answers_rejected_for_elements_the_commit_dead_letters(
    redis_server: RedisServer, prefix: str
) -> None:
    """Past the suite cap or with an unsliceable label, the element's answer says so."""
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        stats=StatsConfig(k=[1], ci_interval=0.3, n_boot=100, max_suites=2),
        http=HttpConfig(port=free_port()),
    )
    cfg = msgspec.structs.replace(
        cfg,
        mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False),
        suites=[SuiteOverride(match="sliced", slice_by=["model"])],
    )
    body = [
        {"suite": "kept", "task": "t", "trial": "1", "outcome": "pass"},
        {"suite": "sliced", "task": "t", "trial": "1", "outcome": "pass", "labels": {"model": []}},
        {"suite": "sliced", "task": "t", "trial": "2", "outcome": "pass", "labels": {"model": "m"}},
        {"suite": "third", "task": "t", "trial": "1", "outcome": "pass"},
    ]
    async with serving(cfg) as (daemon, base):
        status, answer, _ = await post(base, body)
        assert status == 422
        results = {r["index"]: r for r in answer["results"]}
        assert [results[i]["status"] for i in range(4)] == [
            "accepted",
            "rejected",
            "accepted",
            "rejected",
        ]
        assert "sliced by it" in results[1]["reason"]
        assert "stats.max_suites (2)" in results[3]["reason"]
        assert (answer["accepted"], answer["rejected"]) == (2, 2)
        assert sorted(answer["suites"]) == ["kept", "sliced"]
        assert (await daemon.store.reads.read_state("third")).counters.trials == 0
        assert (await daemon.store.reads.read_state("sliced")).counters.trials == 1


async def test_a_windowed_suite_keeps_each_tasks_lifetime_counts_in_the_whole_and_its_slice(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    """Beside a 3-trial window, each task's lifetime counts (what the rate trigger
    differences) in the whole and in every slice, exact over chunks of any size; the rate
    trigger reads them as the lifetime counts of each series."""
    events = labelled_events(rng, 2000, tasks=6)
    truth, _ = tally(events)
    async with store_for(make_config(redis_url=redis_server.url, mqtt_url="", prefix=prefix)) as s:
        for start in range(0, len(events), 333):
            await s.ingest.apply(
                {SUITE: events[start : start + 333]},
                windows={SUITE: 3},
                dedup_ttl=3600,
                slicing={SUITE: Slicing(BY, 50)},
            )
        whole: dict[str, tuple[int, int]] = {}
        for counts in truth.values():
            for task, (n, c) in counts.items():
                n0, c0 = whole.get(task, (0, 0))
                whole[task] = (n0 + n, c0 + c)
        for series, want in [(Series(SUITE), whole)] + [
            (Series(SUITE, sid), counts) for sid, counts in truth.items() if counts
        ]:
            (got,) = await s.triggers.read([(series, [], True)])
            assert got is not None
            assert dict(zip(got.tasks, zip(got.n, got.c, strict=True), strict=True)) == want
            # The window itself holds at most 3 outcomes a task.
            values = await s.client.hvals(s.keys.series(series, "tasks"))
            assert all(isinstance(v, bytes) and int(v.split(b":")[0]) <= 3 for v in values)
