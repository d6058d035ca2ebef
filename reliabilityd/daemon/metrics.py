"""Prometheus metrics: this process's own counters and histograms, and suite gauges.

Two kinds of numbers, aggregated differently across replicas:

* **This process's work** (``reliabilityd_trials_total``, duplicates, dead
  letters (``reliabilityd_rejected_total``, by source and reason class),
  commit and CI timings, sink failures, ``ingest_paused``,
  ``last_commit_age_seconds``): each replica counts what it did itself, so
  ``sum`` over replicas is the fleet (``rate`` handles restarts).
* **A suite's state** (pass@k / pass^k with CI bounds, tasks, alert state,
  outbox depth): read from Redis at scrape time, the newest snapshot, so
  every replica exports the same value; aggregate with ``max by (suite, k)``
  (any replica's value is the value), never ``sum``.
* **A slice's state**: the same gauges named ``reliabilityd_slice_*`` with a
  ``slice`` label (the slice id; at most ``max_slices`` per suite), so a
  query over a suite's gauges never mixes the whole with its slices;
  ``reliabilityd_slice_overflow_events`` counts the events a suite holds in
  no slice. Alert states of rules with ``slices = true`` carry the rule name
  ``<rule>[<slice id>]``.

prometheus-client renders a registry of our own (never the global one).
Reading Redis is async and collectors are not, so ``refresh`` reads Redis
first and ``SuiteCollector.collect`` only formats what it read.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from math import inf, isnan
from typing import NamedTuple

import msgspec
import redis.exceptions
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from reliabilityd.alerting.notify import parse_time
from reliabilityd.alerting.rules import AlertState, Rule, for_slice
from reliabilityd.alerting.sinks import Note, Sink
from reliabilityd.events import REASON_CLASSES, Rejected, reason_class
from reliabilityd.sources.mqtt import Watch
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Applied, Series, Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ALERT_STATES = ("inactive", "pending", "firing", "resolved")
# Redis round trips are milliseconds; a commit that waits out an outage is seconds.
COMMIT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The kinds of source a dead letter comes from (its source is "<kind>:<where>").
SOURCES = ("mqtt", "stream", "http")
CI_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class SuiteView(msgspec.Struct, frozen=True):
    """What one scrape read from Redis."""

    snapshots: list[Snapshot]
    alerts: list[tuple[str, str, AlertState]]  # (suite, rule, state)
    outbox: dict[str, int]  # sink -> entries waiting, over every suite and rule
    redis_up: bool
    read_at: float
    # The slices' snapshots (each names its suite and slice).
    slice_snapshots: list[Snapshot] = msgspec.field(default_factory=list)


def _safe_time(text: str | None) -> float | None:
    """An RFC 3339 time from a snapshot, None when absent or unreadable."""
    try:
        return parse_time(text)
    except ValueError:
        return None


def _number(x: float) -> str:
    """A sample value as the text exposition format writes it."""
    if isnan(x):
        return "NaN"
    if x in (inf, -inf):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


def _label(value: str) -> str:
    """A label value escaped for the text exposition format."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, text: str, lines: Iterable[str]) -> str:
    return f"# HELP {name} {text}\n# TYPE {name} gauge\n" + "".join(lines)


