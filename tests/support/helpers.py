"""Event generators with ground truth, publishers, daemon runners and waits."""

from __future__ import annotations

import asyncio
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiomqtt
import msgspec
import numpy as np

from reliabilityd.config import Config
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.rules import AlertState
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Series, Store, Undecodable
from reliabilityd.testing import TestingSource, commit_to


class Truth:
    """What the counters must say: first write wins per (suite, task, trial)."""

    def __init__(self, window: int = 0) -> None:
        self.window = window
        self.seen: set[tuple[str, str, str]] = set()
        self.outcomes: dict[str, dict[str, list[int]]] = {}
        self.errors: dict[str, int] = {}
        self.skips: dict[str, int] = {}
        self.duplicates: dict[str, int] = {}

    def add(self, e: TrialEvent) -> None:
        key = (e.suite, e.task, e.trial)
        if key in self.seen:
            self.duplicates[e.suite] = self.duplicates.get(e.suite, 0) + 1
            return
        self.seen.add(key)
        if e.outcome == "error":
            self.errors[e.suite] = self.errors.get(e.suite, 0) + 1
        elif e.outcome == "skip":
            self.skips[e.suite] = self.skips.get(e.suite, 0) + 1
        else:
            self.outcomes.setdefault(e.suite, {}).setdefault(e.task, []).append(
                int(e.outcome == "pass")
            )

    def counts(self, suite: str) -> dict[str, tuple[int, int]]:
        out = {}
        for task, seq in self.outcomes.get(suite, {}).items():
            kept = seq[-self.window :] if self.window else seq
            out[task] = (len(kept), sum(kept))
        return out

    def hist(self, suite: str) -> Histogram:
        return Histogram.from_pairs(list(self.counts(suite).values()))

    def trials(self, suite: str) -> int:
        return sum(len(s) for s in self.outcomes.get(suite, {}).values())


def make_events(
    rng: np.random.Generator,
    *,
    suites: Sequence[str] = ("alpha", "beta"),
    tasks: int = 50,
    count: int = 10_000,
    dup_share: float = 0.1,
    flip: bool = True,
) -> list[TrialEvent]:
    """Unique trials with skill per task, errors and skips, duplicates, shuffled.

    With ``flip`` a duplicate carries the opposite outcome (first write must
    win); use ``flip=False`` where delivery order is not the publish order.
    """
    skill = {(s, t): rng.beta(2, 0.8) for s in suites for t in range(tasks)}
    unique = int(count * (1 - dup_share))
    events = []
    for i in range(unique):
        s = suites[int(rng.integers(len(suites)))]
        t = int(rng.integers(tasks))
        u = rng.random()
        outcome = (
            "error"
            if u < 0.03
            else "skip"
            if u < 0.05
            else ("pass" if rng.random() < skill[(s, t)] else "fail")
        )
        events.append(TrialEvent(s, f"task {t}", f"run-{i}", outcome, ts=float(i)))  # type: ignore[arg-type]
    dups = []
    for _ in range(count - unique):
        e = events[int(rng.integers(unique))]
        if flip and e.outcome in ("pass", "fail"):
            # A repeat with a different outcome is still the same trial.
            e = msgspec.structs.replace(e, outcome="fail" if e.outcome == "pass" else "pass")
        dups.append(e)
    allev = events + dups
    return [allev[i] for i in rng.permutation(len(allev))]


def truth_of(events: Iterable[TrialEvent], window: int = 0) -> Truth:
    t = Truth(window)
    for e in events:
        t.add(e)
    return t


def payloads(events: Sequence[TrialEvent], per_message: int) -> list[bytes]:
    if per_message == 1:
        return [msgspec.json.encode(e) for e in events]
    return [
        msgspec.json.encode(list(events[i : i + per_message]))
        for i in range(0, len(events), per_message)
    ]


async def publish(
    url_port: int,
    topic: str,
    messages: Sequence[bytes],
    *,
    client_id: str = "test-publisher",
    on_progress: Callable[[int], Awaitable[None]] | None = None,
    deadline: float = 120.0,
) -> None:
    """QoS 1 publisher that resends whatever the broker has not acknowledged.

    Each publish waits for its PUBACK; after a broken connection it reconnects
    and resends from the first unacknowledged message (a possible duplicate,
    which the daemon must count once).
    """
    sent = 0
    end = time.monotonic() + deadline
    while sent < len(messages):
        if time.monotonic() > end:
            raise TimeoutError(f"published {sent} of {len(messages)}")
        try:
            async with aiomqtt.Client(
                "127.0.0.1", url_port, identifier=client_id, timeout=5
            ) as client:
                client.pending_calls_threshold = 1000
                while sent < len(messages):
                    window = messages[sent : sent + 50]
                    await asyncio.gather(*(client.publish(topic, m, qos=1) for m in window))
                    sent += len(window)
                    if on_progress is not None:
                        await on_progress(sent)
        except aiomqtt.MqttError:
            await asyncio.sleep(0.2)


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], within: float = 30.0, interval: float = 0.05
) -> None:
    end = time.monotonic() + within
    while True:
        try:
            if await predicate():
                return
        except AssertionError:
            raise
        except Exception:
            if time.monotonic() > end:
                raise
        if time.monotonic() > end:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


