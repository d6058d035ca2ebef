"""Where notifications go: MQTT, the Redis history stream, Alertmanager, a webhook.

Every sink has one small protocol: a ``name``, whether it ``needs_redis``
and ``send(note)``, which returns once the receiver accepted the note and
raises ``SinkError`` otherwise. HTTP goes through one aiohttp session whose
timeouts cancel the request itself (no worker thread left running after the
retry). The sinks that do not need Redis are the ones that can still say
that the daemon is blind.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import aiohttp
import msgspec

from reliabilityd.alerting.notify import BlindNotice, Notification, alertmanager_alert, blind_alert
from reliabilityd.alerting.publisher import Publisher, TopicRefused
from reliabilityd.config import Config
from reliabilityd.errors import ReliabilitydError
from reliabilityd.logs import redact
from reliabilityd.mqtt_connector import MqttError
from reliabilityd.store import Store, StoreError

Note = Notification | BlindNotice


class SinkError(ReliabilitydError):
    """A sink refused or could not take a notification; it will be retried."""


class SinkRefused(SinkError):
    """The sink refuses this note for good (an MQTT topic the broker refuses): set it aside."""


class Sink(Protocol):
    name: str
    needs_redis: bool

    async def send(self, note: Note) -> None:
        """Deliver one note; raise SinkError when the receiver did not accept it."""


class Http:
    """One aiohttp session for every HTTP sink, opened on first use in the running loop."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def post_json(self, url: str, body: bytes, seconds: float) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                url,
                data=body,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=seconds),
            ) as response:
                if not 200 <= response.status < 300:
                    raise SinkError(f"{redact(url)} answered HTTP {response.status}")
        except TimeoutError:
            raise SinkError(f"{redact(url)} did not answer within {seconds} s") from None
        except aiohttp.ClientError as exc:
            raise SinkError(f"{redact(url)} unreachable: {redact(str(exc))}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class MqttSink:
    """Retained QoS 1 state per rule on ``<topic>/<suite>/<rule>``; the blind notice on
    ``<topic>/{daemon}/<instance>`` (braces: no suite can be named so)."""

    name = "mqtt"
    needs_redis = False

    def __init__(self, publisher: Publisher, topic: str) -> None:
        self.publisher = publisher
        self.topic = topic

    async def send(self, note: Note) -> None:
        if isinstance(note, BlindNotice):
            topic = f"{self.topic}/{{daemon}}/{note.instance}"
        else:
            topic = f"{self.topic}/{note.suite}/{note.rule}"
        try:
            await self.publisher.send(topic, msgspec.json.encode(note), retain=True)
        except TopicRefused as exc:
            raise SinkRefused(f"MQTT topic {topic!r} refused: {exc}") from exc
        except MqttError as exc:
            raise SinkError(f"MQTT publish to {topic} failed: {exc}") from exc


class RedisSink:
    """The capped history stream ``<prefix>:alerts``."""

    name = "redis"
    needs_redis = True

    def __init__(self, store: Store, key: str, maxlen: int) -> None:
        self.store = store
        self.key = key
        self.maxlen = maxlen

    async def send(self, note: Note) -> None:
        await self.store.alerts.append_alert_history(
            self.key, msgspec.json.encode(note), self.maxlen
        )


class AlertmanagerSink:
    """``POST <url>/api/v2/alerts`` with one alert in Alertmanager's format."""

    name = "alertmanager"
    needs_redis = False

    def __init__(self, http: Http, url: str, timeout: float, resend_interval: float) -> None:
        self.http = http
        self.url = url.rstrip("/") + "/api/v2/alerts"
        self.timeout = timeout
        self.resend_interval = resend_interval

    async def send(self, note: Note) -> None:
        now = time.time()
        if isinstance(note, BlindNotice):
            alert = blind_alert(note, now=now, resend_interval=self.resend_interval)
        else:
            alert = alertmanager_alert(note, now=now, resend_interval=self.resend_interval)
        await self.send_alert(alert)

    async def send_alert(self, alert: dict[str, Any]) -> None:
        """POST one alert already in Alertmanager's format."""
        await self.http.post_json(self.url, msgspec.json.encode([alert]), self.timeout)


class WebhookSink:
    """The note itself as a JSON POST."""

    name = "webhook"
    needs_redis = False

    def __init__(self, http: Http, url: str, timeout: float) -> None:
        self.http = http
        self.url = url
        self.timeout = timeout

    async def send(self, note: Note) -> None:
        await self.http.post_json(self.url, msgspec.json.encode(note), self.timeout)


# What one delivery attempt may fail with and a later attempt may not.
SEND_ERRORS = (SinkError, TimeoutError, OSError, StoreError)


async def attempt(sink: Sink, note: Note, within: float) -> Exception | None:
    """Send once within ``within`` seconds; a failure a retry may cure is returned, not raised.

    The one delivery step of the outbox drainer and of the blind notice: each
    decides for itself when to try again.
    """
    try:
        await asyncio.wait_for(sink.send(note), within)
    except SEND_ERRORS as exc:
        return exc
    return None


def configured(
    config: Config, store: Store, publisher: Publisher | None, http: Http
) -> dict[str, Sink]:
    """The sinks the config turns on, by name (the name is part of the outbox key)."""
    sinks: list[Sink] = []
    if publisher is not None:
        sinks.append(MqttSink(publisher, config.sinks.mqtt.topic))
    if config.sinks.redis.enabled:
        sinks.append(RedisSink(store, config.alerts_key, config.sinks.redis.maxlen))
    am = config.sinks.alertmanager
    if am.url:
        sinks.append(AlertmanagerSink(http, am.url, am.timeout, am.resend_interval))
    hook = config.sinks.webhook
    if hook.url:
        sinks.append(WebhookSink(http, hook.url, hook.timeout))
    return {sink.name: sink for sink in sinks}