def _estimate_families(prefix: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The per-(series, k) families, in exposition order: (name, help) by metric."""
    return [
        (
            metric,
            [
                (
                    f"{prefix}{metric}_ratio",
                    f"{label} point estimate of the newest snapshot (absent while UNKNOWN)",
                ),
                (
                    f"{prefix}{metric}_ci_lower_ratio",
                    f"Lower bound of the {label} cluster-bootstrap CI (absent while UNKNOWN)",
                ),
                (
                    f"{prefix}{metric}_ci_upper_ratio",
                    f"Upper bound of the {label} cluster-bootstrap CI (absent while UNKNOWN)",
                ),
                (
                    f"{prefix}{metric}_unknown",
                    f"1 while {label} is UNKNOWN (too few trials for k): visible, never a pass",
                ),
            ],
        )
        for metric, label in (("pass_at_k", "pass@k"), ("pass_hat_k", "pass^k"))
    ]


_ESTIMATE_FAMILIES = _estimate_families("reliabilityd_")
_SLICE_ESTIMATE_FAMILIES = _estimate_families("reliabilityd_slice_")
# The families after the estimates, each with one line per snapshot at most.
_SUITE_FAMILIES = [
    ("reliabilityd_tasks", "Tasks in the suite's pool (n > 0)"),
    (
        "reliabilityd_slice_overflow_events",
        "Events counted in the suite but in no slice (past its most slices), as of its"
        " newest snapshot",
    ),
    ("reliabilityd_slices", "Slices of the suite, as of its newest snapshot"),
]
_SLICE_FAMILIES = [("reliabilityd_slice_tasks", "Tasks in the slice's pool (n > 0)")]


def _suite_lines(snap: Snapshot) -> list[str]:
    """One series' lines of each of its families but the age (it moves with the clock).

    A suite's: the estimate families, then ``_SUITE_FAMILIES``; a slice's
    (``snap.slice``): the ``reliabilityd_slice_*`` ones, then ``_SLICE_FAMILIES``.
    """
    out: list[str] = []
    suite = _label(snap.suite)
    series = f'suite="{suite}"'
    families = _ESTIMATE_FAMILIES
    if snap.slice is not None:
        series += f',slice="{_label(snap.slice)}"'
        families = _SLICE_ESTIMATE_FAMILIES
    for metric, names in families:
        value, low, high, unknown = [], [], [], []
        (v_name, _), (lo_name, _), (hi_name, _), (u_name, _) = names
        for est in getattr(snap, metric):
            labels = f'{{{series},k="{est.k}"}} '
            if est.value is None:
                unknown.append(f"{u_name}{labels}1.0\n")
            else:
                unknown.append(f"{u_name}{labels}0.0\n")
                value.append(f"{v_name}{labels}{_number(est.value)}\n")
            if est.ci is not None:
                low.append(f"{lo_name}{labels}{_number(est.ci[0])}\n")
                high.append(f"{hi_name}{labels}{_number(est.ci[1])}\n")
        out.extend("".join(lines) for lines in (value, low, high, unknown))
    if snap.slice is not None:
        out.append(f"reliabilityd_slice_tasks{{{series}}} {float(snap.tasks)}\n")
        return out
    out.append(f"reliabilityd_tasks{{{series}}} {float(snap.tasks)}\n")
    if snap.slices or snap.slice_overflow:
        out.append(f"reliabilityd_slice_overflow_events{{{series}}} {float(snap.slice_overflow)}\n")
        out.append(f"reliabilityd_slices{{{series}}} {float(snap.slices)}\n")
    else:
        out += ["", ""]
    return out


class _Kept(NamedTuple):
    """One series' formatted lines, kept while its snapshot stays the same."""

    updated_at: str
    lines: list[str]
    # The age family's line without its value, and the time it counts from.
    age_prefix: str
    last_trial_at: float | None


class SuiteText:
    """The suite gauges as exposition text, from the view the last ``refresh`` read.

    Each series' lines (a suite's, a slice's) are formatted once per
    snapshot (kept by series and ``updated_at``) and the whole text once per
    view, so a scrape with nothing new serves the bytes it served before and
    one after a tick formats only the series that tick changed.
    """

    def __init__(self) -> None:
        self.view: SuiteView | None = None
        self._lines: dict[Series, _Kept] = {}
        self._rendered: tuple[SuiteView | None, bytes] | None = None

    def render(self) -> bytes:
        view = self.view
        if self._rendered is not None and self._rendered[0] is view:
            return self._rendered[1]
        up = 1.0 if view is not None and view.redis_up else 0.0
        parts = [
            _family(
                "reliabilityd_redis_up",
                "1 when this scrape could read the suites from Redis",
                [f"reliabilityd_redis_up {up}\n"],
            )
        ]
        if view is not None:
            parts += self._suite_families(view)
        body = "".join(parts).encode()
        self._rendered = (view, body)
        return body

    def _kept(self, snapshots: Sequence[Snapshot], fresh: dict[Series, _Kept]) -> list[_Kept]:
        """Each snapshot's lines: the kept ones while its snapshot stays, else formatted."""
        out: list[_Kept] = []
        for snap in snapshots:
            series = Series(snap.suite, snap.slice)
            kept = self._lines.get(series)
            if kept is None or kept.updated_at != snap.updated_at:
                kept = _Kept(
                    snap.updated_at,
                    _suite_lines(snap),
                    f'reliabilityd_last_trial_age_seconds{{suite="{_label(snap.suite)}"}} ',
                    _safe_time(snap.last_trial_at),
                )
            fresh[series] = kept
            out.append(kept)
        return out

    def _suite_families(self, view: SuiteView) -> list[str]:
        fresh: dict[Series, _Kept] = {}
        kept_all = self._kept(view.snapshots, fresh)
        slices_all = self._kept(view.slice_snapshots, fresh)
        # Series gone from the view drop their lines.
        self._lines = fresh
        names = [n for _, family in _ESTIMATE_FAMILIES for n in family]
        suite_names = [*names, *_SUITE_FAMILIES]
        parts = [
            _family(name, text, (kept.lines[i] for kept in kept_all))
            for i, (name, text) in enumerate(suite_names)
            if i < len(names) + 1  # tasks; the slice counts follow the age
        ]
        at = view.read_at
        age = [
            f"{kept.age_prefix}{_number(max(0.0, at - kept.last_trial_at))}\n"
            for kept in kept_all
            if kept.last_trial_at is not None
        ]
        parts.append(
            _family(
                "reliabilityd_last_trial_age_seconds",
                "Seconds since the suite's last counted trial, as of its newest snapshot",
                age,
            )
        )
        slice_names = [
            *(n for _, family in _SLICE_ESTIMATE_FAMILIES for n in family),
            *_SLICE_FAMILIES,
        ]
        parts += [
            _family(name, text, (kept.lines[i] for kept in slices_all))
            for i, (name, text) in enumerate(slice_names)
        ]
        parts += [
            _family(name, text, (kept.lines[i] for kept in kept_all))
            for i, (name, text) in enumerate(suite_names)
            if i > len(names)
        ]
        parts.append(
            _family(
                "reliabilityd_alert_state",
                "1 for the alert rule's current state on the suite, 0 for the others",
                (
                    f'reliabilityd_alert_state{{suite="{_label(suite)}",rule="{_label(rule)}",'
                    f'state="{s}"}} {1.0 if current.state == s else 0.0}\n'
                    for suite, rule, current in view.alerts
                    for s in ALERT_STATES
                ),
            )
        )
        parts.append(
            _family(
                "reliabilityd_outbox_depth",
                "Notifications queued for a sink and not yet accepted by it",
                (
                    f'reliabilityd_outbox_depth{{sink="{_label(sink)}"}} {float(depth)}\n'
                    for sink, depth in sorted(view.outbox.items())
                ),
            )
        )
        return parts


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


async def _newest(
    store: Store, series: Sequence[Series], known: Mapping[Series, Snapshot] | None
) -> list[Snapshot]:
    """The newest snapshot of each series that has one; with ``known`` (the snapshots
    an earlier view read), only the documents of series whose stored snapshot is
    another one are read and decoded."""
    kept: dict[Series, Snapshot] = {}
    wanted = list(series)
    if known:
        stamps = await store.snapshots.snapshot_stamps(series)
        wanted = []
        for one, stamp in zip(series, stamps, strict=True):
            snap = known.get(one)
            if snap is not None and stamp == (snap.version, snap.updated_at):
                kept[one] = snap
            elif stamp is not None:
                wanted.append(one)
    for one, raw in zip(wanted, await store.snapshots.snapshot_docs(wanted), strict=True):
        if raw is None:
            continue
        try:
            kept[one] = msgspec.json.decode(raw, type=Snapshot)
        except msgspec.DecodeError:
            continue  # written by another schema version, or damaged: one series, not the scrape
    return [kept[s] for s in series if s in kept]


async def read_view(
    store: Store,
    rules: Sequence[Rule],
    sinks: Sequence[str],
    known: Mapping[Series, Snapshot] | None = None,
) -> SuiteView:
    """The newest snapshot of every suite and slice, every alert state and outbox depth.

    With ``known`` (the snapshots an earlier view read, by series), only the
    documents of series whose stored snapshot is another one are read and
    decoded.
    """
    suites = await store.reads.suites()
    snapshots = await _newest(store, [Series(s) for s in suites], known)
    sliced = {s.suite for s in snapshots if s.slices}
    slice_ids = await store.reads.slices_of(sorted(sliced))
    series = [Series(suite, sid) for suite, ids in slice_ids.items() for sid in ids]
    slice_snapshots = await _newest(store, series, known)
    pairs = [(s, r.name) for s in suites for r in rules if fnmatch.fnmatchcase(s, r.suite)]
    pairs += [
        (suite, for_slice(r, sid).name)
        for suite, ids in slice_ids.items()
        for r in rules
        if r.slices and fnmatch.fnmatchcase(suite, r.suite)
        for sid in ids
    ]
    states = await store.alerts.alert_states(pairs)
    triples = [(s, r, sink) for s, r in pairs for sink in sinks]
    depths = await store.alerts.outbox_lengths(triples)
    outbox = dict.fromkeys(sinks, 0)
    for (_, _, sink), depth in zip(triples, depths, strict=True):
        outbox[sink] += depth
    return SuiteView(
        snapshots=snapshots,
        alerts=[(s, r, st) for (s, r), st in zip(pairs, states, strict=True)],
        outbox=outbox,
        redis_up=True,
        read_at=time.time(),
        slice_snapshots=slice_snapshots,
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
            self.rejected.labels(label, reason_class(item.reason)).inc()

    def count_sink_failures(self, sinks: Mapping[str, Sink]) -> dict[str, Sink]:
        """The same sinks, each counting the deliveries it raised on (timeouts included)."""
        return {name: _CountingSink(sink, self.sink_failures) for name, sink in sinks.items()}

    # --- scrape -------------------------------------------------------------

    async def refresh(self, store: Store, rules: Sequence[Rule], sinks: Sequence[str]) -> None:
        """Read the suite gauges from Redis; on a Redis error keep none and say so."""
        last = self.suites.view
        known = (
            {}
            if last is None
            else {
                Series(snap.suite, snap.slice): snap
                for snap in (*last.snapshots, *last.slice_snapshots)
            }
        )
        try:
            self.suites.view = await read_view(store, rules, sinks, known)
        except (redis.exceptions.RedisError, OSError):
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
