"""MQTT edges: the acknowledge-after-commit consumer and the retained publisher.

The consumer takes QoS 1 messages on a persistent session and acknowledges
each one only after its events are committed to Redis, in the order received
(MQTT requires PUBACKs in PUBLISH order). aiomqtt has no public manual-ack
switch yet; paho's manual-ack mode underneath it does the job, and
tests/test_faults.py::test_nothing_is_acknowledged_before_its_commit fails
if an upgrade ever makes it acknowledge on receipt.

Reconnecting is our job: a fresh client per connection inside a loop with
capped exponential backoff. A fresh client, not a reused one, because message
ids belong to a connection: a message left from the old connection must never
be acknowledged on the new one (the broker redelivers it instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from reliabilityd.config import MqttConfig, parse_mqtt_url
from reliabilityd.logs import emit

Commit = Callable[[Sequence[tuple[bytes, str]]], Awaitable[None]]

BACKOFF_START = 0.2
BACKOFF_MAX = 15.0


def make_client(
    config: MqttConfig, *, identifier: str, persistent: bool, receive_maximum: int | None = None
) -> aiomqtt.Client:
    endpoint = parse_mqtt_url(config.url)
    v5 = config.protocol == "5"
    properties = None
    kwargs: dict[str, Any] = {}
    if v5:
        properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        if persistent:
            properties.SessionExpiryInterval = config.session_expiry
        if receive_maximum is not None:
            properties.ReceiveMaximum = receive_maximum
        kwargs["clean_start"] = not persistent
    else:
        kwargs["clean_session"] = not persistent
    return aiomqtt.Client(
        endpoint.host,
        endpoint.port,
        username=endpoint.username,
        password=endpoint.password,
        identifier=identifier,
        protocol=aiomqtt.ProtocolVersion.V5 if v5 else aiomqtt.ProtocolVersion.V311,
        keepalive=config.keepalive,
        properties=properties,
        tls_context=ssl.create_default_context() if endpoint.tls else None,
        timeout=10,
        **kwargs,
    )


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _next_or_stop(
    messages: aiomqtt.client.MessagesIterator, stop: asyncio.Event
) -> aiomqtt.Message | None:
    getter = asyncio.ensure_future(anext(messages))
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for fut in (getter, stopper):
            if not fut.done():
                fut.cancel()
    if getter in done:
        return getter.result()
    return None


def subscription(config: MqttConfig) -> str:
    if config.shared_group:
        return f"$share/{config.shared_group}/{config.topic}"
    return config.topic


async def consume(
    config: MqttConfig,
    commit: Commit,
    stop: asyncio.Event,
    *,
    max_batch: int,
    subscribed: asyncio.Event | None = None,
) -> None:
    """Take trial messages until stop is set; acknowledge each after its commit.

    ``subscribed`` is set once the broker has confirmed the subscription.
    """
    backoff = BACKOFF_START
    topic = subscription(config)
    while not stop.is_set():
        client = make_client(
            config,
            identifier=config.client_id,
            persistent=True,
            receive_maximum=config.receive_maximum,
        )
        # paho underneath: PUBACK only when we call ack(), after the commit.
        paho = client._client
        paho.manual_ack_set(True)
        try:
            async with client:
                backoff = BACKOFF_START
                await client.subscribe(topic, qos=1)
                emit(logging.INFO, "mqtt_subscribed", topic=topic, client_id=config.client_id)
                if subscribed is not None:
                    subscribed.set()
                messages = client.messages
                while not stop.is_set():
                    first = await _next_or_stop(messages, stop)
                    if first is None:
                        break
                    batch = [first]
                    while len(messages) and len(batch) < max_batch:
                        batch.append(await anext(messages))
                    payloads = [(_payload(m), f"mqtt:{m.topic.value}") for m in batch]
                    # A stop during the commit lets it finish: acknowledging
                    # needs it, and Redis applies it atomically anyway.
                    await asyncio.shield(commit(payloads))
                    for m in batch:
                        if m.qos > 0:
                            paho.ack(m.mid, m.qos)
        except aiomqtt.MqttError as exc:
            emit(logging.WARNING, "mqtt_disconnected", error=exc, retry_in=round(backoff, 2))
            await _sleep_or_stop(stop, backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)


def _payload(message: aiomqtt.Message) -> bytes:
    p = message.payload
    if isinstance(p, bytes | bytearray):
        return bytes(p)
    return str(p).encode() if p is not None else b""


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
        self._client: aiomqtt.Client | None = None

    async def send(self, topic: str, payload: bytes, *, retain: bool = True) -> None:
        """Publish now at QoS 1 and wait for the broker's PUBACK; MqttError when away."""
        client = self._client
        if client is None:
            raise aiomqtt.MqttError("the publisher is not connected to the broker")
        await client.publish(topic, payload, qos=1, retain=retain)

    def publish(self, topic: str, payload: bytes, *, retain: bool = True) -> None:
        self._pending[topic] = (payload, retain)
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        backoff = BACKOFF_START
        while not stop.is_set():
            client = make_client(self.config, identifier=self.identifier, persistent=False)
            try:
                async with client:
                    backoff = BACKOFF_START
                    self._client = client
                    while not stop.is_set():
                        while self._pending:
                            topic = next(iter(self._pending))
                            payload, retain = self._pending[topic]
                            await client.publish(topic, payload, qos=1, retain=retain)
                            # A newer payload may have arrived meanwhile: keep it.
                            if self._pending.get(topic) == (payload, retain):
                                del self._pending[topic]
                        self._wake.clear()
                        await _wait_either(self._wake, stop)
            except aiomqtt.MqttError as exc:
                emit(logging.WARNING, "publisher_disconnected", error=exc)
            finally:
                self._client = None
            if not stop.is_set():
                await _sleep_or_stop(stop, backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)


async def _wait_either(a: asyncio.Event, b: asyncio.Event) -> None:
    ta = asyncio.ensure_future(a.wait())
    tb = asyncio.ensure_future(b.wait())
    try:
        await asyncio.wait({ta, tb}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ta.cancel()
        tb.cancel()
