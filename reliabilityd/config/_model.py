"""The configuration's structure: every table and key, with its default and bounds."""

from __future__ import annotations

import fnmatch
import socket
from typing import Annotated, Literal

import msgspec

from reliabilityd.config._http import GrantConfig, HttpConfig
from reliabilityd.config._types import (
    Base,
    Fraction01,
    NonNegFloat,
    NonNegInt,
    PositiveFloat,
    PositiveInt,
)
from reliabilityd.names import template_problem, url_problem
from reliabilityd.rules import Rule
from reliabilityd.rules.canary import CanaryRule
from reliabilityd.stats.intervals import IntervalName
from reliabilityd.store import Recent


class RedisConfig(Base):
    url: str = "redis://127.0.0.1:6379/0"
    # Key prefix: keys are <prefix>:{<suite>}:... (several deployments can share a server).
    prefix: Annotated[str, msgspec.Meta(min_length=1, pattern=r"^[^{}\s]+$")] = "rel"
    # Talk to a Redis Cluster (every key of a suite shares one hash tag).
    cluster: bool = False
    # Seconds one Redis call may take before the batch is retried; also how
    # long a call waits for a free connection of its pool.
    timeout: PositiveFloat = 10.0
    # Connections of the daemon's pool for the sources, the CI tick, alert
    # delivery and the heartbeat (per node on a cluster); the HTTP port has
    # its own (http.max_inflight). A call past it waits for a free one.
    max_connections: PositiveInt = 32


class TlsConfig(Base):
    """``[mqtt.tls]``: how an mqtts:// connection trusts the broker and proves who it is."""

    # PEM file of the CA certificates that sign the broker's; "" = the system's CAs.
    ca_file: str = ""
    # A client certificate and its private key (PEM), for brokers that
    # authenticate clients by certificate (AWS IoT Core, ...); "" = none.
    cert_file: str = ""
    key_file: str = ""  # "" = the key is in cert_file
    key_password: str = ""
    # The name the broker's certificate must carry, when not the URL's host.
    server_name: str = ""
    # Accept any certificate without checking it: only for a test broker.
    insecure: bool = False


class MqttConfig(Base):
    enabled: bool = True
    url: str = "mqtt://127.0.0.1:1883"
    topic: str = "reliability/trials/#"
    client_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] = "reliabilityd"
    protocol: Literal["5", "3.1.1"] = "5"
    # Seconds the broker keeps our session (and queues QoS 1 messages) while we are away.
    session_expiry: PositiveInt = 3600
    # Non-empty: subscribe as $share/<group>/<topic> so several daemons split the topic.
    shared_group: str = ""
    # MQTT 5 Receive Maximum: unacknowledged messages the broker may have in flight to us.
    # Room for the batch being committed, the one being decoded and more arriving.
    receive_maximum: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8000
    keepalive: PositiveInt = 30
    # Retained snapshots go to <snapshot_topic>/<suite>.
    snapshot_topic: str = "reliability/snapshot"
    # Bind each event's suite to its topic (reliabilityd.topics): "" = off;
    # "last-level" = the topic's last level; or a pattern such as
    # "reliability/trials/{suite}". An event of another suite is dead-lettered.
    bind_suite: str = ""
    tls: TlsConfig = msgspec.field(default_factory=TlsConfig)


class StreamConfig(Base):
    enabled: bool = False
    # The stream agents XADD to; each entry carries the wire payload in field `payload`.
    key: str = "rel:trials"
    group: str = "reliabilityd"
    # Entries another consumer left pending this long (seconds) are claimed.
    claim_idle: PositiveFloat = 60.0


class StoreConfig(Base):
    # Seconds a (task, trial) dedup record lives; 0 = twice mqtt.session_expiry.
    dedup_ttl: NonNegInt = 0
    deadletter_maxlen: PositiveInt = 10_000


class IngestConfig(Base):
    # Messages (or stream entries) committed in one Redis round trip at most
    # (fewer, larger commits cost less CPU per event on both sides; see make bench-ingest).
    max_batch: PositiveInt = 2000
    # Payloads larger than this many bytes are dead-lettered undecoded.
    max_payload: PositiveInt = 1 << 20


