"""The retained MQTT publisher: snapshots and alert states, with its own connection.

Shared by the daemon's snapshot topics and the MQTT alert sink.
"""

from __future__ import annotations

import asyncio
import logging
import time

from reliabilityd.backoff import Backoff
from reliabilityd.broker import Connection, MqttError, connect
from reliabilityd.config import MqttConfig
from reliabilityd.logs import emit

__all__ = ["Publisher"]

# Reconnect pacing: 0.2 s doubling to 15 s (the one Backoff).
BACKOFF_START = 0.2
BACKOFF_MAX = 15.0
TIMEOUT = 10.0
STABLE = 2 * BACKOFF_MAX


class Publisher:
    """Retained state messages (snapshots, alert states) with their own connection.

    Only the newest payload per topic is kept while the broker is away, so the
    backlog is bounded by the number of topics; a retained message is a state,
    not a log.
    """

    def __init__(self, config: MqttConfig, identifier: str) -> None:
        self.config = config
        self.identifier = identifier
        self._pending: dict[str, tuple[bytes, bool]] = {}
        self._wake = asyncio.Event()
        self._conn: Connection | None = None

    async def send(self, topic: str, payload: bytes, *, retain: bool = True) -> None:
        """Publish now at QoS 1 and wait for the broker's PUBACK; MqttError when away."""
        conn = self._conn
        if conn is None or not conn.is_open:
            raise MqttError("the publisher is not connected to the broker")
        await conn.publish(topic, payload, retain=retain and conn.retain_available)

    def publish(self, topic: str, payload: bytes, *, retain: bool = True) -> None:
        self._pending[topic] = (payload, retain)
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        pace = Backoff(BACKOFF_START, BACKOFF_MAX)
        while not stop.is_set():
            conn: Connection | None = None
            connected_at: float | None = None
            try:
                conn = await connect(
                    self.config, identifier=self.identifier, persistent=False, reply_within=TIMEOUT
                )
                connected_at = time.monotonic()
                self._conn = conn
                if not conn.retain_available:
                    # Retained or not is the broker's call; a state nobody
                    # keeps still reaches whoever is subscribed now.
                    emit(logging.WARNING, "publisher_no_retain", identifier=self.identifier)
                while not stop.is_set():
                    while self._pending:
                        topic = next(iter(self._pending))
                        payload, retain = self._pending[topic]
                        keep = retain and conn.retain_available
                        await conn.publish(topic, payload, retain=keep)
                        # A newer payload may have arrived meanwhile: keep it.
                        if self._pending.get(topic) == (payload, retain):
                            del self._pending[topic]
                    self._wake.clear()
                    await _wait_any(self._wake, stop, conn.closed)
                    if not conn.is_open:
                        raise MqttError(str(conn.error or "the connection was closed"))
            except MqttError as exc:
                # Reset the pace only after a connection that lasted: one taken
                # over at once (another client with this id) must not spin.
                if connected_at is not None and time.monotonic() - connected_at >= STABLE:
                    pace.reset()
                emit(logging.WARNING, "publisher_disconnected", error=exc)
            finally:
                self._conn = None
                if conn is not None:
                    await conn.close()
            if not stop.is_set():
                await pace.wait(stop)


async def _wait_any(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
