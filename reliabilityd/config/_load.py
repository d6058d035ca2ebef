"""Loading a config file: TOML decoding, environment overrides, and the checks across keys."""

from __future__ import annotations

import fnmatch
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

from reliabilityd.config._http import HttpConfig, OtlpConfig, is_loopback, parse_networks
from reliabilityd.config._model import Config, TlsConfig
from reliabilityd.config._mqtt import TlsProblem, parse_mqtt_url, tls_context
from reliabilityd.config._tls import HttpTlsProblem, http_tls_context
from reliabilityd.errors import ConfigError
from reliabilityd.names import suite_name_problem
from reliabilityd.rules.canary import CanaryRule, side_parts
from reliabilityd.rules.threshold import Rule
from reliabilityd.stats import ratecusum
from reliabilityd.store import url_problem
from reliabilityd.topics import Binding


def _check(config: Config, path: str, env: Mapping[str, str]) -> None:
    try:
        endpoint = parse_mqtt_url(config.mqtt.url)
    except ValueError as exc:
        raise ConfigError(path, "$.mqtt.url", str(exc)) from None
    if config.mqtt.tls != TlsConfig():
        if not endpoint.tls:
            raise ConfigError(
                path, "$.mqtt.tls", "is set, but mqtt.url is mqtt://: use mqtts:// for TLS"
            )
        try:
            tls_context(config.mqtt)
        except TlsProblem as exc:
            raise ConfigError(path, f"$.mqtt.tls.{exc.field}", exc.message) from None
    if urlsplit(config.redis.url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(path, "$.redis.url", "scheme must be redis://, rediss:// or unix://")
    redis_problem = url_problem(config.redis.url, cluster=config.redis.cluster)
    if redis_problem is not None:
        raise ConfigError(path, "$.redis.url", redis_problem)
    if not config.mqtt.topic:
        raise ConfigError(path, "$.mqtt.topic", "must not be empty")
    if config.mqtt.bind_suite:
        try:
            binding = Binding.parse(config.mqtt.bind_suite)
        except ValueError as exc:
            raise ConfigError(path, "$.mqtt.bind_suite", str(exc)) from None
        missed = binding.uncovered(config.mqtt.topic)
        if missed:
            raise ConfigError(
                path,
                "$.mqtt.topic",
                f"{config.mqtt.topic!r} {missed}: the subscription must receive every topic "
                f"mqtt.bind_suite {config.mqtt.bind_suite!r} binds",
            )
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
        if isinstance(alert, CanaryRule):
            _check_canary(alert, f"$.alerts[{i}]", path, config)
            continue
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
                'the detector watches pass^k; set trigger = "ci-low" for a pass@k rule',
            )
        if alert.trigger == "rate":
            _check_rate(alert, f"$.alerts[{i}]", path, config)
        windowed = config.stats.window > 0 or any(o.window for o in config.suites)
        if alert.trigger == "detector" and not windowed:
            raise ConfigError(
                path,
                f"$.alerts[{i}].trigger",
                "the detector reads each task's last outcomes: set stats.window (or a "
                '[[suites]] window) for the suites it watches, or use trigger = "rate" (the '
                "default), which needs no window",
            )
    for field, url in (
        ("$.sinks.alertmanager.url", config.sinks.alertmanager.url),
        ("$.sinks.webhook.url", config.sinks.webhook.url),
        ("$.external_url", config.external_url),
    ):
        if url and urlsplit(url).scheme not in ("http", "https"):
            raise ConfigError(path, field, "must be an http:// or https:// URL")
    _check_tokens(config.http, path, env)
    _check_grants(config, path)
    if config.http.max_body_bytes < config.ingest.max_payload:
        raise ConfigError(
            path,
            "$.http.max_body_bytes",
            f"{config.http.max_body_bytes} is less than ingest.max_payload "
            f"({config.ingest.max_payload}): a body of the largest size could never be read",
        )
    if (
        config.http.port
        and not is_loopback(config.http.host)
        and not (config.http.token or config.http.tokens)
    ):
        raise ConfigError(
            path,
            "$.http.token",
            f"http.host {config.http.host!r} listens beyond loopback: set a bearer token "
            "(http.token, RELIABILITYD_HTTP_TOKEN or [[http.tokens]]) or bind 127.0.0.1",
        )
    try:
        http_tls_context(config.http)
    except HttpTlsProblem as exc:
        raise ConfigError(path, f"$.http.{exc.field}", exc.message) from None
    _check_otlp(config.http.otlp, path)
    for i, entry in enumerate(config.http.trusted_proxies):
        try:
            parse_networks([entry])
        except ValueError as exc:
            raise ConfigError(path, f"$.http.trusted_proxies[{i}]", str(exc)) from None
    if 0 < config.stats.window < max_k:
        raise ConfigError(
            path, "$.stats.window", f"window {config.stats.window} is shorter than {k_from}"
        )
    for field, slice_by in [("$.stats.slice_by", config.stats.slice_by)] + [
        (f"$.suites[{i}].slice_by", o.slice_by) for i, o in enumerate(config.suites) if o.slice_by
    ]:
        if len(set(slice_by)) != len(slice_by):
            raise ConfigError(path, field, f"names a label twice: {slice_by}")
    for i, override in enumerate(config.suites):
        if override.window is not None and 0 < override.window < max_k:
            raise ConfigError(
                path,
                f"$.suites[{i}].window",
                f"window {override.window} is shorter than {k_from}",
            )


