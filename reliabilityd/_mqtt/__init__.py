"""The project's own MQTT 3.1.1 / 5 client: wire code that knows no application."""

from __future__ import annotations

from reliabilityd._mqtt._client import Connection, Message, MqttError, Refused, connect

__all__ = ["Connection", "Message", "MqttError", "Refused", "connect"]
