"""Typed configuration, decoded from TOML by msgspec.

Every key has a default documented in ``config.example.toml``; an unknown key
or a bad value is a ``ConfigError`` naming the file and the field path
(``$.stats.k[0]``), which the CLI turns into exit code 2. ``_model`` holds
the tables and keys (``_http`` the HTTP edge's, ``_types`` what every table
shares), ``_load`` the file loading and the checks across keys, ``_mqtt``
the broker URL and TLS context.
"""

from __future__ import annotations

from reliabilityd.config._http import (
    LOOPBACK_HOSTS,
    GrantConfig,
    HttpConfig,
    HttpToken,
    OtlpConfig,
    is_loopback,
    parse_networks,
)
from reliabilityd.config._load import ENV_OVERRIDES, check, load
from reliabilityd.config._model import (
    AlertmanagerSinkConfig,
    Config,
    DaemonConfig,
    IngestConfig,
    MqttConfig,
    MqttSinkConfig,
    RedisConfig,
    RedisSinkConfig,
    SinksConfig,
    StatsConfig,
    StoreConfig,
    StreamConfig,
    SuiteOverride,
    TlsConfig,
    WebhookSinkConfig,
)
from reliabilityd.config._mqtt import MqttEndpoint, TlsProblem, parse_mqtt_url, tls_context
from reliabilityd.config._tls import HttpTlsProblem, http_tls_context

__all__ = [
    "ENV_OVERRIDES",
    "LOOPBACK_HOSTS",
    "AlertmanagerSinkConfig",
    "Config",
    "DaemonConfig",
    "GrantConfig",
    "HttpConfig",
    "HttpTlsProblem",
    "HttpToken",
    "IngestConfig",
    "MqttConfig",
    "MqttEndpoint",
    "MqttSinkConfig",
    "OtlpConfig",
    "RedisConfig",
    "RedisSinkConfig",
    "SinksConfig",
    "StatsConfig",
    "StoreConfig",
    "StreamConfig",
    "SuiteOverride",
    "TlsConfig",
    "TlsProblem",
    "WebhookSinkConfig",
    "check",
    "http_tls_context",
    "is_loopback",
    "load",
    "parse_mqtt_url",
    "parse_networks",
    "tls_context",
]
