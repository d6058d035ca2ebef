"""The supervisor and the backoff: a failing loop is restarted, logged, and paced."""

from __future__ import annotations

import asyncio
import logging

import pytest

from reliabilityd.backoff import Backoff
from reliabilityd.daemon.supervisor import supervise
from reliabilityd.errors import ConfigError


def test_backoff_doubles_up_to_its_cap_and_starts_over_after_a_success() -> None:
    pace = Backoff(0.1, 1.0, jitter=0)
    assert [pace.next_delay() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    pace.reset()
    assert pace.next_delay() == 0.1


def test_backoff_jitter_stays_within_its_share() -> None:
    pace = Backoff(1.0, 1.0, jitter=0.1)
    delays = [pace.next_delay() for _ in range(200)]
    assert all(0.9 <= d <= 1.1 for d in delays)
    assert len(set(delays)) > 1


async def test_a_failing_loop_is_restarted_with_its_traceback_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    runs: list[int] = []
    third = asyncio.Event()

    async def loop() -> None:
        runs.append(len(runs))
        if len(runs) <= 2:
            raise RuntimeError(f"bug number {len(runs)}")
        third.set()
        await stop.wait()

    task = asyncio.create_task(supervise("demo", loop, stop, backoff=Backoff(0.01, 0.05)))
    await asyncio.wait_for(third.wait(), 5)
    assert not task.done()
    stop.set()
    await asyncio.wait_for(task, 5)
    failures = [r for r in caplog.records if "event=loop_failed loop=demo" in r.getMessage()]
    assert len(failures) == 2
    assert failures[0].exc_info is not None
    assert "bug number 1" in str(failures[0].exc_info[1])
    assert failures[0].levelno == logging.ERROR


async def test_a_config_error_ends_the_supervisor() -> None:
    async def loop() -> None:
        raise ConfigError("c.toml", "$.x", "bad")

    with pytest.raises(ConfigError):
        await supervise("demo", loop, asyncio.Event(), backoff=Backoff(0.01, 0.05))


async def test_a_loop_returning_early_is_started_again() -> None:
    stop = asyncio.Event()
    runs: list[int] = []

    async def loop() -> None:
        runs.append(1)
        if len(runs) == 3:
            stop.set()

    await asyncio.wait_for(supervise("demo", loop, stop, backoff=Backoff(0.01, 0.05)), 5)
    assert len(runs) == 3
