"""Where trial events come from, and the one commit every source hands them to.

``Commit`` (``_commit``) decodes a batch, admits it, applies it to Redis and
then calls the source's acknowledge hook; a ``Batch`` is what it writes, a
``Committed`` what it did. The sources differ only in how messages arrive
and how they are acknowledged: MQTT (``mqtt``: PUBACK, the next batch
decoded while one commits, ``Flight``), Redis Streams (``streams``: XACK),
and the daemon's HTTP port (``POST /v1/trials`` and ``/v1/logs``, which
answers requests instead of pulling messages and lives with the port);
``reliabilityd.testing`` is one more, for tests.

``configured`` lists the pulling sources a configuration turns on, each a
name and a ``run(stop)`` loop; the daemon runs each under its supervisor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from reliabilityd.config import Config
from reliabilityd.sources import mqtt, streams
from reliabilityd.sources._commit import (
    Acknowledge,
    Batch,
    Commit,
    Committed,
    Committer,
    CommitUnavailable,
    Letter,
    Observer,
    Payload,
)
from reliabilityd.sources._flight import Flight
from reliabilityd.store import Store

__all__ = [
    "Acknowledge",
    "Batch",
    "Commit",
    "CommitUnavailable",
    "Committed",
    "Committer",
    "Flight",
    "Letter",
    "Observer",
    "Payload",
    "Source",
    "configured",
]


@dataclass(frozen=True)
class Source:
    """One configured source: its name (in logs and supervision) and its loop."""

    name: str
    run: Callable[[asyncio.Event], Awaitable[None]]


def configured(
    config: Config,
    store: Store,
    instance: str,
    commit: Committer,
    *,
    subscribed: asyncio.Event | None = None,
    watch: mqtt.Watch | None = None,
) -> list[Source]:
    """The sources ``config`` turns on, each handing its batches to ``commit``.

    ``subscribed`` and ``watch`` are the MQTT source's: set once the broker
    confirmed the subscription, and what it saw of its session.
    """
    out: list[Source] = []
    batch = config.ingest.max_batch
    if config.mqtt.enabled:
        run = partial(
            mqtt.consume,
            config.mqtt,
            commit,
            max_batch=batch,
            max_payload=config.ingest.max_payload,
            subscribed=subscribed,
            watch=watch,
        )
        out.append(Source("mqtt-consumer", run))
    if config.stream.enabled:
        out.append(
            Source(
                "stream-consumer",
                partial(streams.consume, store, config.stream, instance, commit, max_batch=batch),
            )
        )
    return out
