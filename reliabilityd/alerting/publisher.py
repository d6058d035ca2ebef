"""The retained MQTT publisher: snapshots and alert states, with its own connection.

Shared by the daemon's snapshot topics and the MQTT alert sink.

A topic the broker refuses is set aside with its reason, never retried at the
head of the queue: a topic MQTT forbids (``topic_problem``) is refused before
it is sent; a PUBACK with an error reason code (an ACL, say) refuses it at
once; and a topic in flight alone each time the broker dropped the
connection, ``STRIKES`` times in a row, is taken to be the cause (mosquitto
disconnects a client that publishes a topic it finds malformed). Between
strikes the topic goes to the back of the queue, so every other topic still
goes out.

Topics go out ``WINDOW`` at a time, their PUBACKs awaited together (one at a
time, a publish waited a round trip for each). A drop with several in flight
names none of them: the publisher then sends one at a time, so the next drop
names its topic, until its queue is empty again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence

from reliabilityd.backoff import Backoff
from reliabilityd.config import MqttConfig
from reliabilityd.logs import emit
from reliabilityd.mqtt_connector import Connection, MqttError, Refused, connect
from reliabilityd.names import MQTT_FORBIDDEN

__all__ = ["Publisher", "TopicRefused", "topic_problem"]

# Reconnect pacing: 0.2 s doubling to 15 s (the one Backoff).
BACKOFF_START = 0.2
BACKOFF_MAX = 15.0
TIMEOUT = 10.0
STABLE = 2 * BACKOFF_MAX
# Disconnects in a row with the same topic in flight alone before it is set aside.
STRIKES = 3
# Publishes in flight together (within the broker's Receive Maximum).
WINDOW = 64
# Refused topics remembered (newest kept): a bound, not a limit anyone meets.
MAX_REFUSED = 1000
MAX_TOPIC_BYTES = 65535


class TopicRefused(MqttError):
    """The broker refuses this topic (or MQTT forbids it): retrying cannot help."""


def topic_problem(topic: str) -> str | None:
    """Why MQTT forbids ``topic`` as a PUBLISH topic, or None when it is valid."""
    if not topic:
        return "the topic is empty"
    if len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES:
        return f"the topic is longer than {MAX_TOPIC_BYTES} bytes"
    if "+" in topic or "#" in topic:
        return "the topic holds a wildcard (+ or #)"
    found = MQTT_FORBIDDEN.search(topic)
    if found is not None:
        return (
            f"the topic holds U+{ord(found.group()):04X} (a control character, surrogate or "
            "noncharacter, which MQTT forbids)"
        )
    return None


class Publisher:
    """Retained state messages (snapshots, alert states) with their own connection.

    Only the newest payload per topic is kept while the broker is away, so the
    backlog is bounded by the number of topics; a retained message is a state,
    not a log. Up to ``WINDOW`` publishes are in flight together; after a
    disconnect with several in flight, one at a time until the queue empties.
    """

    def __init__(self, config: MqttConfig, identifier: str) -> None:
        self.config = config
        self.identifier = identifier
        self._pending: dict[str, tuple[bytes, bool]] = {}
        self._wake = asyncio.Event()
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        self._strikes: dict[str, int] = {}
        # One publish at a time: a drop with several in flight named none of them.
        self._careful = False
        # Topics set aside, with the reason (visible: tests, metrics, logs).
        self.refused: dict[str, str] = {}
        # Called with (topic, reason) when a topic is set aside (the daemon counts it).
        self.on_refused: Callable[[str, str], None] | None = None

    def _refuse(self, topic: str, reason: str) -> None:
        self._pending.pop(topic, None)
        self._strikes.pop(topic, None)
        if topic not in self.refused:
            emit(logging.WARNING, "publish_topic_refused", topic=repr(topic), reason=reason)
            if self.on_refused is not None:
                self.on_refused(topic, reason)
        self.refused[topic] = reason
        while len(self.refused) > MAX_REFUSED:
            del self.refused[next(iter(self.refused))]

    def _check(self, topic: str) -> None:
        reason = self.refused.get(topic)
        if reason is None:
            problem = topic_problem(topic)
            if problem is None:
                return
            self._refuse(topic, problem)
            reason = problem
        raise TopicRefused(f"{topic!r} is set aside: {reason}")

    async def _publish(self, conn: Connection, topic: str, payload: bytes, retain: bool) -> None:
        """One publish at a time; a refusal or a drop with it in flight counts against it."""
        async with self._lock:
            try:
                await conn.publish(topic, payload, retain=retain)
            except Refused as exc:
                self._refuse(topic, str(exc))
                raise TopicRefused(str(exc)) from exc
            except MqttError:
                if not conn.is_open:
                    self._strike(topic, conn)
                raise
        self._strikes.pop(topic, None)

    async def _publish_many(
        self, conn: Connection, batch: Sequence[tuple[str, tuple[bytes, bool]]]
    ) -> list[BaseException | None]:
        """The batch in flight together; each topic's error or None. A drop strikes
        none of them (which one caused it is unknown) and makes the publisher careful."""
        async with self._lock:
            results = await asyncio.gather(
                *(
                    conn.publish(topic, payload, retain=retain and conn.retain_available)
                    for topic, (payload, retain) in batch
                ),
                return_exceptions=True,
            )
        out: list[BaseException | None] = []
        for (topic, _), result in zip(batch, results, strict=True):
            if isinstance(result, Refused):
                self._refuse(topic, str(result))
                out.append(TopicRefused(str(result)))
            elif isinstance(result, BaseException):
                if not conn.is_open:
                    self._careful = True
                out.append(result)
            else:
                self._strikes.pop(topic, None)
                out.append(None)
        return out

    async def _drain(self, conn: Connection) -> None:
        """Publish until the queue is empty (each topic's newest payload); MqttError when
        the connection fails."""
        while self._pending:
            if self._careful:
                topic = next(iter(self._pending))
                payload, retain = self._pending[topic]
                try:
                    await self._publish(conn, topic, payload, retain and conn.retain_available)
                except TopicRefused:
                    continue  # set aside: the next topic
                # A newer payload may have arrived meanwhile: keep it.
                if self._pending.get(topic) == (payload, retain):
                    del self._pending[topic]
                continue
            batch = list(itertools.islice(self._pending.items(), WINDOW))
            results = await self._publish_many(conn, batch)
            for (topic, item), result in zip(batch, results, strict=True):
                if result is None and self._pending.get(topic) == item:
                    del self._pending[topic]
            for result in results:
                if result is not None and not isinstance(result, TopicRefused):
                    raise result
        self._careful = False

    def _strike(self, topic: str, conn: Connection) -> None:
        strikes = self._strikes.get(topic, 0) + 1
        if strikes >= STRIKES:
            self._refuse(
                topic,
                f"the broker dropped the connection {strikes} times in a row while this "
                f"topic was in flight (last: {conn.error})",
            )
            return
        self._strikes[topic] = strikes
        if topic in self._pending:  # to the back of the queue: the others go first
            self._pending[topic] = self._pending.pop(topic)

    async def send(self, topic: str, payload: bytes, *, retain: bool = True) -> None:
        """Publish now at QoS 1 and wait for the broker's PUBACK; MqttError when away.

        TopicRefused when the topic is set aside (retrying cannot help).
        """
        self._check(topic)
        conn = self._conn
        if conn is None or not conn.is_open:
            raise MqttError("the publisher is not connected to the broker")
        await self._publish(conn, topic, payload, retain and conn.retain_available)

    def publish(self, topic: str, payload: bytes, *, retain: bool = True) -> None:
        """Queue the newest payload for ``topic``; a set-aside topic is dropped."""
        try:
            self._check(topic)
        except TopicRefused:
            return
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
                    await self._drain(conn)
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