def _check_rate(alert: Rule, at: str, path: str, config: Config) -> None:
    """A rate rule's knobs: pass^k, a threshold worth the name, a hold the ticks see."""
    if alert.metric != "pass^k":
        raise ConfigError(
            path,
            f"{at}.trigger",
            'the rate trigger (the default) watches pass^k; set trigger = "ci-low" for a '
            "pass@k rule",
        )
    h = ratecusum.threshold(alert.knobs())
    if h < 1.0:
        raise ConfigError(
            path,
            f"{at}.budget_days",
            f"{alert.budget_days:g} days with change points every {alert.grid:g} s gives a "
            f"threshold of {h:.2f} nats: a budget of at least {alert.grid / 86400:g} days "
            "is needed",
        )
    if alert.hold < config.stats.ci_interval:
        raise ConfigError(
            path,
            f"{at}.hold",
            f"{alert.hold:g} s is shorter than stats.ci_interval ({config.stats.ci_interval:g} "
            "s): an alarm could pass between two verdicts",
        )
    if alert.for_seconds >= alert.hold:
        raise ConfigError(
            path,
            f"{at}.for",
            f"{alert.for_seconds:g} s is not shorter than hold ({alert.hold:g} s): an alarm "
            "would never hold long enough to fire",
        )


def _check_canary(rule: CanaryRule, field: str, path: str, config: Config) -> None:
    if rule.resolve_margin is not None and rule.resolve_margin > rule.margin:
        raise ConfigError(
            path,
            f"{field}.resolve_margin",
            f"{rule.resolve_margin} exceeds `margin` ({rule.margin}): hysteresis needs "
            "resolve_margin <= margin",
        )
    (b_suite, b_labels), (c_suite, c_labels) = (
        side_parts(rule.compare.baseline),
        side_parts(rule.compare.candidate),
    )
    if (b_suite is None) != (c_suite is None):
        named = "baseline" if b_suite is not None else "candidate"
        other = "candidate" if named == "baseline" else "baseline"
        raise ConfigError(
            path,
            f"{field}.compare.{other}",
            f"names no suite while the {named} does: name the suite on both sides "
            "(two suites) or on neither (two slices of each suite `suite` matches)",
        )
    if b_suite is not None and rule.suite is not None:
        raise ConfigError(
            path,
            f"{field}.suite",
            "both sides name their suite: leave `suite` out (the state lives under the "
            "candidate suite)",
        )
    for side, suite in (("baseline", b_suite), ("candidate", c_suite)):
        problem = None if suite is None else suite_name_problem(suite)
        if problem is not None:
            raise ConfigError(path, f"{field}.compare.{side}.suite", problem)
    if (b_suite, b_labels) == (c_suite, c_labels):
        raise ConfigError(
            path, f"{field}.compare", "baseline and candidate are the same side: nothing to compare"
        )
    for side, suite, labels in (("baseline", b_suite, b_labels), ("candidate", c_suite, c_labels)):
        sliced_by, where = _sliced_by(config, suite, rule.suite or "*")
        missing = sorted({key for key, _ in labels} - sliced_by)
        if missing:
            raise ConfigError(
                path,
                f"{field}.compare.{side}",
                f"filters by {', '.join(missing)}, and {where} not sliced by "
                f"{'it' if len(missing) == 1 else 'them'}: add it to stats.slice_by or to "
                "the slice_by of a [[suites]] entry that matches",
            )


def _sliced_by(config: Config, suite: str | None, pattern: str) -> tuple[set[str], str]:
    """The label keys a canary side may filter by, and what they are of (for the message).

    A named suite: its own ``slice_by``. Else: ``stats.slice_by`` and the
    ``slice_by`` of every ``[[suites]]`` entry whose pattern overlaps the
    rule's glob (either one matches the other).
    """
    if suite is not None:
        return set(config.slicing(suite)[0]), f"suite {suite!r} is"
    keys = set(config.stats.slice_by)
    for o in config.suites:
        if o.slice_by and (
            fnmatch.fnmatchcase(o.match, pattern) or fnmatch.fnmatchcase(pattern, o.match)
        ):
            keys.update(o.slice_by)
    return keys, f"the suites matching {pattern!r} are"


