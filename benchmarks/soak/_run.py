"""One soak run: the servers and the daemon, the producers, the faults on their schedule,
samples of the counts and of memory, the final exact check and the report."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import aiohttp
import redis.asyncio
import redis.exceptions

from benchmarks.soak._daemon import (
    FIRES,
    RULE,
    THRESHOLDS,
    TOKEN,
    DaemonChild,
    Ports,
    config_text,
)
from benchmarks.soak._ledger import Counts, Ledger, Trial, read_counts
from benchmarks.soak._plan import BAD_RELOAD_EVERY, Plan
from benchmarks.soak._producers import HttpProducer, MqttProducer, OtlpProducer
from benchmarks.soak._report import MIB, Figures, Sample, memory
from reliabilityd import AsyncClient
from reliabilityd.embedded.processes import Mosquitto, RedisServer, ServerError, free_port
from reliabilityd.rules import AlertState
from reliabilityd.store import StoreError

SUITES = ["soak-mqtt-0", "soak-mqtt-1", "soak-sliced", "soak-http", "soak-otlp"]
MARKER = "soak-marker"
# Seconds the end may take: every PUBACK in, then the daemon caught up.
DRAIN = 120.0
# The suite whose alert state must follow each reload, and how soon.
ALERT_SUITE = "soak-mqtt-0"
FOLLOW = 60.0
# Every suite receives trials all the time, so its snapshot (ci_interval 5 s)
# is never older than this, Redis outages included.
STALE = 60.0
# Redis away: the Client raises the store's errors, the raw INFO client redis-py's.
READ_ERRORS = (StoreError, redis.exceptions.RedisError, OSError)


class Soak:
    """One run of ``plan`` in ``workdir``: ``run`` returns its figures."""

    def __init__(self, plan: Plan, workdir: Path, seed: int) -> None:
        self.plan = plan
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.ports = Ports(free_port(), free_port(), free_port())
        self.redis = RedisServer("redis", self._dir("redis"), self.ports.redis)
        self.broker = Mosquitto("mosquitto", self._dir("mosquitto"), self.ports.mqtt)
        self.daemon = DaemonChild(workdir)
        self.ledger = Ledger()
        self.figures = Figures()
        self.samples: list[Sample] = []
        self.threshold = THRESHOLDS[0]
        self.started = 0.0
        self.client = AsyncClient(self.redis.url)
        self._failed: set[str] = set()

    def _dir(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def now(self) -> float:
        return time.monotonic() - self.started

    def fail(self, problem: str, key: str | None = None) -> None:
        """Record a problem once per ``key`` (the problem itself by default)."""
        key = key or problem
        if key not in self._failed:
            self._failed.add(key)
            self.figures.failures.append(problem)
            print(f"[{self.now():6.0f}s] FAIL {problem}", flush=True)

    # --- faults -------------------------------------------------------------

    async def _reload(self, attempt: int) -> None:
        if attempt % BAD_RELOAD_EVERY == BAD_RELOAD_EVERY - 1:
            self.daemon.write(config_text(self.plan, self.ports, self.threshold, bad=True))
            line = await self.daemon.reload()
            if "event=reload_failed" not in line:
                self.fail(f"a bad config file was not refused: {line[:300]}")
                return
            self.figures.reloads["refused"] += 1
            # The running config must still be the file before the bad one:
            # reloading that file changes nothing.
            self.daemon.write(config_text(self.plan, self.ports, self.threshold))
            line = await self.daemon.reload()
            if not re.search(r"event=reloaded .*changed=nothing\b", line):
                self.fail(f"after a refused file the running config was another: {line[:300]}")
            return
        threshold = THRESHOLDS[1] if self.threshold == THRESHOLDS[0] else THRESHOLDS[0]
        self.daemon.write(config_text(self.plan, self.ports, threshold))
        line = await self.daemon.reload()
        found = re.search(r"event=reloaded .*changed=(\S+)", line)
        if found is None or "alerts" not in found[1].split(","):
            self.fail(f"a changed rule threshold was not reloaded: {line[:300]}")
            return
        self.threshold = threshold
        self.figures.reloads["done"] += 1
        await self._alert_follows(threshold)

    async def _alert_follows(self, threshold: float) -> None:
        """Until the rule's stored state is the one its new threshold implies."""
        want = ("firing",) if threshold == FIRES else ("resolved", "inactive")
        started = time.monotonic()
        state = "unread"
        while time.monotonic() - started < FOLLOW:
            with contextlib.suppress(*READ_ERRORS):
                stored = (await self.client.alert_states(ALERT_SUITE, [RULE]))[RULE]
                state = stored.state if isinstance(stored, AlertState) else "undecodable"
                if state in want:
                    lag = time.monotonic() - started
                    self.figures.alert_lag = max(self.figures.alert_lag, lag)
                    return
            await asyncio.sleep(0.5)
        self.fail(
            f"{RULE} on {ALERT_SUITE} still {state} {FOLLOW:.0f} s after its threshold "
            f"became {threshold}"
        )

    async def _restart(self, which: str) -> None:
        started = time.monotonic()
        if which == "redis":
            await asyncio.to_thread(self.redis.kill)  # no shutdown: only the AOF survives
            await asyncio.sleep(1.0)
            await asyncio.to_thread(self.redis.start)
        else:
            # SIGTERM: mosquitto writes its persistence file on a clean shutdown.
            await asyncio.to_thread(self.broker.stop, signal.SIGTERM)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(self.broker.start)
        self.figures.restarts[which] += 1
        self.figures.outages[which] += time.monotonic() - started

    async def faults(self) -> None:
        """Reloads (half a period late, so they never meet a restart), restarts, in time order."""
        plan = self.plan
        schedule = sorted(
            [(t - plan.reload_every / 2, "reload") for t in plan.reloads]
            + [(plan.seconds - plan.reload_every / 2, "reload")]
            + [(t, "redis") for t in plan.redis_restarts]
            + [(t, "broker") for t in plan.broker_restarts]
        )
        attempts = 0
        for at, kind in schedule:
            await asyncio.sleep(max(0.0, at - self.now()))
            print(f"[{self.now():6.0f}s] {kind}", flush=True)
            if kind == "reload":
                await self._reload(attempts)
                attempts += 1
            else:
                await self._restart(kind)

    # --- samples ------------------------------------------------------------

    async def _counts(self, client: AsyncClient) -> Counts | None:
        try:
            return await read_counts(client, SUITES)
        except READ_ERRORS:
            return None

    async def _snapshot_age(self) -> float | None:
        ages = []
        for suite in SUITES:
            snap = await self.client.snapshot(suite)
            if snap is not None:
                ages.append(time.time() - datetime.fromisoformat(snap.updated_at).timestamp())
        return max(ages) if ages else None

    async def sample(
        self, client: AsyncClient, info: redis.asyncio.Redis, *, loaded: bool = True
    ) -> Counts | None:
        """One sample; ``loaded`` while the producers run (snapshots must then be fresh)."""
        counts = await self._counts(client)
        age: float | None = None
        with contextlib.suppress(*READ_ERRORS):
            age = await self._snapshot_age()
        if age is not None and loaded and self.now() > STALE:
            self.figures.snapshot_age = max(self.figures.snapshot_age, age)
            if age > STALE:
                self.fail(
                    f"a snapshot {age:.0f} s old while its suite receives trials", "stale snapshot"
                )
        try:
            used: int | None = int((await info.info("memory"))["used_memory"])
        except READ_ERRORS:
            used = None
        if counts is not None:
            for problem in self.ledger.over(counts):
                self.fail(f"counted twice: {problem}", "twice " + problem.split(":")[0])
        self.samples.append(
            Sample(
                round(self.now(), 1),
                self.daemon.rss(),
                used,
                sum(self.ledger.sent.values()),
                sum(self.ledger.acked.values()),
                None if counts is None else sum(c.events for c in counts.values()),
                None if age is None else round(age, 1),
            )
        )
        return counts

    def report_line(self) -> str:
        s = self.samples[-1]
        f = self.figures
        counted = "-" if s.counted is None else f"{s.counted:,}"
        rss = "-" if s.rss is None else f"{s.rss / MIB:.1f} MiB"
        used = "-" if s.redis is None else f"{s.redis / MIB:.2f} MiB"
        age = "-" if s.snapshot_age is None else f"{s.snapshot_age:.0f} s"
        return (
            f"[{s.t:6.0f}s] sent {s.sent:,} acked {s.acked:,} counted {counted} "
            f"resent {sum(self.ledger.resent.values()):,} | daemon RSS {rss} | Redis {used} | "
            f"oldest snapshot {age} | "
            f"reloads {f.reloads['done']} done {f.reloads['refused']} refused | "
            f"restarts redis {f.restarts['redis']} broker {f.restarts['broker']}"
        )

    async def sampler(self, client: AsyncClient, info: redis.asyncio.Redis, until: float) -> None:
        last: Counts | None = None
        next_report = 0.0
        while time.monotonic() < until:
            counts = await self.sample(client, info)
            if counts is not None:
                if last is not None:
                    for problem in Ledger.back(last, counts):
                        self.fail(f"lost after commit: {problem}", "back " + problem.split(":")[0])
                last = counts
            self.daemon.read()
            if not self.daemon.alive():
                raise RuntimeError(f"the daemon exited; see {self.daemon.log}")
            if self.now() >= next_report:
                print(self.report_line(), flush=True)
                next_report += self.plan.report_every
            await asyncio.sleep(self.plan.sample_every)

    # --- the run ------------------------------------------------------------

    async def _ready(self) -> None:
        await self.daemon.wait_event("mqtt_subscribed", 1, 60)
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{self.ports.http}/readyz") as r:
                        if r.status == 200:
                            return
                await asyncio.sleep(0.1)
        raise TimeoutError("the daemon's /readyz never answered 200")

    async def run(self) -> Figures:
        self.redis.start()
        self.broker.start()
        self.daemon.write(config_text(self.plan, self.ports, self.threshold))
        self.daemon.start()
        client = self.client
        info = redis.asyncio.Redis.from_url(self.redis.url)
        mqtt = MqttProducer(
            self.ports.mqtt, self.ledger, self.rng, self.plan.mqtt_rate, self.plan.dedup_ttl
        )
        base = f"http://127.0.0.1:{self.ports.http}"
        ttl = self.plan.dedup_ttl
        http = HttpProducer(base, TOKEN, self.ledger, self.rng, self.plan.http_rate, dedup_ttl=ttl)
        otlp = OtlpProducer(base, TOKEN, self.ledger, self.rng, self.plan.otlp_rate, dedup_ttl=ttl)
        try:
            await self._ready()
            mqtt.start()
            self.started = time.monotonic()
            until = self.started + self.plan.seconds
            tasks = [
                asyncio.create_task(self.sampler(client, info, until)),
                asyncio.create_task(self.faults()),
                asyncio.create_task(mqtt.run(until)),
                asyncio.create_task(http.run(until)),
                asyncio.create_task(otlp.run(until)),
            ]
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            self.figures.seconds = round(self.now(), 1)
            await self.finish(client, info, mqtt)
        except (RuntimeError, TimeoutError, ServerError, *READ_ERRORS) as exc:
            self.figures.seconds = round(self.now(), 1)
            self.fail(f"aborted: {exc}")
        finally:
            self.figures.http = {"http": http.statuses, "otlp": otlp.statuses}
            for problem in mqtt.problems + http.problems + otlp.problems:
                self.fail(problem)
            self.figures.mqtt_connects = mqtt.connects
            mqtt.stop()
            code, took = self.daemon.stop()
            self.figures.daemon_exit = code
            if code != 0:
                self.fail(f"the daemon exited {code} on SIGTERM after {took:.1f} s")
            self.daemon.read()
            self.figures.daemon_warnings = dict(self.daemon.warnings)
            self.figures.ingest_pauses = self.daemon.events["redis_recovered"]
            await client.aclose()
            await info.aclose()
            self.broker.stop()
            self.redis.stop()
        for problem in memory(self.plan, self.figures, self.samples):
            self.fail(problem)
        return self.figures

    async def finish(
        self, client: AsyncClient, info: redis.asyncio.Redis, mqtt: MqttProducer
    ) -> None:
        """Everything acknowledged, the daemon caught up, a marker behind it: counts exact."""
        end = time.monotonic() + DRAIN
        try:
            await mqtt.drain(DRAIN)
        except TimeoutError as exc:
            self.fail(str(exc))
        if self.ledger.unacked:
            self.fail(f"{self.ledger.unacked} events never acknowledged (see the HTTP problems)")
        problems = ["not read"]
        while problems and time.monotonic() < end:
            counts = await self._counts(client)
            problems = ["not read"] if counts is None else self.ledger.differences(counts)
            if problems:
                await asyncio.sleep(1.0)
        # The broker delivers a session's messages in order, redeliveries first, and
        # the daemon commits in order: once the marker counts, nothing sent before it
        # is still on its way to count twice.
        marker = Trial(MARKER, "marker", f"marker-{time.time_ns()}", "pass")
        mqtt.publish_marker(marker)
        while time.monotonic() < end:
            with contextlib.suppress(*READ_ERRORS):
                if (await client.tasks(MARKER)).get("marker") == (1, 1):
                    break
            await asyncio.sleep(0.2)
        else:
            self.fail("the marker sent after everything else was never counted")
        counts = await read_counts(client, SUITES)
        await self.sample(client, info, loaded=False)
        for problem in self.ledger.differences(counts) + await self.ledger.slice_differences(
            client
        ):
            self.fail(problem)
        await self._snapshots_converge(counts)
        await self._check()
        ledger = self.ledger
        self.figures.sent = dict(ledger.sent)
        self.figures.acked = dict(ledger.acked)
        self.figures.resent = dict(ledger.resent)
        for suite in SUITES:
            tally, got = ledger.suites.get(suite), counts[suite]
            if tally is None:
                continue
            self.figures.suites[suite] = {
                "sent": tally.events,
                "counted": got.events,
                "n": got.trials,
                "c": sum(c for _, c in got.tasks.values()),
                "sent_c": tally.passes,
                "errors": got.errors,
                "skips": got.skips,
                "duplicates": got.duplicates,
                "resent": ledger.resent_suites[suite],
            }

    async def _snapshot_problems(self, counts: Counts) -> list[str]:
        out = []
        series: list[tuple[str, str | None, int, int]] = [
            (suite, None, counts[suite].trials, counts[suite].errors) for suite in SUITES
        ]
        series += [
            (suite, sid, t.trials, t.errors)
            for suite, slices in self.ledger.slices.items()
            for sid, t in slices.items()
        ]
        for suite, sid, trials, errors in series:
            snap = await self.client.snapshot(suite, slice=sid)
            got = None if snap is None else (snap.trials, snap.errors)
            if got != (trials, errors):
                name = suite if sid is None else f"{suite} [{sid}]"
                out.append(f"{name}: snapshot (trials, errors) {got}, counted {(trials, errors)}")
        return out

    async def _snapshots_converge(self, counts: Counts) -> None:
        """Every suite's and slice's snapshot catches up with the final counts."""
        end = time.monotonic() + FOLLOW
        while True:
            problems = ["not read"]
            with contextlib.suppress(*READ_ERRORS):
                problems = await self._snapshot_problems(counts)
            if not problems:
                return
            if time.monotonic() > end:
                for problem in problems:
                    self.fail(f"{problem} {FOLLOW:.0f} s after the last trial")
                return
            await asyncio.sleep(1.0)

    async def _check(self) -> None:
        """`reliabilityd check` on the daemon's config: healthy, and no session lost."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "reliabilityd",
            "check",
            "-c",
            str(self.daemon.path),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        self.figures.check = out.decode(errors="replace").strip()
        if proc.returncode != 0 or "warning" in self.figures.check:
            self.fail(f"reliabilityd check exited {proc.returncode}: {self.figures.check}")
