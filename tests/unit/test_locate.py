"""Every command and client finds the deployment the same way (``reliabilityd.locate``).

The order: the flag or the URL given, the environment variable, the ``-c``
config when the file sets the URL, the running embedded daemon's
endpoints.json, the default. The e2e twin (tests/e2e/test_find_embedded.py)
runs each verb and client against a real ``run --embedded``.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

from reliabilityd import AsyncClient, Client, Emitter, locate
from reliabilityd.cli._common import Exit, mqtt_target, redis_target
from reliabilityd.cli._main import build_parser, main
from reliabilityd.cli._ui import ui_url

# Every verb that reads or writes Redis.
REDIS_VERBS = [
    ["status"],
    ["cases", "s"],
    ["tasks", "s"],
    ["reset", "s"],
    ["forget", "s", "t"],
    ["forecast"],
    ["rejected"],
    ["check"],
    ["import", "file.json"],
    ["compare", "a", "b"],
    ["gate", "s", "--at-least", "0.5"],
    ["history", "s"],
    ["endpoints"],
]
# Every verb that publishes to the broker, or names it.
MQTT_VERBS = [["emit", "s", "t", "pass"], ["endpoints"]]

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
DEFAULT_MQTT = "mqtt://127.0.0.1:1883"


@contextlib.contextmanager
def embedded_daemon(data: Path, redis_port: int, mqtt_port: int = 1884) -> Iterator[Path]:
    """A data directory as a running embedded daemon leaves it: endpoints.json, the lock held."""
    datadir = data / "reliabilityd"
    datadir.mkdir(parents=True)
    (datadir / "endpoints.json").write_text(
        f'{{"redis": {redis_port}, "mqtt": {mqtt_port}, "http": 9781}}'
    )
    with (datadir / "lock").open("a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield datadir


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("RELIABILITYD_REDIS_URL", raising=False)
    monkeypatch.delenv("RELIABILITYD_MQTT_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


def target(*argv: str) -> tuple[str, str]:
    t = redis_target(build_parser().parse_args(list(argv)))
    return t.url, t.describe()


def broker(*argv: str) -> tuple[str, str]:
    where = mqtt_target(build_parser().parse_args(list(argv)))
    return where.url, str(where)


def configs(where: Path) -> tuple[Path, Path]:
    with_url = where / "with-url.toml"
    with_url.write_text(
        '[redis]\nurl = "redis://config-host:6379/0"\n[mqtt]\nurl = "mqtt://config-host:1883"\n'
    )
    without_url = where / "without-url.toml"
    without_url.write_text("[daemon]\nheartbeat_ttl = 20.0\n")
    return with_url, without_url


@pytest.mark.parametrize("verb", REDIS_VERBS, ids=lambda v: v[0])
def test_every_verb_finds_redis_in_the_same_order(
    verb: list[str], env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_url, without_url = configs(env)
    datadir = env / "data" / "reliabilityd"
    nothing = f"the default; no embedded daemon runs in {datadir}"

    assert target(*verb) == (DEFAULT_REDIS, f"{DEFAULT_REDIS} ({nothing})")
    assert target(*verb, "-c", str(without_url))[0] == DEFAULT_REDIS
    with embedded_daemon(env / "data", 40001):
        embedded = "redis://127.0.0.1:40001/0"
        assert target(*verb) == (embedded, f"{embedded} (the embedded daemon in {datadir})")
        # A config without [redis] url leaves the running daemon found.
        assert target(*verb, "-c", str(without_url))[0] == embedded
        assert target(*verb, "-c", str(with_url)) == (
            "redis://config-host:6379/0",
            f"redis://config-host:6379/0 (from {with_url})",
        )
        monkeypatch.setenv("RELIABILITYD_REDIS_URL", "redis://env-host:6379/1")
        assert target(*verb, "-c", str(with_url))[1] == (
            "redis://env-host:6379/1 ($RELIABILITYD_REDIS_URL)"
        )
        assert target(*verb, "-c", str(with_url), "--redis", "redis://flag:1/0")[1] == (
            "redis://flag:1/0 (--redis)"
        )


@pytest.mark.parametrize("verb", MQTT_VERBS, ids=lambda v: v[0])
def test_every_verb_finds_the_broker_in_the_same_order(
    verb: list[str], env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_url, without_url = configs(env)
    datadir = env / "data" / "reliabilityd"

    assert broker(*verb) == (
        DEFAULT_MQTT,
        f"{DEFAULT_MQTT} (the default; no embedded daemon runs in {datadir})",
    )
    with embedded_daemon(env / "data", 40001, 40002):
        embedded = "mqtt://127.0.0.1:40002"
        assert broker(*verb) == (embedded, f"{embedded} (the embedded daemon in {datadir})")
        assert broker(*verb, "-c", str(without_url))[0] == embedded
        assert broker(*verb, "-c", str(with_url)) == (
            "mqtt://config-host:1883",
            f"mqtt://config-host:1883 (from {with_url})",
        )
        monkeypatch.setenv("RELIABILITYD_MQTT_URL", "mqtt://env-host:1884")
        assert broker(*verb, "-c", str(with_url))[1] == (
            "mqtt://env-host:1884 ($RELIABILITYD_MQTT_URL)"
        )
        assert broker(*verb, "-c", str(with_url), "--mqtt", "mqtt://flag:1")[1] == (
            "mqtt://flag:1 (--mqtt)"
        )


def test_the_http_address_comes_from_the_config_else_the_embedded_daemon(env: Path) -> None:
    served = env / "served.toml"
    served.write_text('external_url = "https://rel.example.com/"\n')
    _, without_url = configs(env)
    assert ui_url(None) is None
    assert ui_url(str(without_url)) is None
    with embedded_daemon(env / "data", 40001) as datadir:
        assert ui_url(None) == locate.Located(
            "http://127.0.0.1:9781", f"the embedded daemon in {datadir}"
        )
        assert ui_url(str(without_url)) == ui_url(None)
        assert ui_url(str(served)) == locate.Located("https://rel.example.com", f"from {served}")


def test_the_clients_find_redis_and_the_broker_as_the_commands_do(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    datadir = env / "data" / "reliabilityd"
    nothing = f"the default; no embedded daemon runs in {datadir}"

    def wheres() -> list[locate.Located]:
        # Neither connects before its first call: these only find.
        with Client() as client:
            found = [client.where, AsyncClient().where]
        return [*found, Emitter().where]

    assert wheres() == [
        locate.Located(DEFAULT_REDIS, nothing),
        locate.Located(DEFAULT_REDIS, nothing),
        locate.Located(DEFAULT_MQTT, nothing),
    ]
    with embedded_daemon(env / "data", 40001, 40002):
        embedded = f"the embedded daemon in {datadir}"
        assert wheres() == [
            locate.Located("redis://127.0.0.1:40001/0", embedded),
            locate.Located("redis://127.0.0.1:40001/0", embedded),
            locate.Located("mqtt://127.0.0.1:40002", embedded),
        ]
        monkeypatch.setenv("RELIABILITYD_REDIS_URL", "redis://env-host:6379/1")
        monkeypatch.setenv("RELIABILITYD_MQTT_URL", "mqtt://env-host:1884")
        assert [str(w) for w in wheres()] == [
            "redis://env-host:6379/1 ($RELIABILITYD_REDIS_URL)",
            "redis://env-host:6379/1 ($RELIABILITYD_REDIS_URL)",
            "mqtt://env-host:1884 ($RELIABILITYD_MQTT_URL)",
        ]
        # A URL given wins over everything.
        assert (
            str(AsyncClient("redis://given:1/0").where) == "redis://given:1/0 (given to the client)"
        )
        assert str(Emitter("mqtt://given:2").where) == "mqtt://given:2 (given to the Emitter)"


def test_a_stopped_embedded_daemon_is_not_asked(env: Path) -> None:
    datadir = env / "data" / "reliabilityd"
    datadir.mkdir(parents=True)
    (datadir / "endpoints.json").write_text('{"redis": 40001, "mqtt": 1884, "http": 9781}')
    (datadir / "lock").touch()  # nobody holds it
    assert target("status")[0] == DEFAULT_REDIS
    assert broker("emit", "s", "t", "pass")[0] == DEFAULT_MQTT
    assert ui_url(None) is None


@pytest.mark.parametrize(
    "verb",
    [["status"], ["tasks", "s"], ["rejected"], ["check"], ["gate", "s", "--at-least", "0.5"]],
)
def test_a_redis_flag_that_is_no_url_is_one_line(
    verb: list[str], env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*verb, "--redis", "x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "reliabilityd: 'x' (--redis) is not a Redis URL: redis://HOST:PORT/DB, rediss://... "
        "or unix:///path/to/socket\n"
    )


def test_a_broker_flag_that_is_no_url_is_one_line(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["emit", "s", "t", "pass", "--mqtt", "http://x"]) == 2
    assert capsys.readouterr().err == (
        "reliabilityd: http://x (--mqtt) is not a broker URL (mqtt://HOST:PORT or mqtts://...): "
        "scheme must be mqtt:// or mqtts://, got 'http'\n"
    )


def test_the_prefix_is_named_when_not_the_default(env: Path) -> None:
    _, where = target("status", "--prefix", "team")
    assert where.endswith(", prefix 'team')")
    with pytest.raises(Exit):
        redis_target(build_parser().parse_args(["status", "-c", str(env / "missing.toml")]))
