"""Typed configuration, decoded from TOML by msgspec.

Every key has a default documented in ``config.example.toml``; an unknown key
or a bad value is a ``ConfigError`` naming the file and the field path
(``$.stats.k[0]``), which the CLI turns into exit code 2.
"""

from __future__ import annotations

import fnmatch
import os
import socket
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import unquote, urlsplit

import msgspec

from reliabilityd.alerting.rules import Rule
from reliabilityd.errors import ConfigError
from reliabilityd.stats.intervals import IntervalName

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
Fraction01 = Annotated[float, msgspec.Meta(gt=0, le=1)]


class Base(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Config tables reject keys they do not know: a typo is an error, not a default."""


class RedisConfig(Base):
    url: str = "redis://127.0.0.1:6379/0"
    # Key prefix: keys are <prefix>:{<suite>}:... (several deployments can share a server).
    prefix: Annotated[str, msgspec.Meta(min_length=1, pattern=r"^[^{}\s]+$")] = "rel"
    # Talk to a Redis Cluster (every key of a suite shares one hash tag).
    cluster: bool = False
    # Seconds one Redis call may take before the batch is retried.
    timeout: PositiveFloat = 10.0


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


class SuiteOverride(Base):
    match: Annotated[str, msgspec.Meta(min_length=1)]
    window: NonNegInt | None = None
    min_coverage: Fraction01 | None = None
    idle_expiry: NonNegFloat | None = None
    # The CI of this suite's estimates; None = stats.interval.
    interval: IntervalName | None = None


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


class HttpConfig(Base):
    # 127.0.0.1 by default; anything beyond loopback needs `token`.
    host: str = "127.0.0.1"
    # /metrics, /healthz, /readyz, POST /v1/trials, GET /suites/<suite>; 0 = no HTTP server.
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    # Bearer token POST /v1/trials requires (RELIABILITYD_HTTP_TOKEN overrides); "" = none.
    token: str = ""
    # Seconds a POST may wait for Redis before it is answered 503.
    commit_timeout: PositiveFloat = 10.0


LOOPBACK_HOSTS = frozenset({"localhost", "::1"})


def is_loopback(host: str) -> bool:
    """True when `host` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


class DaemonConfig(Base):
    # Names this daemon's heartbeat key; empty = the host name.
    instance: str = ""
    heartbeat_ttl: PositiveFloat = 15.0
    # Seconds Redis may stay unusable (ingest paused) before the daemon tells the
    # Redis-free sinks (Alertmanager, webhook, MQTT) that it cannot judge.
    blind_after: PositiveFloat = 60.0


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
    alerts: list[Rule] = msgspec.field(default_factory=list)
    sinks: SinksConfig = msgspec.field(default_factory=SinksConfig)
    # Base URL for links in notifications (Alertmanager generatorURL); "" = none.
    external_url: str = ""

    def rules(self) -> list[Rule]:
        return list(self.alerts)

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

    def suite_interval(self, suite: str) -> IntervalName:
        """The CI a suite's estimates use: the first matching [[suites]] entry, or stats."""
        o = self._override(suite)
        return self.stats.interval if o is None or o.interval is None else o.interval


class MqttEndpoint(msgspec.Struct, frozen=True):
    host: str
    port: int
    tls: bool
    username: str | None
    password: str | None


def parse_mqtt_url(url: str) -> MqttEndpoint:
    """mqtt://[user[:password]@]host[:port] or mqtts:// for TLS."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts"):
        raise ValueError(f"scheme must be mqtt:// or mqtts://, got {url.split(':', 1)[0]!r}")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    tls = parts.scheme == "mqtts"
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError as exc:
        raise ValueError(f"bad port: {exc}") from None
    return MqttEndpoint(
        host=parts.hostname,
        port=port,
        tls=tls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


def _check(config: Config, path: str) -> None:
    try:
        parse_mqtt_url(config.mqtt.url)
    except ValueError as exc:
        raise ConfigError(path, "$.mqtt.url", str(exc)) from None
    if urlsplit(config.redis.url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(path, "$.redis.url", "scheme must be redis://, rediss:// or unix://")
    if not config.mqtt.topic:
        raise ConfigError(path, "$.mqtt.topic", "must not be empty")
    if "/" in config.mqtt.shared_group or "+" in config.mqtt.shared_group:
        raise ConfigError(path, "$.mqtt.shared_group", "must not contain '/' or '+'")
    if config.dedup_ttl <= config.mqtt.session_expiry:
        raise ConfigError(
            path,
            "$.store.dedup_ttl",
            f"must exceed mqtt.session_expiry ({config.mqtt.session_expiry} s): a redelivery "
            "after the dedup record expired would be counted twice",
        )
    max_k = max([*config.stats.k, *(a.k for a in config.alerts)])
    # Where the largest k comes from, for the window messages.
    if max_k in config.stats.k:
        k_from = f"k={max_k} (in $.stats.k)"
    else:
        i = next(i for i, a in enumerate(config.alerts) if a.k == max_k)
        k_from = f"k={max_k} ($.alerts[{i}].k, rule {config.alerts[i].name!r})"
    names: set[str] = set()
    for i, alert in enumerate(config.alerts):
        if alert.name in names:
            raise ConfigError(path, f"$.alerts[{i}].name", f"duplicate rule name {alert.name!r}")
        names.add(alert.name)
        if alert.resolve_above is not None and alert.resolve_above < alert.below:
            raise ConfigError(
                path,
                f"$.alerts[{i}].resolve_above",
                f"{alert.resolve_above} is below `below` ({alert.below}): hysteresis needs "
                "resolve_above >= below",
            )
        if alert.trigger == "detector" and alert.metric != "pass^k":
            raise ConfigError(
                path,
                f"$.alerts[{i}].trigger",
                'the detector watches pass^k; use trigger = "ci-low" for pass@k',
            )
        windowed = config.stats.window > 0 or any(o.window for o in config.suites)
        if alert.trigger == "detector" and not windowed:
            raise ConfigError(
                path,
                f"$.alerts[{i}].trigger",
                "the detector reads each task's last outcomes: set stats.window (or a "
                "[[suites]] window) for the suites it watches",
            )
    for field, url in (
        ("$.sinks.alertmanager.url", config.sinks.alertmanager.url),
        ("$.sinks.webhook.url", config.sinks.webhook.url),
        ("$.external_url", config.external_url),
    ):
        if url and urlsplit(url).scheme not in ("http", "https"):
            raise ConfigError(path, field, "must be an http:// or https:// URL")
    if config.http.port and not is_loopback(config.http.host) and not config.http.token:
        raise ConfigError(
            path,
            "$.http.token",
            f"http.host {config.http.host!r} listens beyond loopback: set a bearer token "
            "(http.token or RELIABILITYD_HTTP_TOKEN) or bind 127.0.0.1",
        )
    if 0 < config.stats.window < max_k:
        raise ConfigError(
            path, "$.stats.window", f"window {config.stats.window} is shorter than {k_from}"
        )
    for i, override in enumerate(config.suites):
        if override.window is not None and 0 < override.window < max_k:
            raise ConfigError(
                path,
                f"$.suites[{i}].window",
                f"window {override.window} is shorter than {k_from}",
            )


ENV_OVERRIDES = {
    "RELIABILITYD_REDIS_URL": ("redis", "url"),
    "RELIABILITYD_MQTT_URL": ("mqtt", "url"),
    # Replicas built from one config file (compose, a Kubernetes StatefulSet)
    # differ only by these: each needs its own broker session and heartbeat.
    "RELIABILITYD_MQTT_CLIENT_ID": ("mqtt", "client_id"),
    "RELIABILITYD_INSTANCE": ("daemon", "instance"),
    "RELIABILITYD_HTTP_TOKEN": ("http", "token"),
}


def load(path: str | os.PathLike[str], environ: dict[str, str] | None = None) -> Config:
    """Read, decode and check a config file; environment variables override the URLs."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(name, "", f"cannot read: {exc.strerror}") from None
    try:
        config = msgspec.toml.decode(raw, type=Config)
    except msgspec.ValidationError as exc:
        message, _, field = str(exc).rpartition(" - at `")
        if not message:
            raise ConfigError(name, "", str(exc)) from None
        raise ConfigError(name, field.rstrip("`"), message) from None
    except msgspec.DecodeError as exc:
        raise ConfigError(name, "", f"not valid TOML: {exc}") from None
    env = os.environ if environ is None else environ
    for var, (table, key) in ENV_OVERRIDES.items():
        if env.get(var):
            setattr(getattr(config, table), key, env[var])
    _check(config, name)
    return config
