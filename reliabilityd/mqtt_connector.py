"""Opening an MQTT connection from the configuration: the app's side of ``_mqtt``.

``_mqtt`` knows no configuration; this module turns an ``MqttConfig`` (URL
with credentials and scheme, protocol version, keep-alive, session expiry,
``[mqtt.tls]``) into the plain values its ``connect`` takes.
"""

from __future__ import annotations

from reliabilityd._mqtt import (
    Closed,
    Connection,
    MalformedPacket,
    Message,
    MqttError,
    Refused,
    Skipped,
    TakenOver,
)
from reliabilityd._mqtt import connect as _connect
from reliabilityd.config import MqttConfig, parse_mqtt_url, tls_context

__all__ = [
    "Closed",
    "Connection",
    "MalformedPacket",
    "Message",
    "MqttError",
    "Refused",
    "Skipped",
    "TakenOver",
    "connect",
]


async def connect(
    config: MqttConfig,
    *,
    identifier: str,
    persistent: bool,
    receive_maximum: int | None = None,
    reply_within: float = 10.0,
    max_payload: int = 1 << 20,
) -> Connection:
    """Open a connection with credentials from the URL and TLS as configured; MqttError
    on failure. Messages over ``max_payload`` bytes arrive as ``Skipped``."""
    endpoint = parse_mqtt_url(config.url)
    return await _connect(
        endpoint.host,
        endpoint.port,
        identifier=identifier,
        persistent=persistent,
        v5=config.protocol == "5",
        keepalive=config.keepalive,
        session_expiry=config.session_expiry,
        username=endpoint.username,
        password=endpoint.password,
        tls=tls_context(config) if endpoint.tls else None,
        server_name=config.tls.server_name or None,
        receive_maximum=receive_maximum,
        reply_within=reply_within,
        max_payload=max_payload,
    )
