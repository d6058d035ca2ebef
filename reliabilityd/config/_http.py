"""The HTTP edge's tables: the port and its limits, tokens, grants (tenants) and OTLP."""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Iterable
from typing import Annotated

import msgspec

from reliabilityd.config._types import Base, PositiveFloat, PositiveInt, ProxyEntry
from reliabilityd.names import record_template_problem

# Where a trial's name comes from in an OTLP log record: "attribute:<key>" (the
# record's own attributes) or "resource:<key>" (its resource's).
OtlpSource = Annotated[str, msgspec.Meta(pattern=r"^(attribute|resource):\S.*$")]


class OtlpConfig(Base):
    """How POST /v1/logs maps OpenTelemetry evaluation events to trials (docs/opentelemetry.md)."""

    # Serve POST /v1/logs (needs `pip install 'reliabilityd[otlp]'`).
    enabled: bool = False
    # Records of this event (LogRecord.event_name, or the `event.name` attribute)
    # are trials; other records are accepted and ignored.
    event_name: str = "gen_ai.evaluation.result"
    # Each name from the first of its sources that the record has.
    suite: list[OtlpSource] = msgspec.field(default_factory=lambda: ["resource:service.name"])
    task: list[OtlpSource] = msgspec.field(
        default_factory=lambda: ["attribute:gen_ai.evaluation.name"]
    )
    trial: list[OtlpSource] = msgspec.field(
        default_factory=lambda: ["attribute:gen_ai.response.id"]
    )
    # The verdict: an `error_attribute` present means error; else the label
    # (case-insensitive) in one of these lists; else the score against
    # `pass_score`; else the record is dead-lettered, never guessed.
    error_attribute: str = "error.type"
    label_attribute: str = "gen_ai.evaluation.score.label"
    score_attribute: str = "gen_ai.evaluation.score.value"
    pass_labels: list[str] = msgspec.field(
        default_factory=lambda: ["pass", "passed", "true", "correct", "yes"]
    )
    fail_labels: list[str] = msgspec.field(
        default_factory=lambda: ["fail", "failed", "false", "incorrect", "no"]
    )
    error_labels: list[str] = msgspec.field(default_factory=lambda: ["error"])
    skip_labels: list[str] = msgspec.field(default_factory=list)
    # Evaluation name -> the score at or above which it passes ("*": any
    # evaluation). Empty: a score without a known label is no verdict.
    pass_score: dict[str, float] = msgspec.field(default_factory=dict)
    # The trial's run, from the first of these sources the record has ([] = none).
    run: list[OtlpSource] = msgspec.field(default_factory=list)
    # The trial's link, built from the record: {trace_id} and {span_id} (hex, as
    # trace viewers show them), {attribute:KEY} and {resource:KEY}; "" = none.
    # Langfuse: "https://cloud.langfuse.com/project/<project>/traces/{trace_id}";
    # Jaeger: "http://jaeger:16686/trace/{trace_id}" (docs/opentelemetry.md).
    link_template: str = ""

    def __post_init__(self) -> None:
        if self.link_template:
            problem = record_template_problem(self.link_template)
            if problem:
                raise ValueError(f"link_template: {problem}")


# A grant's name: it names Redis keys (its dead-letter stream), so plain characters only.
GrantName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
Glob = Annotated[str, msgspec.Meta(min_length=1)]


class GrantConfig(Base):
    """``[[grants]]``: a tenant, named, with the suites it owns and its share of them.

    A suite belongs to the first grant whose ``suites`` globs match it, from
    whichever source its events arrive (MQTT carries no token). With
    ``max_suites`` the grant holds a reservation: at most that many of its
    suites, and places no other grant can take (the quotas must sum to at
    most ``stats.max_suites``; suites of no grant with a quota share the
    rest). Its dead letters have a stream of their own (docs/security.md).
    """

    name: GrantName
    suites: Annotated[list[Glob], msgspec.Meta(min_length=1)]
    max_suites: PositiveInt | None = None

    def owns(self, suite: str) -> bool:
        return any(g == "*" or fnmatch.fnmatchcase(suite, g) for g in self.suites)