def _check_tokens(http: HttpConfig, path: str, env: Mapping[str, str]) -> None:
    """Each ``[[http.tokens]]`` entry: one token (inline or from its variable), unique,
    granting something. Reads the variables, so the daemon holds the values."""
    seen = {http.token} if http.token else set()
    for i, entry in enumerate(http.tokens):
        field = f"$.http.tokens[{i}]"
        if bool(entry.token) == bool(entry.token_env):
            raise ConfigError(path, field, "set one of `token` and `token_env`")
        if entry.token_env:
            value = env.get(entry.token_env, "")
            if not value:
                raise ConfigError(
                    path, f"{field}.token_env", f"environment variable {entry.token_env} is unset"
                )
            entry.token = value
        if entry.token in seen:
            raise ConfigError(path, field, "the same token is given twice: tokens must differ")
        seen.add(entry.token)
        if not entry.grant and not entry.read:  # neither a grant nor globs to read
            raise ConfigError(path, field, "grants nothing: name a `grant` or give `read` globs")


def _check_grants(config: Config, path: str) -> None:
    """Grant names unique and known to the tokens naming them; quotas within the cap."""
    names: set[str] = set()
    for i, grant in enumerate(config.grants):
        if grant.name in names:
            raise ConfigError(path, f"$.grants[{i}].name", f"duplicate grant name {grant.name!r}")
        names.add(grant.name)
    for i, entry in enumerate(config.http.tokens):
        if entry.grant and entry.grant not in names:
            raise ConfigError(
                path, f"$.http.tokens[{i}].grant", f"no [[grants]] entry is named {entry.grant!r}"
            )
    reserved = 0
    for i, grant in enumerate(config.grants):
        reserved += grant.max_suites or 0
        if reserved > config.stats.max_suites:
            raise ConfigError(
                path,
                f"$.grants[{i}].max_suites",
                f"the grants' quotas reach {reserved} suites, past stats.max_suites "
                f"({config.stats.max_suites}): quotas are reservations within it",
            )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _check_otlp(otlp: OtlpConfig, path: str) -> None:
    if otlp.enabled and not _importable("opentelemetry.proto"):
        raise ConfigError(
            path,
            "$.http.otlp.enabled",
            "POST /v1/logs needs the OTLP messages: pip install 'reliabilityd[otlp]'",
        )
    seen: dict[str, str] = {}
    for field in ("pass_labels", "fail_labels", "error_labels", "skip_labels"):
        for label in getattr(otlp, field):
            other = seen.setdefault(label.lower(), field)
            if other != field:
                raise ConfigError(
                    path, f"$.http.otlp.{field}", f"label {label!r} is also in {other}"
                )
    for field in ("suite", "task", "trial"):
        if not getattr(otlp, field):
            raise ConfigError(path, f"$.http.otlp.{field}", "needs at least one source")


def _kinds(doc: object) -> object:
    """Each ``[[alerts]]`` table's kind, from its keys: ``compare`` makes a canary rule."""
    alerts = doc.get("alerts") if isinstance(doc, dict) else None
    if isinstance(alerts, list):
        for table in alerts:
            if isinstance(table, dict) and "kind" not in table:
                table["kind"] = "canary" if "compare" in table else "threshold"
    return doc


ENV_OVERRIDES = {
    "RELIABILITYD_REDIS_URL": ("redis", "url"),
    "RELIABILITYD_MQTT_URL": ("mqtt", "url"),
    # Replicas built from one config file (compose, a Kubernetes StatefulSet)
    # differ only by these: each needs its own broker session and heartbeat.
    "RELIABILITYD_MQTT_CLIENT_ID": ("mqtt", "client_id"),
    "RELIABILITYD_INSTANCE": ("daemon", "instance"),
    "RELIABILITYD_HTTP_TOKEN": ("http", "token"),
}


def check(config: Config, path: str, environ: Mapping[str, str] | None = None) -> None:
    """The checks across keys that ``load`` runs, on a config built otherwise (a reload's).

    ConfigError naming ``path`` and the field.
    """
    _check(config, path, os.environ if environ is None else environ)


def load(path: str | os.PathLike[str], environ: dict[str, str] | None = None) -> Config:
    """Read, decode and check a config file; environment variables override the URLs."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(name, "", f"cannot read: {exc.strerror}") from None
    try:
        config = msgspec.convert(_kinds(msgspec.toml.decode(raw)), Config)
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
    _check(config, name, env)
    return config
