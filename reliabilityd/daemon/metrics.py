"""Prometheus metrics: this process's own counters and histograms, and suite gauges.

Two kinds of numbers, aggregated differently across replicas:

* **This process's work** (``reliabilityd_trials_total``, duplicates, dead
  letters (``reliabilityd_rejected_total``, by source and reason class),
  commit and CI timings, sink failures, ``ingest_paused``,
  ``last_commit_age_seconds``): each replica counts what it did itself, so
  ``sum`` over replicas is the fleet (``rate`` handles restarts).
* **A suite's state** (pass@k / pass^k with CI bounds, tasks, alert state,
  outbox depth): read from Redis at scrape time, from the summary rows
  (``store.rows``, written after each tick) of the newest snapshots, so
  every replica exports the same value; aggregate with ``max by (suite, k)``
  (any replica's value is the value), never ``sum``.
* **A slice's state**: the same gauges named ``reliabilityd_slice_*`` with a
  ``slice`` label (the slice id; at most ``max_slices`` per suite), so a
  query over a suite's gauges never mixes the whole with its slices;
  ``reliabilityd_slice_overflow_events`` counts the events a suite holds in
  no slice.
* **Alert states** (``reliabilityd_alert_state``): one series per watch of
  the registry (``alerting.registry``): each threshold rule on each suite it
  matches, each ``slices = true`` rule on each slice as ``<rule>[<slice id>]``,
  and each canary comparison on its home (candidate) suite.

prometheus-client renders a registry of our own (never the global one).
Reading Redis is async and collectors are not, so ``refresh`` reads Redis
first and ``SuiteCollector.collect`` only formats what it read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from reliabilityd.alerting.sinks import Note, Sink
from reliabilityd.daemon._metrics_text import SuiteText, SuiteView
from reliabilityd.rejections import REASON_CLASSES, Rejected
from reliabilityd.rules import AlertState, CanaryRule, Rule
from reliabilityd.sources.mqtt import Watch
from reliabilityd.store import Applied, Gauges, Store, StoreError, Undecodable, UndecodableLog

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ALERT_STATES = ("inactive", "pending", "firing", "resolved")
# Redis round trips are milliseconds; a commit that waits out an outage is seconds.
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The kinds of source a dead letter comes from (its source is "<kind>:<where>").
SOURCES = ("mqtt", "stream", "http")
CI_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class MqttCollector(Collector):
    """The MQTT consumer's session counters, read from its ``Watch`` at scrape time."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        w = self.watch
        for name, text, value in (
            (
                "reliabilityd_mqtt_sessions_lost",
                "Reconnects on which the broker no longer had this process's persistent session"
                " (the QoS 1 messages it had queued are lost)",
                w.sessions_lost,
            ),
            (
                "reliabilityd_mqtt_takeovers",
                "Connections ended because another client took the session over (DISCONNECT"
                " 0x8E, or closed right after CONNACK)",
                w.takeovers,
            ),
            (
                "reliabilityd_mqtt_skipped",
                "MQTT messages over ingest.max_payload, acknowledged and dead-lettered unread",
                w.skipped,
            ),
        ):
            family = CounterMetricFamily(name, text)
            family.add_metric([], float(value))
            yield family


# Undecodable rows are left out of the gauges; one warning line per interval says so.
_undecodable_log = UndecodableLog()


async def read_view(store: Store, sinks: Sequence[str]) -> SuiteView:
    """Every series' summary row (``store.rows``), the rules' states they carry, and the
    outbox depth of each sink: a few HSCAN pages whatever the number of suites.

    A row is written after each tick's verdicts, so the gauges are the newest snapshot's
    and the states that tick decided. A suite without a snapshot has no row and no gauge
    yet; a rule's state is exposed once, from the row of the suite that holds it.
    """
    rows: list[Gauges] = []
    for row in await store.rows.gauges():
        if isinstance(row, Undecodable):
            _undecodable_log.note(row)
        else:
            rows.append(row)
    rows.sort(key=lambda r: (r.suite, r.slice or ""))
    wholes = [r for r in rows if r.slice is None]
    # The registry's watches as the tick listed them: threshold, slice and canary rules.
    pairs: list[tuple[str, str]] = []
    states: list[tuple[str, str, AlertState | str]] = []
    for row in wholes:
        for name, state, home in row.rules:
            if home != row.suite:
                continue  # a canary's other side: exposed with the suite that holds it
            pairs.append((home, name))
            if state != "undecodable":  # no gauge: a state not known is not "inactive"
                states.append((home, name, state))
    triples = [(s, r, sink) for s, r in pairs for sink in sinks]
    depths = await store.alerts.outbox_lengths(triples)
    outbox = dict.fromkeys(sinks, 0)
    for (_, _, sink), depth in zip(triples, depths, strict=True):
        outbox[sink] += depth
    return SuiteView(
        snapshots=list(wholes),
        alerts=states,
        outbox=outbox,
        redis_up=True,
        read_at=time.time(),
        slice_snapshots=[r for r in rows if r.slice is not None],
    )


