"""The heartbeat: this instance's liveness and health in Redis, read by ``reliabilityd check``.

Written every third of ``daemon.heartbeat_ttl`` with a TTL of the whole:
when the daemon, its loop or its Redis stops, the key expires and ``check``
says so. It carries what ``check`` reports: since when ingest has been
paused and why, what the MQTT consumer saw of its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING

from reliabilityd.alerting.watchdog import describe
from reliabilityd.logs import RateLimited
from reliabilityd.store import StoreError

if TYPE_CHECKING:
    from reliabilityd.daemon._daemon import Daemon

__all__ = ["heartbeat_loop"]


async def heartbeat_loop(daemon: Daemon, stop: asyncio.Event) -> None:
    """Write the heartbeat until ``stop``; a Redis error is retried within a second."""
    ttl = daemon.config.daemon.heartbeat_ttl
    failed_log = RateLimited()
    while not stop.is_set():
        since = daemon.health.since
        try:
            await daemon.store.admin.heartbeat(
                daemon.instance,
                ttl,
                {
                    "at": time.time(),
                    "pid": os.getpid(),
                    "started_at": daemon.started_at,
                    "committed_events": daemon.committed_events,
                    "paused_since": since,
                    "redis_error": daemon.health.reason if since is not None else None,
                    "mqtt": daemon.mqtt_watch.info() if daemon.config.mqtt.enabled else None,
                },
            )
        except StoreError as exc:
            daemon.health.failed("heartbeat", exc)
            failed_log.emit(logging.WARNING, "heartbeat_failed", error=describe(exc))
            wait = min(1.0, ttl / 3)  # notice the recovery soon
        else:
            daemon.health.ok("heartbeat")
            wait = ttl / 3
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
