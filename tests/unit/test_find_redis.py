"""Every command finds Redis the same way: flag, env, config, running embedded daemon, default."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

from reliabilityd.cli._common import Exit, redis_target
from reliabilityd.cli._main import build_parser, main

VERBS = [
    ["status"],
    ["cases", "s"],
    ["tasks", "s"],
    ["reset", "s"],
    ["forget", "s", "t"],
    ["forecast"],
    ["rejected"],
    ["check"],
    ["import", "file.json"],
]


@contextlib.contextmanager
def embedded_daemon(data: Path, redis_port: int) -> Iterator[None]:
    """A data directory as a running embedded daemon leaves it: endpoints.json, the lock held."""
    datadir = data / "reliabilityd"
    datadir.mkdir(parents=True)
    (datadir / "endpoints.json").write_text(
        f'{{"redis": {redis_port}, "mqtt": 1884, "http": 9781}}'
    )
    with (datadir / "lock").open("a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("RELIABILITYD_REDIS_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return tmp_path


def target(*argv: str) -> tuple[str, str]:
    t = redis_target(build_parser().parse_args(list(argv)))
    return t.url, t.describe()


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: v[0])
def test_the_order_is_the_same_for_every_verb(
    verb: list[str], env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_url = env / "with-url.toml"
    with_url.write_text('[redis]\nurl = "redis://config-host:6379/0"\n')
    without_url = env / "without-url.toml"
    without_url.write_text("[daemon]\nheartbeat_ttl = 20.0\n")
    default = "redis://127.0.0.1:6379/0"

    assert target(*verb) == (default, f"{default} (the default)")
    assert target(*verb, "-c", str(without_url))[0] == default
    with embedded_daemon(env / "data", 40001):
        embedded = "redis://127.0.0.1:40001/0"
        assert target(*verb) == (
            embedded,
            f"{embedded} (the embedded daemon in {env / 'data' / 'reliabilityd'})",
        )
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
        if verb[0] != "import":  # import takes -c or --redis, not both
            assert target(*verb, "-c", str(with_url), "--redis", "redis://flag:1/0")[1] == (
                "redis://flag:1/0 (--redis)"
            )
        assert target(*verb, "--redis", "redis://flag:1/0")[0] == "redis://flag:1/0"


def test_a_stopped_embedded_daemon_is_not_asked(env: Path) -> None:
    datadir = env / "data" / "reliabilityd"
    datadir.mkdir(parents=True)
    (datadir / "endpoints.json").write_text('{"redis": 40001, "mqtt": 1884}')
    (datadir / "lock").touch()  # nobody holds it
    assert target("status")[0] == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize("verb", [["status"], ["tasks", "s"], ["rejected"], ["check"]])
def test_a_redis_flag_that_is_no_url_is_one_line(
    verb: list[str], env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*verb, "--redis", "x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "reliabilityd: 'x' (--redis) is not a Redis URL: redis://HOST:PORT/DB, rediss://... "
        "or unix:///path/to/socket\n"
    )


def test_the_prefix_is_named_when_not_the_default(env: Path) -> None:
    _, where = target("status", "--prefix", "team")
    assert where == "redis://127.0.0.1:6379/0 (the default, prefix 'team')"
    with pytest.raises(Exit):
        redis_target(build_parser().parse_args(["status", "-c", str(env / "missing.toml")]))
