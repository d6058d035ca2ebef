"""The client's error types: every failure of a connection is an ``MqttError``."""

from __future__ import annotations


class MqttError(ConnectionError):
    """The broker is unreachable, went away, or broke the protocol; reconnect and retry."""


class Refused(MqttError):
    """The broker refused the connection or the subscription (reason code in the message),
    or an operation the broker said it does not support (its CONNACK capabilities)."""


class MalformedPacket(MqttError):
    """The broker sent bytes that are not a packet this client accepts."""


class Closed(MqttError):
    """The broker ended the connection: DISCONNECT, or the socket closed or reset."""


class TakenOver(Closed):
    """The broker ended the connection because another client connected with its id
    (MQTT 5 DISCONNECT reason 0x8E, Session taken over)."""