def _unset(value: Any) -> Any:
    """``value`` without its None leaves (TOML has no null: a key left out is unset)."""
    if isinstance(value, dict):
        return {k: _unset(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_unset(v) for v in value]
    return value


async def current_snapshot(
    store: Store, suite: str, within: float = 30.0, *, slice: str | None = None
) -> dict[str, Any]:
    """The suite's (or one slice's) snapshot document once it is of its current data version,
    as JSON values.

    Call it after the commits it must cover have returned: a snapshot of an
    earlier version (a chunk of a batch, a live refresh) is not waited for.
    """

    async def current() -> bool:
        ((data, snap, _),) = await store.snapshots.versions([Series(suite, slice)])
        return data > 0 and snap == data

    await wait_until(current, within)
    snap = await stored_snapshot(store, suite, slice=slice)
    assert snap is not None
    # The document's JSON shape (lists, not tuples), of the record the store decoded.
    doc: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(snap))
    return doc


async def stored_snapshot(store: Store, suite: str, *, slice: str | None = None) -> Snapshot | None:
    """The series' stored snapshot as the store decodes it; None before any (never undecodable)."""
    snap = await store.snapshots.document(suite, slice=slice)
    assert not isinstance(snap, Undecodable), snap
    return snap


async def stored_states(store: Store, pairs: Sequence[tuple[str, str]]) -> list[AlertState]:
    """The stored state of each (suite, rule) as the store decodes it (never undecodable)."""
    states = await store.alerts.alert_states(pairs)
    for state in states:
        assert isinstance(state, AlertState), state
    return [s for s in states if isinstance(s, AlertState)]


async def stored_state(store: Store, suite: str, rule: str) -> AlertState:
    """The stored state of one (suite, rule) (``stored_states``)."""
    (state,) = await stored_states(store, [(suite, rule)])
    return state


def evaluations(daemon: Daemon) -> float:
    """How many passes over every rule and suite the daemon's evaluator has completed."""
    value = daemon.metrics.registry.get_sample_value("reliabilityd_alert_evaluations_total")
    return value or 0.0


async def judged(
    store: Store,
    suite: str,
    *daemons: Daemon,
    passes: int = 1,
    slices: Sequence[str] = (),
    within: float = 30.0,
) -> None:
    """Until each daemon's evaluator has judged the suite's current snapshot (and each
    of ``slices``') ``passes`` times (or a newer one).

    First the snapshots of the current versions, then ``passes + 1`` more
    evaluator passes of every daemon: the pass under way may have read an
    older snapshot, each one after it reads this one. A test that then
    asserts that nothing fired knows that a verdict was taken.
    """
    await current_snapshot(store, suite, within)
    for sid in slices:
        await current_snapshot(store, suite, within, slice=sid)
    before = [evaluations(d) for d in daemons]

    async def passed() -> bool:
        return all(evaluations(d) >= b + passes + 1 for d, b in zip(daemons, before, strict=True))

    await wait_until(passed, within)


def toml_of(config: Config) -> bytes:
    return msgspec.toml.encode(_unset(msgspec.to_builtins(config)))


class DaemonProcess:
    """`reliabilityd run` as a child process, to terminate or kill -9."""

    def __init__(
        self, config: Config, workdir: Path, name: str = "daemon", *, nofile: int | None = None
    ) -> None:
        self.path = workdir / f"{name}.toml"
        self.path.write_bytes(toml_of(config))
        self.log = workdir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        # RLIMIT_NOFILE (soft and hard) the daemon runs under; None = this process's.
        self.nofile = nofile

    def _limit_files(self) -> None:
        assert self.nofile is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "reliabilityd", "run", "-c", str(self.path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                # Runs before exec in the child; the tests start daemons from one thread.
                preexec_fn=None if self.nofile is None else self._limit_files,  # noqa: PLW1509
            )

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    async def wait_subscribed(self, times: int = 1, within: float = 30.0) -> None:
        """Until the log shows the `times`-th confirmed subscription."""

        async def seen() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited early:\n{self.output()}")
            return self.output().count("event=mqtt_subscribed") >= times

        await wait_until(seen, within)


async def commit_all(cfg: Config, events: list[TrialEvent]) -> None:
    """Commit ``events`` as one MQTT batch through the real commit, every one counted."""
    async with commit_to(cfg) as commit:
        sink = await TestingSource([events], topic=f"{cfg.redis.prefix}/trials/a").run(commit)
    assert sink.counted() == len(events)
