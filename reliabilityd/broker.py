"""Opening an MQTT connection from the configuration: the app's side of ``_mqtt``.

``_mqtt`` knows no configuration; this module turns an ``MqttConfig`` (URL
with credentials and scheme, protocol version, keep-alive, session expiry)
into the plain values its ``connect`` takes.
"""

from __future__ import annotations

import ssl

from reliabilityd._mqtt import Connection, Message, MqttError, Refused
from reliabilityd._mqtt import connect as _connect
from reliabilityd.config import MqttConfig, parse_mqtt_url

__all__ = ["Connection", "Message", "MqttError", "Refused", "connect"]


async def connect(
    config: MqttConfig,
    *,
    identifier: str,
    persistent: bool,
    receive_maximum: int | None = None,
    reply_within: float = 10.0,
) -> Connection:
    """Open a connection with credentials and TLS from the URL; MqttError on failure."""
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
        tls=ssl.create_default_context() if endpoint.tls else None,
        receive_maximum=receive_maximum,
        reply_within=reply_within,
    )
