"""One connection of the Emitter: MQTT 5 first, 3.1.1 when the broker takes only that."""

from __future__ import annotations

from typing import Literal

from reliabilityd.config import MqttConfig, TlsConfig
from reliabilityd.mqtt_connector import Connection, MqttError, connect

Version = Literal["5", "3.1.1"]


async def connect_either(
    url: str, protocol: Version | None, keepalive: int, tls: TlsConfig, client_id: str
) -> tuple[Connection, Version]:
    """A clean-session connection and the version it speaks: ``protocol``, else 5, else 3.1.1.

    A 3.1.1-only broker answers an MQTT 5 CONNECT with a refusal or (rumqttd)
    by closing the connection: either makes 3.1.1 the next try. MqttError
    (the last attempt's) when neither connects.
    """
    versions: list[Version] = [protocol] if protocol else ["5", "3.1.1"]
    error: MqttError | None = None
    for version in versions:
        config = MqttConfig(url=url, protocol=version, keepalive=keepalive, tls=tls)
        try:
            conn = await connect(config, identifier=client_id, persistent=False)
        except MqttError as exc:
            error = exc
            continue
        return conn, version
    assert error is not None
    raise error
