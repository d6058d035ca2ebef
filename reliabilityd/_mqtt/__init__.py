"""The project's own MQTT 3.1.1 / 5 client: wire code that knows no application.

The subset of MQTT it implements is what the daemon, its publisher and the
``Emitter`` need, and no more:

* CONNECT with a clean or persistent session (MQTT 5: Session Expiry,
  Receive Maximum, Maximum Packet Size), username and password, keep-alive
  (honouring a Server Keep Alive; PINGREQ goes on when it is 0), over TCP or
  TLS; the session-present flag and the CONNACK's capabilities (Maximum QoS,
  Retain Available, Maximum Packet Size, Shared and Wildcard Subscription
  Available) are read and honoured.
* SUBSCRIBE to one topic filter per packet at QoS 0 or 1 (shared
  subscriptions included); receiving PUBLISH at QoS 0 and 1, with PUBACKs
  sent when the application says (after its commit), in PUBLISH order.
* PUBLISH at QoS 1 (retained or not) with its PUBACK awaited; DISCONNECT
  either way (MQTT 5 reason codes read, 0x8E Session taken over named).

Not implemented: QoS 2 (a QoS 2 PUBLISH is a protocol error here), the will
message, AUTH (enhanced authentication), UNSUBSCRIBE, topic aliases,
subscription identifiers and options (No Local, Retain As Published, Retain
Handling), request / response information, user properties (read past, never
sent), server redirection, WebSockets, and reconnecting by itself (each
connection is one object; the caller reconnects). Received packet fields are
validated against their own packet; anything else is ``MalformedPacket``.
"""

from __future__ import annotations

from reliabilityd._mqtt._client import Connection, connect, guard_size
from reliabilityd._mqtt._codec import Message, Skipped
from reliabilityd._mqtt._errors import Closed, MalformedPacket, MqttError, Refused, TakenOver

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
    "guard_size",
]
