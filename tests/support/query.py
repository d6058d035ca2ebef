"""Query-test helpers: a config, events committed through the daemon's commit, the CLI
run in-process."""

from __future__ import annotations

import asyncio

import pytest

from reliabilityd.cli._main import main
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.events import TrialEvent
from reliabilityd.testing import TestingSource, commit_to
from tests.support.servers import RedisServer


def config_for(redis_server: RedisServer, prefix: str) -> Config:
    return Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 5], ci_interval=0.2),
    )


def apply(cfg: Config, events: list[TrialEvent]) -> None:
    """Commit ``events`` as a source would, with ``cfg``'s settings, and wait for Redis."""

    async def go() -> None:
        async with commit_to(cfg) as commit:
            sink = await TestingSource(events).run(commit)
        assert sink.letters == [], sink.letters

    asyncio.run(go())


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
