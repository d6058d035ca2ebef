"""Query-test helpers: a config, a direct apply, and the CLI run in-process."""

from __future__ import annotations

import asyncio

import pytest

from reliabilityd.cli._main import main
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.events import TrialEvent
from reliabilityd.store import Store, connect
from tests.support.servers import RedisServer


def config_for(redis_server: RedisServer, prefix: str) -> Config:
    return Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 5], ci_interval=0.2),
    )


def apply(cfg: Config, events: list[TrialEvent]) -> None:
    async def go() -> None:
        client = connect(cfg.redis.url)
        try:
            by_suite: dict[str, list[TrialEvent]] = {}
            for e in events:
                by_suite.setdefault(e.suite, []).append(e)
            await Store(client, cfg.redis.prefix).ingest.apply(
                by_suite, windows={}, dedup_ttl=cfg.dedup_ttl
            )
        finally:
            await client.aclose()

    asyncio.run(go())


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
