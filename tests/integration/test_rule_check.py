"""ci-low rules too strict for their suites, against real redis-server: ``reliabilityd
check`` prints the warning naming the rule and the suite, and the daemon logs it at start."""

from __future__ import annotations

import logging

import msgspec
import pytest

from reliabilityd.config import Config, StatsConfig
from reliabilityd.daemon import check
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.testing import TestingSource
from tests.support.daemon import make_config, running
from tests.support.helpers import wait_until
from tests.support.servers import RedisServer

GATE = Rule(name="gate", suite="small-*", k=1, below=0.75, trigger="ci-low")


def _config(redis: RedisServer, prefix: str) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        stats=StatsConfig(k=[1], window=20),
        alerts=[GATE, Rule(name="pager", suite="*", k=1, below=0.75)],
    )
    return msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))


def _suite(name: str, tasks: int) -> list[TrialEvent]:
    # Every task passes 17 of 20: a true 0.85, 0.10 above the rule's `below`.
    return [
        TrialEvent(name, f"t{t}", f"{t}-{i}", "pass" if i < 17 else "fail")
        for t in range(tasks)
        for i in range(20)
    ]


async def _seed(cfg: Config) -> None:
    daemon = Daemon(cfg)
    try:
        await TestingSource(_suite("small-a", 10) + _suite("big-b", 10)).run(daemon.commit)
        await TestingSource(_suite("small-c", 300)).run(daemon.commit)
    finally:
        await daemon.store.client.aclose()


async def test_check_and_start_up_name_a_ci_low_rule_its_small_suite_cannot_satisfy(
    redis_server: RedisServer,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = _config(redis_server, prefix)
    await _seed(cfg)
    caplog.set_level(logging.INFO, logger="reliabilityd")
    async with running(cfg):

        def logged() -> list[str]:
            return [r.getMessage() for r in caplog.records if "rule_cannot_prove" in r.getMessage()]

        async def warned() -> bool:
            return bool(logged())

        await wait_until(warned, 30)
        (line,) = logged()
        assert "rule=gate suite=small-a" in line
        assert await check(cfg) == 0
    out = capsys.readouterr().out
    warnings = [x for x in out.splitlines() if x.startswith("warning: ")]
    # small-a (10 tasks) only: big-b is not the rule's, small-c (300 tasks) proves 0.75,
    # and the detector rule is not judged on its lower bound.
    assert len(warnings) == 1
    assert "rule 'gate' (trigger ci-low, pass^k at k=1 below 0.75)" in warnings[0]
    assert "suite 'small-a' (10 tasks, 20 trials each in the median)" in warnings[0]
    assert "firing most of the day" in warnings[0]