class HttpToken(Base):
    """``[[http.tokens]]``: a bearer token of one grant, or for reads only (daemon.auth)."""

    # The token itself, or the environment variable holding it (one of the two).
    token: str = ""
    token_env: str = ""
    # The [[grants]] entry it writes for (its suites); "" = it writes nothing.
    # Rotating a token keeps the grant, its suites and its quota.
    grant: str = ""
    # Globs (fnmatch, as [[suites]] match) of the suites it may read; unset = its
    # grant's, [] = none.
    read: list[Glob] | None = None


class HttpConfig(Base):
    # 127.0.0.1 by default; anything beyond loopback needs `token` or `tokens`.
    host: str = "127.0.0.1"
    # /metrics, /healthz, /readyz, POST /v1/trials, GET /suites/<suite>, the web UI;
    # 0 = no HTTP server.
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    # The all-suites bearer token: writes need it, and so do reads beyond
    # loopback (RELIABILITYD_HTTP_TOKEN overrides); "" = none.
    token: str = ""
    # Tokens allowed some suites only, for writes and for reads.
    tokens: list[HttpToken] = msgspec.field(default_factory=list)
    # /metrics without a token beyond loopback (for scrapers that cannot send
    # one): it shows every suite's name and numbers.
    metrics_open: bool = False
    # Seconds a POST may wait for Redis before it is answered 503.
    commit_timeout: PositiveFloat = 10.0
    # POST /v1/logs: OpenTelemetry evaluation events as trials.
    otlp: OtlpConfig = msgspec.field(default_factory=OtlpConfig)
    # Seconds a connection may take to send a whole request (headers and body),
    # and may stay idle between requests, before it is closed (slow clients).
    read_timeout: PositiveFloat = 10.0
    # Open connections at most; past it a new one is answered 503 and closed.
    # Keep it well under the process's file limit (deploy/reliabilityd.service).
    max_connections: PositiveInt = 256
    # Requests one client address may have unfinished (connected, or still
    # sending headers or a body) for more than a second; past it its oldest
    # such connection is closed. Delivered requests and idle kept-alive
    # connections never count, so producers sending whole requests never meet it.
    max_pending_per_address: PositiveInt = 64
    # POST /v1/trials, /v1/logs and /readyz requests handled at once, each
    # once its body is read; past it 503 with Retry-After, so HTTP load cannot
    # take the Redis connections MQTT ingest uses.
    max_inflight: PositiveInt = 32
    # Bytes of request bodies buffered at once, being read or committed; a
    # body that finds no room closes the slow bodies still being read (older
    # than a second), else is answered 503 with Retry-After. At least
    # ingest.max_payload.
    max_body_bytes: PositiveInt = 64 << 20
    # PEM certificate (chain) and private key: the port serves HTTPS; "" = plain HTTP.
    tls_cert: str = ""
    tls_key: str = ""
    # Reverse proxies in front of the port (addresses or CIDR networks): only a
    # request from one of these has its X-Forwarded-For believed, for the
    # client address the token form's throttling counts by (docs/security.md).
    trusted_proxies: Annotated[list[ProxyEntry], msgspec.Meta(max_length=256)] = msgspec.field(
        default_factory=list
    )


LOOPBACK_HOSTS = frozenset({"localhost", "::1"})
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(entries: Iterable[str]) -> list[Network]:
    """Addresses or CIDR networks (``10.0.0.5``, ``10.0.0.0/8``, ``fd00::/8``); ValueError
    naming the first entry that is neither."""
    out: list[Network] = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or a network (CIDR)") from None
    return out


def is_loopback(host: str) -> bool:
    """True when `host` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")