# Label keys a suite is sliced by (docs/slices.md): distinct names, each a label key.
SliceBy = Annotated[
    list[Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]],
    msgspec.Meta(max_length=8),
]
MaxSlices = Annotated[int, msgspec.Meta(ge=1, le=1000)]


# Records kept per task (0 = none) and failures per suite (docs/drill-down.md).
RecentTrials = Annotated[int, msgspec.Meta(ge=0, le=100)]
RecentFailures = Annotated[int, msgspec.Meta(ge=1, le=1000)]
# Runs whose per-task counts a suite keeps (0 = none; docs/drill-down.md#runs).
MaxRuns = Annotated[int, msgspec.Meta(ge=0, le=1000)]


def _link_checks(base: str, template: str) -> None:
    if base:
        problem = url_problem(base)
        if problem or not base.lower().startswith(("http://", "https://")):
            raise ValueError(f"url_base must be an absolute http(s) URL: {problem or base}")
    if template:
        problem = template_problem(template)
        if problem:
            raise ValueError(f"url_template: {problem}")


class SuiteOverride(Base):
    match: Annotated[str, msgspec.Meta(min_length=1)]
    # Recent trials kept per task; None = stats.recent_trials.
    recent_trials: RecentTrials | None = None
    # Runs whose per-task counts this suite keeps; None = stats.max_runs.
    max_runs: MaxRuns | None = None
    # Trial links: see StatsConfig; None = the stats table's.
    url_base: str | None = None
    url_template: str | None = None
    window: NonNegInt | None = None
    min_coverage: Fraction01 | None = None
    idle_expiry: NonNegFloat | None = None
    # The CI of this suite's estimates; None = stats.interval.
    interval: IntervalName | None = None
    # Label keys that split this suite into slices; None = stats.slice_by.
    slice_by: SliceBy | None = None
    # The most slices this suite may have; None = stats.max_slices.
    max_slices: MaxSlices | None = None

    def __post_init__(self) -> None:
        _link_checks(self.url_base or "", self.url_template or "")


class StatsConfig(Base):
    k: Annotated[list[PositiveInt], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: [1, 5]
    )
    ci_interval: PositiveFloat = 5.0
    n_boot: PositiveInt = 2000
    confidence: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.95
    seed: NonNegInt = 0
    # Keep only each task's last `window` counted trials (0 = lifetime).
    window: NonNegInt = 0
    min_coverage: Fraction01 = 1.0
    lottery_limit: NonNegInt = 10
    # A task without any event for this many seconds leaves the suite (0 = never).
    idle_expiry: NonNegFloat = 0.0
    # Which CI (reliabilityd.INTERVALS): "gaffke" covers at its level even when
    # failures are rare; "percentile" is multivon-eval's (docs/statistics.md).
    interval: IntervalName = "gaffke"
    # Label keys that split every suite into slices (docs/slices.md); [] = none.
    slice_by: SliceBy = msgspec.field(default_factory=list)
    # The most slices a suite may have: past it, events count in the whole and
    # in its overflow count, never in another slice.
    max_slices: MaxSlices = 50
    # The most suites the deployment holds: past it, an event for a new suite
    # is dead-lettered (reason class too_many_suites); known suites keep counting.
    max_suites: PositiveInt = 1000
    # Each task's last trials kept (trial, outcome, time, run, url), 0 = none;
    # and each suite's last failures (docs/drill-down.md).
    recent_trials: RecentTrials = 10
    recent_failures: RecentFailures = 50
    # The runs (an event's `run`) whose per-task counts each suite keeps: the
    # newest by last trial; past it the oldest run retires with its counts; 0 = none.
    max_runs: MaxRuns = 20
    # What a relative trial url is resolved against (an absolute http(s) URL,
    # e.g. an Inspect log viewer's), and a template that builds every trial's
    # link from {suite}, {task}, {trial} and {run}, so events carry none.
    url_base: str = ""
    url_template: str = ""

    def __post_init__(self) -> None:
        _link_checks(self.url_base, self.url_template)


class MqttSinkConfig(Base):
    # Retained JSON state per rule on <topic>/<suite>/<rule>.
    topic: str = "reliability/alerts"


