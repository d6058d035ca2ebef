"""The MQTT source: the acknowledge-after-commit consumer.

The consumer takes QoS 1 messages on a persistent session and acknowledges
each one only after its events are committed to Redis, in the order received
(MQTT requires PUBACKs in PUBLISH order): it takes a batch of received
messages, has the commit decode and apply it, and the commit's acknowledge
hook writes the batch's PUBACKs in one go.
tests/faults/test_faults.py::test_nothing_is_acknowledged_before_its_commit
fails if anything is ever acknowledged on receipt.

Two batches overlap (``Flight``): once batch N's request is written to
Redis, the next one is taken and decoded while Redis applies N. Commits
still run one at a time and in order, and batch N is acknowledged before
batch N+1's commit starts, so PUBACKs keep PUBLISH order and a task's
outcomes reach Redis in arrival order.

Reconnecting is our job: a fresh connection per attempt inside a loop with
capped exponential backoff, reset only once a connection has lasted
``STABLE`` seconds (a connection taken over at once by another client with
the same id must not make both retry at full speed). Message ids belong to a
connection: a message left from the old connection is never acknowledged on
the new one (the broker redelivers it instead, and the dedup record makes it
a duplicate).

What the broker does to the session is watched (``Watch``): a reconnect whose
CONNACK says the session is gone (its queued QoS 1 messages with it), and a
takeover (MQTT 5 DISCONNECT 0x8E, or the connection closed without a
DISCONNECT within ``TAKEOVER_WINDOW`` seconds of its CONNACK: MQTT 3.1.1
gives no reason, nor does every MQTT 5 broker) are each logged in one line and
counted, for the metrics, the heartbeat and ``reliabilityd check``. A message
over ``max_payload`` arrives without its body (``Skipped``): it is
dead-lettered with its size and topic and acknowledged like the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from reliabilityd.backoff import Backoff, sleep_or_stop
from reliabilityd.config import MqttConfig
from reliabilityd.logs import emit
from reliabilityd.mqtt_connector import (
    Closed,
    Connection,
    Message,
    MqttError,
    Skipped,
    TakenOver,
    connect,
)
from reliabilityd.sources._commit import Committed, Committer
from reliabilityd.sources._flight import Flight

__all__ = ["MqttError", "Watch", "consume", "subscription"]

# Reconnect pacing: 0.2 s doubling to 15 s (the one Backoff).
BACKOFF_START = 0.2
BACKOFF_MAX = 15.0
TIMEOUT = 10.0
# A connection that lasted this long resets the backoff.
STABLE = 2 * BACKOFF_MAX
# A connection the broker ends this soon after its CONNACK was most likely
# taken over by another client with the same id (MQTT 3.1.1 gives no reason).
TAKEOVER_WINDOW = 2.0


class Watch:
    """What the consumer saw of its broker session, since this process started."""

    def __init__(self) -> None:
        self.sessions_lost = 0
        self.session_lost_at: float | None = None
        self.takeovers = 0
        self.taken_over_at: float | None = None
        self.skipped = 0  # messages over max_payload, dead-lettered unread

    def info(self) -> dict[str, Any]:
        """For the heartbeat document."""
        return {
            "sessions_lost": self.sessions_lost,
            "session_lost_at": self.session_lost_at,
            "takeovers": self.takeovers,
            "taken_over_at": self.taken_over_at,
        }


def subscription(config: MqttConfig) -> str:
    if config.shared_group:
        return f"$share/{config.shared_group}/{config.topic}"
    return config.topic


def _name(topic: bytes) -> str:
    return "mqtt:" + topic.decode("utf-8", "replace")


def _with_sources(batch: list[Message]) -> list[tuple[bytes, str]]:
    """(payload, ``mqtt:<topic>``) per message; each distinct topic is decoded once."""
    name = {t: _name(t) for t in {m.topic for m in batch}}
    return [(m.payload, name[m.topic]) for m in batch]


def _skipped(batch: list[Message]) -> list[tuple[int, str]]:
    """(size, ``mqtt:<topic>``) of each message whose body was skipped."""
    return [(m.size, _name(m.topic)) for m in batch if isinstance(m, Skipped)]


def _ack(conn: Connection, batch: list[Message], _: Committed) -> None:
    """The commit's acknowledge hook: the batch's PUBACKs, in one write, in PUBLISH order."""
    conn.ack(batch)


async def consume(
    config: MqttConfig,
    commit: Committer,
    stop: asyncio.Event,
    *,
    max_batch: int,
    max_payload: int = 1 << 20,
    subscribed: asyncio.Event | None = None,
    watch: Watch | None = None,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[asyncio.Event, float], Awaitable[None]] = sleep_or_stop,
) -> None:
    """Take trial messages until stop is set; acknowledge each after its commit.

    ``commit.decode`` turns a batch of (payload, ``mqtt:<topic>``) pairs, and
    the (size, source) of the messages over ``max_payload`` bytes (skipped
    unread), into the batch ``commit`` applies; its hook acknowledges. The
    next batch is decoded once the commit's request is on its way to Redis,
    so Redis applies one batch while Python decodes the next. ``subscribed``
    is set once the broker has confirmed the subscription; ``watch`` counts
    lost sessions and takeovers. ``clock`` (how long a connection lived) and
    ``pause`` (the wait before a reconnect) let a test drive the pacing.
    """
    pace = Backoff(BACKOFF_START, BACKOFF_MAX)
    topic = subscription(config)
    watch = watch if watch is not None else Watch()
    connected_before = False
    while not stop.is_set():
        conn: Connection | None = None
        waker: asyncio.Task[None] | None = None
        flight = Flight(commit)
        connected_at: float | None = None
        try:
            conn = await connect(
                config,
                identifier=config.client_id,
                persistent=True,
                receive_maximum=config.receive_maximum,
                reply_within=TIMEOUT,
                max_payload=max_payload,
            )
            connected_at = clock()
            _session_state(conn, config, watch, reconnect=connected_before)
            connected_before = True
            waker = asyncio.create_task(_wake_on_stop(stop, conn))
            granted = await conn.subscribe(topic)
            emit(
                logging.INFO,
                "mqtt_subscribed",
                topic=topic,
                client_id=config.client_id,
                session_present=conn.session_present,
            )
            if granted < 1:
                emit(logging.WARNING, "mqtt_qos_0_granted", topic=topic, lost_on_disconnect=True)
            if subscribed is not None:
                subscribed.set()
            skipped_seen = 0
            while not stop.is_set():
                if flight.busy and not conn.waiting:
                    # Nothing to decode meanwhile: acknowledge as soon as committed.
                    await flight.finish()
                    continue  # a stop may have come meanwhile
                batch = await conn.take(max_batch)
                if not batch:
                    continue
                if conn.skipped == skipped_seen:
                    work = commit.decode(_with_sources(batch))
                else:  # rare: only then look for them
                    big = _skipped(batch)
                    skipped_seen += len(big)
                    watch.skipped += len(big)
                    read = [m for m in batch if not isinstance(m, Skipped)]
                    work = commit.decode(_with_sources(read), big)
                await flight.start(work, partial(_ack, conn, batch))
            await flight.finish()
        except MqttError as exc:
            lived = None if connected_at is None else clock() - connected_at
            if lived is not None and lived >= STABLE:
                pace.reset()
            delay = pace.next_delay()
            # MQTT 5 can name a takeover; 3.1.1 (and some MQTT 5 brokers) just close.
            if isinstance(exc, TakenOver) or (
                isinstance(exc, Closed)
                and conn is not None
                and conn.disconnect_reason is None
                and lived is not None
                and lived < TAKEOVER_WINDOW
            ):
                watch.takeovers += 1
                watch.taken_over_at = time.time()
                emit(
                    logging.WARNING,
                    "mqtt_session_taken_over",
                    client_id=config.client_id,
                    after=round(lived or 0.0, 2),
                    error=exc,
                    hint="another client connects with this mqtt.client_id",
                    retry_in=round(delay, 2),
                )
            else:
                emit(logging.WARNING, "mqtt_disconnected", error=exc, retry_in=round(delay, 2))
            await pause(stop, delay)
        finally:
            try:
                # The commit in flight ends (or, cancelled, is cancelled) before
                # the next connection's batches are applied.
                await flight.leave()
            finally:
                if waker is not None:
                    waker.cancel()
                if conn is not None:
                    await conn.close()


def _session_state(conn: Connection, config: MqttConfig, watch: Watch, *, reconnect: bool) -> None:
    """Log (and count) a session the broker no longer had, and a keep-alive it turned off."""
    if not conn.session_present:
        if reconnect:
            watch.sessions_lost += 1
            watch.session_lost_at = time.time()
            emit(
                logging.WARNING,
                "mqtt_session_lost",
                client_id=config.client_id,
                lost="the QoS 1 messages the broker had queued for this session",
            )
        else:
            emit(logging.INFO, "mqtt_session_new", client_id=config.client_id)
    if conn.keepalive == 0:
        emit(
            logging.INFO,
            "mqtt_server_keepalive_off",
            checked_every=config.keepalive,
            note="the broker sent Server Keep Alive 0; PINGREQ goes on at mqtt.keepalive",
        )


async def _wake_on_stop(stop: asyncio.Event, conn: Connection) -> None:
    await stop.wait()
    conn.wake()
