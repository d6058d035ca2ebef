"""Configuration: the example loads, errors name the file and field, exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reliabilityd.config import Config, load, parse_mqtt_url
from reliabilityd.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_example_config_loads_with_the_documented_defaults() -> None:
    cfg = load(ROOT / "config.example.toml", environ={})
    defaults = Config()
    assert cfg == defaults
    assert cfg.stats.k == [1, 5]
    assert cfg.stats.ci_interval == 5.0
    assert cfg.mqtt.topic == "reliability/trials/#"
    assert cfg.dedup_ttl == 2 * cfg.mqtt.session_expiry


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("[stats]\nk = [1, 0]\n", "$.stats.k[1]", ">= 1"),
        ("[stats]\nk = 'five'\n", "$.stats.k", "Expected `array`"),
        ("[stats]\nwindoww = 3\n", "$.stats", "unknown field `windoww`"),
        ("[mqtt]\nurl = 'http://x'\n", "$.mqtt.url", "mqtt://"),
        ("[mqtt]\nprotocol = '4'\n", "$.mqtt.protocol", "Invalid enum"),
        ("[stats]\nk = [1, 5]\nwindow = 3\n", "$.stats.window", "shorter than k=5"),
        (
            "[stats]\nk = [2]\n[[suites]]\nmatch = 'a*'\n[[suites]]\nmatch = 'b'\nwindow = 1\n",
            "$.suites[1].window",
            "shorter than k=2",
        ),
        ("[store]\ndedup_ttl = 60\n", "$.store.dedup_ttl", "must exceed"),
        ("[http]\nmax_body_bytes = 1000\n", "$.http.max_body_bytes", "less than ingest.max"),
        ("[stats]\nmin_coverage = 0\n", "$.stats.min_coverage", "> 0"),
        ("[redis]\nurl = 'mysql://x'\n", "$.redis.url", "scheme"),
        ("[redis]\nmax_connections = 0\n", "$.redis.max_connections", ">= 1"),
        ("[redis]\nurl = 'redis://h/0?foo=1'\n", "$.redis.url", "unknown query parameter 'foo'"),
        ("[redis]\nurl = 'redis://h/0?socket_timeout=x'\n", "$.redis.url", "'socket_timeout'"),
        (
            "[stats]\nmax_suites = 10\n[[grants]]\nname = 'a'\nsuites = ['a-*']\nmax_suites = 6\n"
            "[[grants]]\nname = 'b'\nsuites = ['b-*']\nmax_suites = 5\n",
            "$.grants[1].max_suites",
            "quotas reach 11 suites, past stats.max_suites (10)",
        ),
        (
            "[[grants]]\nname = 'a'\nsuites = ['a-*']\n[[grants]]\nname = 'a'\nsuites = ['b']\n",
            "$.grants[1].name",
            "duplicate grant name 'a'",
        ),
        ("[[grants]]\nname = 'a b'\nsuites = ['a-*']\n", "$.grants[0].name", "matching regex"),
        ("[[grants]]\nname = 'a'\nsuites = []\n", "$.grants[0].suites", "length >= 1"),
        (
            "[[grants]]\nname = 'a'\nsuites = ['a-*']\n[[http.tokens]]\ntoken = 't'\ngrant = 'b'\n",
            "$.http.tokens[0].grant",
            "no [[grants]] entry is named 'b'",
        ),
        ("[[http.tokens]]\ntoken = 't'\n", "$.http.tokens[0]", "name a `grant` or give `read`"),
    ],
)
def test_bad_values_name_the_file_and_field(
    tmp_path: Path, text: str, field: str, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load(path, environ={})
    assert info.value.field == field
    assert str(path) in str(info.value)
    assert words in str(info.value)


def test_not_toml(tmp_path: Path) -> None:
    path = write(tmp_path, "[stats\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(path, environ={})


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "nope.toml", environ={})


def test_suite_overrides_first_match_wins(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[stats]\nk = [2]\nwindow = 0\nmin_coverage = 1.0\n"
        "[[suites]]\nmatch = 'deploy-*'\nwindow = 50\n"
        "[[suites]]\nmatch = 'deploy-bot'\nwindow = 7\nmin_coverage = 0.5\n"
        "[[suites]]\nmatch = 'ci-*'\nmin_coverage = 0.9\n",
    )
    cfg = load(path, environ={})
    assert cfg.suite_settings("deploy-bot") == (50, 1.0)
    assert cfg.suite_settings("ci-x") == (0, 0.9)
    assert cfg.suite_settings("other") == (0, 1.0)


def test_environment_overrides_urls(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    cfg = load(
        path,
        environ={
            "RELIABILITYD_REDIS_URL": "redis://cache:6380/2",
            "RELIABILITYD_MQTT_URL": "mqtts://u:p%40ss@broker:8883",
        },
    )
    assert cfg.redis.url == "redis://cache:6380/2"
    endpoint = parse_mqtt_url(cfg.mqtt.url)
    assert (endpoint.host, endpoint.port, endpoint.tls) == ("broker", 8883, True)
    assert (endpoint.username, endpoint.password) == ("u", "p@ss")


def test_cli_exits_2_with_file_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "[stats]\nn_boot = -1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "reliabilityd", "run", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert str(path) in proc.stderr
    assert "$.stats.n_boot" in proc.stderr


def test_alert_rules_decode_with_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'external_url = "https://rel.example"\n'
        "[stats]\nwindow = 20\n"
        "[[alerts]]\nname = 'deploy'\nk = 5\nbelow = 0.75\nfor = 30\n"
        "[[alerts]]\nname = 'canary'\nsuite = 'canary-*'\nmetric = 'pass@k'\nk = 1\n"
        "below = 0.5\nresolve_above = 0.6\nstale_after = 600\non_unknown = 'alert'\n"
        "trigger = 'ci-low'\n",
    )
    cfg = load(path, environ={})
    deploy, canary = cfg.rules()
    assert (deploy.suite, deploy.metric, deploy.for_seconds, deploy.resolve_at) == (
        "*",
        "pass^k",
        30.0,
        0.75,
    )
    assert (deploy.min_tasks, deploy.repeat, deploy.on_unknown, deploy.severity) == (
        1,
        0.0,
        "ignore",
        "page",
    )
    assert (canary.resolve_at, canary.stale_after, canary.on_unknown) == (0.6, 600.0, "alert")
    assert (deploy.trigger, canary.trigger) == ("rate", "ci-low")
    assert cfg.alerts_key == "rel:alerts"


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (
            "[[alerts]]\nname = 'a'\nk = 5\nbelow = 0.8\nresolve_above = 0.7\n",
            "$.alerts[0].resolve_above",
            "hysteresis",
        ),
        ("[[alerts]]\nname = 'a'\nk = 5\nbelow = 1.5\n", "$.alerts[0].below", "<= 1"),
        ("[[alerts]]\nname = 'a'\nbelow = 0.5\n", "$.alerts[0]", "missing required field `k`"),
        ("[[alerts]]\nname = 'a/b'\nk = 1\nbelow = 0.5\n", "$.alerts[0].name", "matching regex"),
        (
            "[stats]\nwindow = 5\n" + "[[alerts]]\nname = 'a'\nk = 1\nbelow = 0.5\n" * 2,
            "$.alerts[1].name",
            "duplicate",
        ),
        ("[[alerts]]\nname = 'a'\nk = 1\nbelow = 0.5\nfor = -1\n", "$.alerts[0].for", ">= 0"),
        (
            "[stats]\nk = [1]\nwindow = 4\n[[alerts]]\nname = 'a'\nk = 5\nbelow = 0.5\n",
            "$.stats.window",
            "shorter than k=5",
        ),
        (
            "[[alerts]]\nname = 'a'\nk = 5\nbelow = 0.5\ntrigger = 'detector'\n",
            "$.alerts[0].trigger",
            "set stats.window",
        ),
        (
            "[[alerts]]\nname = 'a'\nk = 5\nbelow = 0.5\ntrigger = 'detector'\n",
            "$.alerts[0].trigger",
            "the detector reads each task's last outcomes: set stats.window (or a "
            '[[suites]] window) for the suites it watches, or use trigger = "rate" (the '
            "default), which needs no window",
        ),
        (
            "[stats]\nwindow = 20\n[[alerts]]\nname = 'a'\nk = 1\nbelow = 0.5\nmetric = 'pass@k'\n",
            "$.alerts[0].trigger",
            'set trigger = "ci-low" for a pass@k rule',
        ),
        ("[sinks.alertmanager]\nurl = 'am:9093'\n", "$.sinks.alertmanager.url", "http"),
        ("[sinks.smtp]\nurl = 'x'\n", "$.sinks", "unknown field `smtp`"),
    ],
)
def test_bad_alert_config(tmp_path: Path, text: str, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text), environ={})
    assert info.value.field == field
    assert words in str(info.value)


def test_cis_are_computed_for_every_k_a_rule_names(tmp_path: Path) -> None:
    from reliabilityd.daemon._daemon import Daemon

    cfg = load(
        write(
            tmp_path,
            "[stats]\nk = [1, 3]\n[[alerts]]\nname = 'a'\nk = 7\nbelow = 0.5\ntrigger = 'ci-low'\n",
        ),
        environ={},
    )
    daemon = Daemon(cfg)
    assert daemon.recompute.ks() == (1, 3, 7)
    assert daemon.recompute.settings("any").ks == (1, 3, 7)


@pytest.mark.parametrize("command", ["status", "tasks", "rejected"])
def test_a_redis_url_with_an_unknown_query_parameter_is_a_usage_error(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from reliabilityd.cli._main import main

    argv = [command, "--redis", "redis://user:Sekr1t@127.0.0.1:1/0?foo=1"]
    if command == "tasks":
        argv.append("suite")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown query parameter 'foo'" in err
    assert "Traceback" not in err
    assert "Sekr1t" not in err


def test_the_redis_url_check_accepts_what_redis_py_takes() -> None:
    from reliabilityd.store import url_problem

    for url in (
        "redis://h:6379/0",
        "redis://h/0?socket_timeout=3&client_name=x&max_connections=4",
        "rediss://h/0?ssl_cert_reqs=none",
        "unix:///run/redis.sock?db=2",
    ):
        assert url_problem(url) is None, url
    assert url_problem("redis://h/0?ssl_cert_reqs=none") is not None  # only rediss:// has it


def test_a_suite_is_counted_against_the_first_grant_that_owns_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[stats]\nmax_suites = 10\n"
        "[[grants]]\nname = 'a'\nsuites = ['team-a-*']\nmax_suites = 4\n"
        "[[grants]]\nname = 'wide'\nsuites = ['team-*']\n"
        "[[grants]]\nname = 'b'\nsuites = ['team-b-*']\nmax_suites = 3\n",
    )
    cfg = load(path, environ={})
    assert cfg.pool_of("team-a-1") == ("a", 4)
    # "wide" owns team-b-* first and has no quota: the shared pool of what is left.
    assert cfg.pool_of("team-b-1") == ("", 3)
    assert cfg.grant_name("team-b-1") == "wide"
    assert cfg.pool_of("other") == ("", 3)
    assert cfg.grant_name("other") is None


def test_max_runs_is_per_suite_and_bounded(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[stats]\nmax_runs = 5\nrecent_trials = 0\n"
        "[[suites]]\nmatch = '*@*'\nmax_runs = 50\n"
        "[[suites]]\nmatch = 'none-*'\nmax_runs = 0\n",
    )
    cfg = load(path, environ={})
    assert (cfg.max_runs("gsm8k@gpt"), cfg.max_runs("other"), cfg.max_runs("none-x")) == (50, 5, 0)
    recent = cfg.recent("gsm8k@gpt")
    assert recent is not None
    assert (recent.trials, recent.runs) == (0, 50)
    assert cfg.recent("none-x") is None  # neither recent trials nor runs: nothing logged


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[stats]\nmax_runs = 1001\n", "$.stats.max_runs"),
        ("[stats]\nmax_runs = -1\n", "$.stats.max_runs"),
        ("[stats]\nmax_runs = 'many'\n", "$.stats.max_runs"),
        ("[[suites]]\nmatch = 'x'\nmax_runs = 2000\n", "$.suites[0].max_runs"),
    ],
)
def test_a_bad_max_runs_exits_2_naming_file_and_field(
    tmp_path: Path, text: str, field: str
) -> None:
    path = write(tmp_path, text)
    proc = subprocess.run(
        [sys.executable, "-m", "reliabilityd", "run", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(path) in proc.stderr
    assert field in proc.stderr