class RedisSinkConfig(Base):
    enabled: bool = True
    # The history stream; "" = <redis.prefix>:alerts.
    key: str = ""
    maxlen: PositiveInt = 10_000


class WebhookSinkConfig(Base):
    # Receives each notification as a JSON POST; "" = off.
    url: str = ""
    timeout: PositiveFloat = 5.0


class AlertmanagerSinkConfig(WebhookSinkConfig):
    # `url` is the base URL, e.g. http://alertmanager:9093; alerts go to /api/v2/alerts.
    # Firing alerts are re-sent this often, as Alertmanager expects of its clients.
    resend_interval: PositiveFloat = 60.0
    # Send the always-firing ReliabilitydWatchdog alert every resend_interval while
    # this daemon can judge; route it to a dead man's switch (README: Watchdog).
    watchdog: bool = False


class SinksConfig(Base):
    mqtt: MqttSinkConfig = msgspec.field(default_factory=MqttSinkConfig)
    redis: RedisSinkConfig = msgspec.field(default_factory=RedisSinkConfig)
    alertmanager: AlertmanagerSinkConfig = msgspec.field(default_factory=AlertmanagerSinkConfig)
    webhook: WebhookSinkConfig = msgspec.field(default_factory=WebhookSinkConfig)


class DaemonConfig(Base):
    # Names this daemon's heartbeat key; empty = the host name.
    instance: str = ""
    heartbeat_ttl: PositiveFloat = 15.0
    # Seconds Redis may stay unusable (ingest paused) before the daemon tells the
    # Redis-free sinks (Alertmanager, webhook, MQTT) that it cannot judge.
    blind_after: PositiveFloat = 60.0
    # The log level; "" = the one `run --log-level` gives (INFO by default).
    # A reload (SIGHUP) applies it.
    log_level: Literal["", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = ""


class Config(Base):
    redis: RedisConfig = msgspec.field(default_factory=RedisConfig)
    mqtt: MqttConfig = msgspec.field(default_factory=MqttConfig)
    stream: StreamConfig = msgspec.field(default_factory=StreamConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    ingest: IngestConfig = msgspec.field(default_factory=IngestConfig)
    stats: StatsConfig = msgspec.field(default_factory=StatsConfig)
    suites: list[SuiteOverride] = msgspec.field(default_factory=list)
    daemon: DaemonConfig = msgspec.field(default_factory=DaemonConfig)
    http: HttpConfig = msgspec.field(default_factory=HttpConfig)
    # A table with `compare` is a canary rule (docs/alerts.md), any other a threshold rule.
    alerts: list[Rule | CanaryRule] = msgspec.field(default_factory=list)
    sinks: SinksConfig = msgspec.field(default_factory=SinksConfig)
    # Base URL for links in notifications (Alertmanager generatorURL); "" = none.
    external_url: str = ""
    # Tenants: named suite globs with quotas of suites and dead letters of their own.
    grants: list[GrantConfig] = msgspec.field(default_factory=list)

    def grant_of(self, suite: str) -> GrantConfig | None:
        """The first [[grants]] entry that owns the suite, if any."""
        for grant in self.grants:
            if grant.owns(suite):
                return grant
        return None

    def grant_name(self, suite: str) -> str | None:
        """The name of the grant that owns the suite (its dead letters' stream), if any."""
        grant = self.grant_of(suite)
        return None if grant is None else grant.name

    def grant_named(self, name: str) -> GrantConfig | None:
        return next((g for g in self.grants if g.name == name), None)

    def pool_of(self, suite: str) -> tuple[str, int]:
        """(pool, most): the quota a new suite is counted against.

        A grant with ``max_suites`` is its own pool; every other suite is in
        the shared pool "" of what the quotas leave of ``stats.max_suites``.
        """
        grant = self.grant_of(suite)
        if grant is not None and grant.max_suites is not None:
            return grant.name, grant.max_suites
        return "", self.stats.max_suites - self.reserved_suites

    def suite_refusal(self, suite: str, cap: str) -> str:
        """Why a new suite is not counted, for the cap it met ("pool" or "deployment")."""
        pool, most = self.pool_of(suite)
        if cap == "pool" and pool:
            return (
                f"suite {suite!r} is new and grant {pool!r} already holds its max_suites "
                f"({most}) suites: not counted (raise the grant's max_suites or reset its "
                "unused suites)"
            )
        if cap == "pool" and self.reserved_suites:
            return (
                f"suite {suite!r} is new and the suites of no grant with a quota already "
                f"fill what the quotas leave of stats.max_suites ({most} of "
                f"{self.stats.max_suites}): not counted (give it a grant, or reset unused "
                "suites)"
            )
        return (
            f"suite {suite!r} is new and the deployment already holds stats.max_suites "
            f"({self.stats.max_suites}) suites: not counted (raise stats.max_suites or "
            "reset unused suites)"
        )

    @property
    def reserved_suites(self) -> int:
        return sum(g.max_suites or 0 for g in self.grants)

    def rules(self) -> list[Rule]:
        """The threshold rules (judged on snapshots)."""
        return [a for a in self.alerts if isinstance(a, Rule)]

    def canaries(self) -> list[CanaryRule]:
        """The canary rules (two sides compared, rules.canary)."""
        return [a for a in self.alerts if isinstance(a, CanaryRule)]

    @property
    def alerts_key(self) -> str:
        return self.sinks.redis.key or f"{self.redis.prefix}:alerts"

    @property
    def dedup_ttl(self) -> int:
        return self.store.dedup_ttl or 2 * self.mqtt.session_expiry

    @property
    def instance(self) -> str:
        return self.daemon.instance or socket.gethostname()

    def _override(self, suite: str) -> SuiteOverride | None:
        """The first [[suites]] entry whose glob matches the suite: it alone applies."""
        for override in self.suites:
            if fnmatch.fnmatchcase(suite, override.match):
                return override
        return None

    def suite_settings(self, suite: str) -> tuple[int, float]:
        """(window, min_coverage) for a suite: the first matching [[suites]] wins."""
        o = self._override(suite)
        window = self.stats.window if o is None or o.window is None else o.window
        cov = self.stats.min_coverage if o is None or o.min_coverage is None else o.min_coverage
        return window, cov

    def idle_expiry(self, suite: str) -> float:
        """Seconds without an event after which a task leaves the suite; 0 = never."""
        o = self._override(suite)
        return self.stats.idle_expiry if o is None or o.idle_expiry is None else o.idle_expiry

    def slicing(self, suite: str) -> tuple[tuple[str, ...], int]:
        """(slice_by, max_slices) of a suite: the first matching [[suites]] entry, or stats."""
        o = self._override(suite)
        slice_by = self.stats.slice_by if o is None or o.slice_by is None else o.slice_by
        most = self.stats.max_slices if o is None or o.max_slices is None else o.max_slices
        return tuple(slice_by), most

    def recent(self, suite: str) -> Recent | None:
        """What the suite keeps of its last trials and runs; None when it keeps neither."""
        o = self._override(suite)
        trials = (
            self.stats.recent_trials if o is None or o.recent_trials is None else o.recent_trials
        )
        runs = self.max_runs(suite)
        if trials == 0 and runs == 0:
            return None
        template = self.links(suite)[1]
        return Recent(trials, self.stats.recent_failures, keep_url=not template, runs=runs)

    def max_runs(self, suite: str) -> int:
        """The runs whose per-task counts the suite keeps: the first matching [[suites]]
        entry's, or stats'."""
        o = self._override(suite)
        return self.stats.max_runs if o is None or o.max_runs is None else o.max_runs

    def links(self, suite: str) -> tuple[str, str]:
        """(url_base, url_template) of a suite: the first matching [[suites]] entry, or stats."""
        o = self._override(suite)
        base = self.stats.url_base if o is None or o.url_base is None else o.url_base
        template = (
            self.stats.url_template if o is None or o.url_template is None else o.url_template
        )
        return base, template

    def suite_interval(self, suite: str) -> IntervalName:
        """The CI a suite's estimates use: the first matching [[suites]] entry, or stats."""
        o = self._override(suite)
        return self.stats.interval if o is None or o.interval is None else o.interval