class Metrics:
    """The registry /metrics renders, and the hooks the daemon calls."""

    def __init__(
        self,
        *,
        sinks: Iterable[str] = (),
        is_paused: Callable[[], bool] = lambda: False,
        last_commit_at: Callable[[], float] = time.time,
        mqtt_watch: Watch | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.trials = Counter(
            "reliabilityd_trials",
            "Events this process committed, by outcome: counted (pass or fail: they enter"
            " n), error, skip",
            ["suite", "outcome"],
            registry=r,
        )
        self.duplicates = Counter(
            "reliabilityd_duplicates",
            "Events this process found already applied (first write wins)",
            ["suite"],
            registry=r,
        )
        self.rejected = Counter(
            "reliabilityd_rejected",
            "Payloads or elements this process dead-lettered, by source (mqtt, stream, http)"
            " and reason class (" + ", ".join(REASON_CLASSES) + "); forbidden HTTP elements"
            " are counted and not dead-lettered",
            ["source", "reason"],
            registry=r,
        )
        for source in SOURCES:
            for reason in REASON_CLASSES:
                self.rejected.labels(source, reason)
        self.sink_failures = Counter(
            "reliabilityd_sink_failures",
            "Notification deliveries a sink refused or did not take (each is retried)",
            ["sink"],
            registry=r,
        )
        for sink in sinks:
            self.sink_failures.labels(sink)
        self.publish_refused = Counter(
            "reliabilityd_publish_refused",
            "MQTT topics the publisher set aside because the broker refuses them (see the log)",
            registry=r,
        )
        self.evaluations = Counter(
            "reliabilityd_alert_evaluations",
            "Passes of the alert evaluation this process completed: every rule on every"
            " suite's newest snapshot, and the canaries of the suites the tick recomputed"
            " (one per CI tick that reached Redis)",
            registry=r,
        )
        self.commit_seconds = Histogram(
            "reliabilityd_commit_duration_seconds",
            "From a decoded batch to Redis having applied it, retries included",
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self.ci_seconds = Histogram(
            "reliabilityd_ci_duration_seconds",
            "Computing one suite's estimates with CIs for every k (a batch's time shared among"
            " its suites)",
            buckets=CI_BUCKETS,
            registry=r,
        )
        self.http_ingest = Counter(
            "reliabilityd_http_ingest_requests",
            "POST /v1/trials and /v1/logs requests by HTTP status code",
            ["code"],
            registry=r,
        )
        paused = Gauge(
            "reliabilityd_ingest_paused",
            "1 while this process cannot commit to Redis and holds its input",
            registry=r,
        )
        paused.set_function(lambda: 1.0 if is_paused() else 0.0)
        age = Gauge(
            "reliabilityd_last_commit_age_seconds",
            "Seconds since this process last committed a batch (since its start before any)",
            registry=r,
        )
        age.set_function(lambda: max(0.0, time.time() - last_commit_at()))
        self.suites = SuiteText()
        r.register(MqttCollector(mqtt_watch or Watch()))

    # --- hooks the daemon calls --------------------------------------------

    def committed(self, applied: Iterable[Applied], seconds: float) -> None:
        self.commit_seconds.observe(seconds)
        for a in applied:
            for outcome, count in (
                ("pass", a.passes),
                ("fail", a.counted - a.passes),
                ("error", a.errors),
                ("skip", a.skips),
            ):
                if count:
                    self.trials.labels(a.suite, outcome).inc(count)
            if a.duplicates:
                self.duplicates.labels(a.suite).inc(a.duplicates)

    def deadlettered(self, rejected: Iterable[tuple[Rejected, str]]) -> None:
        """Count dead letters by the kind of source ("mqtt:<topic>" is "mqtt") and reason class."""
        for item, source in rejected:
            kind = source.split(":", 1)[0]
            label = kind if kind in SOURCES else "other"
            self.rejected.labels(label, item.reason_class).inc()

    def count_sink_failures(self, sinks: Mapping[str, Sink]) -> dict[str, Sink]:
        """The same sinks, each counting the deliveries it raised on (timeouts included)."""
        for name in sinks:
            self.sink_failures.labels(name)  # shown at 0 from the start
        return {name: _CountingSink(sink, self.sink_failures) for name, sink in sinks.items()}

    # --- scrape -------------------------------------------------------------

    async def refresh(
        self, store: Store, alerts: Sequence[Rule | CanaryRule], sinks: Sequence[str]
    ) -> None:
        """Read the suite gauges from Redis; on a Redis error keep none and say so."""
        try:
            self.suites.view = await read_view(store, sinks)
        except StoreError:
            self.suites.view = SuiteView([], [], {}, redis_up=False, read_at=time.time())

    def render(self) -> bytes:
        """This process's metrics, then the suite gauges (formatted once per change)."""
        return generate_latest(self.registry) + self.suites.render()


class _CountingSink:
    """A sink that counts the deliveries it refused or failed (HTTP timeouts are SinkErrors)."""

    def __init__(self, sink: Sink, failures: Counter) -> None:
        self.name = sink.name
        self.needs_redis = sink.needs_redis
        self._sink = sink
        self._failures = failures.labels(sink.name)

    async def send(self, note: Note) -> None:
        try:
            await self._sink.send(note)
        except Exception:
            self._failures.inc()
            raise
