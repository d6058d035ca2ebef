"""Where trial events come from: MQTT (``mqtt``) and Redis Streams (``streams``).

Every source has the same shape: a name and a ``run(stop)`` that takes
messages until ``stop`` is set, hands each batch to the daemon's commit, and
acknowledges it only once its events are committed to Redis. ``configured``
lists the sources a configuration turns on; the daemon runs each under its
supervisor. (HTTP ingest answers requests instead of pulling messages: it
lives with the daemon's HTTP port.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from reliabilityd.config import Config
from reliabilityd.sources import mqtt, streams
from reliabilityd.store import Store

__all__ = ["Source", "configured"]

D = TypeVar("D")


@dataclass(frozen=True)
class Source:
    """One configured source: its name (in logs and supervision) and its loop."""

    name: str
    run: Callable[[asyncio.Event], Awaitable[None]]


def configured(
    config: Config,
    store: Store,
    instance: str,
    *,
    decode: mqtt.Decode[D],
    commit_decoded: Callable[[D, asyncio.Event], Awaitable[None]],
    commit: streams.Commit,
    max_payload: int,
    subscribed: asyncio.Event | None = None,
    watch: mqtt.Watch | None = None,
) -> list[Source]:
    """The sources ``config`` turns on, wired to the daemon's decode and commit.

    MQTT decodes the next batch while the last one commits (``decode`` and
    ``commit_decoded``); a stream batch commits with its cursor (``commit``).
    """
    out: list[Source] = []
    batch = config.ingest.max_batch
    if config.mqtt.enabled:
        run = partial(
            mqtt.consume,
            config.mqtt,
            decode,
            commit_decoded,
            max_batch=batch,
            max_payload=max_payload,
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
