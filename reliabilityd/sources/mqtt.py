"""The MQTT source: the acknowledge-after-commit consumer.

The consumer takes QoS 1 messages on a persistent session and acknowledges
each one only after its events are committed to Redis, in the order received
(MQTT requires PUBACKs in PUBLISH order): it takes a batch of received
messages, commits it, then writes the batch's PUBACKs in one go.
tests/test_faults.py::test_nothing_is_acknowledged_before_its_commit fails if
anything is ever acknowledged on receipt.

Two batches overlap: once batch N's request is written to Redis, the next
one is taken and decoded while Redis applies N. Commits still run one at a time
and in order, and batch N is acknowledged before batch N+1's commit starts,
so PUBACKs keep PUBLISH order and a task's outcomes reach Redis in arrival
order.

Reconnecting is our job: a fresh connection per attempt inside a loop with
capped exponential backoff. Message ids belong to a connection: a message left
from the old connection is never acknowledged on the new one (the broker
redelivers it instead, and the dedup record makes it a duplicate).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from reliabilityd.backoff import Backoff, sleep_or_stop
from reliabilityd.broker import Connection, Message, MqttError, connect
from reliabilityd.config import MqttConfig
from reliabilityd.logs import emit, log

__all__ = ["MqttError", "consume", "subscription"]

D = TypeVar("D")
# A batch whose commit is running, and that commit.
Inflight = tuple[list[Message], "asyncio.Future[None]"]

# Reconnect pacing: 0.2 s doubling to 15 s (the one Backoff).
BACKOFF_START = 0.2
BACKOFF_MAX = 15.0
TIMEOUT = 10.0


def subscription(config: MqttConfig) -> str:
    if config.shared_group:
        return f"$share/{config.shared_group}/{config.topic}"
    return config.topic


def _with_sources(batch: list[Message]) -> list[tuple[bytes, str]]:
    """(payload, ``mqtt:<topic>``) per message; each distinct topic is decoded once."""
    name = {t: "mqtt:" + t.decode("utf-8", "replace") for t in {m.topic for m in batch}}
    return [(m.payload, name[m.topic]) for m in batch]


async def consume(
    config: MqttConfig,
    decode: Callable[[Sequence[tuple[bytes, str]]], D],
    commit: Callable[[D, asyncio.Event], Awaitable[None]],
    stop: asyncio.Event,
    *,
    max_batch: int,
    subscribed: asyncio.Event | None = None,
) -> None:
    """Take trial messages until stop is set; acknowledge each after its commit.

    ``decode`` turns a batch of (payload, source) pairs into what ``commit``
    writes. ``commit`` sets the event it is given once its request is on its
    way to Redis; the next batch is decoded only then, so Redis applies one
    batch while Python decodes the next. ``subscribed`` is set once the
    broker has confirmed the subscription.
    """
    pace = Backoff(BACKOFF_START, BACKOFF_MAX)
    topic = subscription(config)
    while not stop.is_set():
        conn: Connection | None = None
        waker: asyncio.Task[None] | None = None
        inflight: Inflight | None = None
        try:
            conn = await connect(
                config,
                identifier=config.client_id,
                persistent=True,
                receive_maximum=config.receive_maximum,
                reply_within=TIMEOUT,
            )
            waker = asyncio.create_task(_wake_on_stop(stop, conn))
            await conn.subscribe(topic)
            pace.reset()
            emit(logging.INFO, "mqtt_subscribed", topic=topic, client_id=config.client_id)
            if subscribed is not None:
                subscribed.set()
            while not stop.is_set():
                if inflight is not None and not conn.waiting:
                    # Nothing to decode meanwhile: acknowledge as soon as committed.
                    await _acknowledge(conn, inflight)
                    inflight = None
                    continue  # a stop may have come meanwhile
                batch = await conn.take(max_batch)
                if not batch:
                    continue
                work = decode(_with_sources(batch))
                if inflight is not None:
                    await _acknowledge(conn, inflight)
                # A stop during the commit lets it finish: acknowledging
                # needs it, and Redis applies it atomically anyway.
                sent = asyncio.Event()
                inflight = (batch, asyncio.ensure_future(commit(work, sent)))
                await _until_sent(sent, inflight[1])
            if inflight is not None:
                await _acknowledge(conn, inflight)
                inflight = None
        except MqttError as exc:
            delay = pace.next_delay()
            emit(logging.WARNING, "mqtt_disconnected", error=exc, retry_in=round(delay, 2))
            await sleep_or_stop(stop, delay)
        finally:
            try:
                if inflight is not None and not _cancelled():
                    # Let the running commit end before the next connection's
                    # batches are applied (its batch comes back unacknowledged:
                    # dedup absorbs it).
                    try:
                        await asyncio.shield(inflight[1])
                    except Exception:
                        log.exception("commit failed while the consumer left its connection")
                elif inflight is not None:
                    # Cancelled (the shutdown grace ran out): cancel the commit
                    # too, so it closes its Redis connection instead of being
                    # left pending. Its batch is unacknowledged and comes
                    # back; a chunk Redis already applied is a duplicate then.
                    inflight[1].cancel()
                    await asyncio.wait({inflight[1]}, timeout=1.0)
            finally:
                if waker is not None:
                    waker.cancel()
                if conn is not None:
                    await conn.close()


async def _until_sent(sent: asyncio.Event, committing: asyncio.Future[None]) -> None:
    """Wait until the commit's request is on its way to Redis, or the commit is over."""
    if committing.done():
        return
    waiter = asyncio.ensure_future(sent.wait())
    try:
        await asyncio.wait((waiter, committing), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _acknowledge(conn: Connection, inflight: Inflight) -> None:
    """Wait for the batch's commit, then acknowledge the batch."""
    batch, committing = inflight
    await asyncio.shield(committing)
    conn.ack(batch)


async def _wake_on_stop(stop: asyncio.Event, conn: Connection) -> None:
    await stop.wait()
    conn.wake()
