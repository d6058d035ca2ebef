"""The demo's simulated fleet: agents that run tasks and publish one event per trial.

Three suites, tasks of different difficulty (``deploy-bot`` is the
README's example suite: task i passes about EXAMPLE_PASSES[i] of 5 runs). The
``support-bot`` agent is reliable until its ``regress`` phase, when every
task passes only ``REGRESSED`` of its runs, and reliable again after
``recover``. The schedule lives in ``demo.py``; this module only decides
outcomes and publishes them.

The MQTT connection (``reliabilityd.mqtt_client``, as a plain agent would
use a plain client) is opened by ``client`` and used in ``Agents.publish``
and nowhere else.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from reliabilityd.config import MqttConfig
from reliabilityd.events import TrialEvent
from reliabilityd.mqtt_connector import Connection, connect

EXAMPLE_PASSES = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]
REGRESSED = 0.5
TOPIC = "reliability/trials"


@dataclass
class Suite:
    name: str
    # Each task's chance to pass one run, in its healthy state.
    tasks: dict[str, float]
    regressed: bool = False
    runs: dict[str, int] = field(default_factory=dict)

    def p(self, task: str) -> float:
        return REGRESSED if self.regressed else self.tasks[task]


def default_fleet() -> list[Suite]:
    return [
        Suite(
            "deploy-bot",
            {f"deploy service {i}": c / 5 for i, c in enumerate(EXAMPLE_PASSES)},
        ),
        # Reliable: the one the alert watches, the one that regresses.
        Suite(
            "support-bot",
            {f"ticket {i}": 1.0 if i % 4 else 0.97 for i in range(12)},
        ),
        Suite(
            "code-review-bot",
            {f"review {i}": p for i, p in enumerate([0.95, 0.9, 0.85, 0.8, 0.99, 0.7, 0.92, 0.6])},
        ),
    ]


class Agents:
    """Runs one round of trials per call: each task of each suite, with some chance."""

    def __init__(self, suites: Sequence[Suite], *, seed: int = 0, share: float = 0.7) -> None:
        self.suites = list(suites)
        self.rng = random.Random(seed)
        self.share = share
        self.published = 0
        # Trial ids unique to this fleet: a demo run on a kept data directory adds
        # new trials instead of repeating the last run's (which would be duplicates).
        self.session = uuid.uuid4().hex[:8]

    def suite(self, name: str) -> Suite:
        return next(s for s in self.suites if s.name == name)

    def round(self) -> dict[str, list[TrialEvent]]:
        """This round's trials per suite (a task runs with probability ``share``)."""
        now = time.time()
        out: dict[str, list[TrialEvent]] = {}
        for suite in self.suites:
            events = []
            for task in suite.tasks:
                if self.rng.random() >= self.share:
                    continue
                run = suite.runs.get(task, 0)
                suite.runs[task] = run + 1
                passed = self.rng.random() < suite.p(task)
                events.append(
                    TrialEvent(
                        suite.name,
                        task,
                        f"{self.session}-{run}",
                        "pass" if passed else "fail",
                        ts=now,
                    )
                )
            if events:
                out[suite.name] = events
        return out

    async def publish(self, client: Connection, batch: dict[str, list[TrialEvent]]) -> None:
        """One QoS 1 message per suite: a JSON array of its events, sent once acknowledged."""
        for suite, events in batch.items():
            await client.publish(f"{TOPIC}/{suite}", msgspec.json.encode(events), retain=False)
            self.published += len(events)


@asynccontextmanager
async def client(
    host: str, port: int, protocol: Literal["5", "3.1.1"], identifier: str
) -> AsyncIterator[Connection]:
    """A plain MQTT connection (clean session), as an agent would have; closed on exit."""
    where = f"[{host}]" if ":" in host else host
    config = MqttConfig(url=f"mqtt://{where}:{port}", protocol=protocol)
    conn = await connect(config, identifier=identifier, persistent=False)
    try:
        yield conn
    finally:
        await conn.close()
