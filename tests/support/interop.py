"""MQTT brokers and publishers no one here wrote, each a real process, for the interop matrix.

Brokers: mosquitto (the system's), rumqttd (in iotcore's wheel, the embedded
extra), amqtt (PyPI, the dev extra) and aedes (npm, ``tests/interop``).
Publishers: mosquitto_pub, paho-mqtt (a child Python process) and mqtt.js
(npm). ``make test`` installs the npm packages (scripts/ensure-servers).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Literal

from reliabilityd.embedded._servers import IotcoreBroker
from reliabilityd.embedded.processes import Mosquitto, Server

INTEROP = Path(__file__).resolve().parent.parent / "interop"
Version = Literal["5", "3.1.1"]


class Amqtt(Server):
    """amqtt's broker (MQTT 3.1.1) from its own command line."""

    def argv(self) -> list[str]:
        conf = self.workdir / "amqtt.yaml"
        conf.write_text(
            "listeners:\n"
            "  default:\n"
            "    type: tcp\n"
            f"    bind: 127.0.0.1:{self.port}\n"
            "plugins:\n"
            "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n"
        )
        binary = Path(sys.executable).parent / "amqtt"
        return [str(binary), "-c", str(conf)]


class Aedes(Server):
    """aedes (MQTT 3.1.1) with its in-memory persistence, in node."""

    def argv(self) -> list[str]:
        node = shutil.which("node")
        assert node is not None, "node is not installed"
        return [node, str(INTEROP / "broker.mjs"), str(self.port)]


class Broker:
    """One broker of the matrix: how to start it and the MQTT versions it speaks."""

    def __init__(
        self, name: str, versions: tuple[Version, ...], *, queues_while_away: bool = True
    ) -> None:
        self.name = name
        self.versions = versions
        # Whether the broker delivers, on reconnect, the QoS 1 messages that
        # arrived for a persistent session while its client was away.
        self.queues_while_away = queues_while_away

    def server(self, workdir: Path, port: int) -> Server:
        if self.name == "mosquitto":
            return Mosquitto("mosquitto", workdir, port)
        if self.name == "rumqttd":
            return IotcoreBroker("rumqttd", workdir, port)
        if self.name == "amqtt":
            return Amqtt("amqtt", workdir, port)
        return Aedes("aedes", workdir, port)


BROKERS = (
    Broker("mosquitto", ("5", "3.1.1")),
    # iotcore's rumqttd listens for MQTT 3.1.1 (its MQTT 5 listener is not enabled).
    Broker("rumqttd", ("3.1.1",)),
    # amqtt implements MQTT 3.1.1 only; it keeps the session (session present
    # 1) but delivers none of what was published while the client was away.
    Broker("amqtt", ("3.1.1",), queues_while_away=False),
    Broker("aedes", ("3.1.1",)),  # aedes implements MQTT 3.1.1 (and 3.1)
)
PUBLISHERS = ("mosquitto_pub", "paho-mqtt", "mqtt.js")

_PAHO = """
import sys
import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
port, topic, version, client_id = sys.argv[1:5]
protocol = MQTTProtocolVersion.MQTTv5 if version == "5" else MQTTProtocolVersion.MQTTv311
client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
client.connect("127.0.0.1", int(port))
client.loop_start()
infos = [client.publish(topic, line.rstrip("\\n"), qos=1) for line in sys.stdin if line.strip()]
for info in infos:
    info.wait_for_publish(30)
    assert info.is_published(), "not acknowledged"
client.disconnect()
client.loop_stop()
"""


async def publish_lines(
    publisher: str, port: int, topic: str, lines: list[bytes], *, version: Version, client_id: str
) -> None:
    """Each line one QoS 1 message, by a program no one here wrote; waits for its exit."""
    if publisher == "mosquitto_pub":
        binary = shutil.which("mosquitto_pub")
        assert binary is not None, "mosquitto_pub is not installed"
        argv = [binary, "-h", "127.0.0.1", "-p", str(port), "-q", "1", "-t", topic, "-l"]
        argv += ["-i", client_id, "-V", "mqttv5" if version == "5" else "mqttv311"]
    elif publisher == "paho-mqtt":
        argv = [sys.executable, "-c", _PAHO, str(port), topic, version, client_id]
    else:
        node = shutil.which("node")
        assert node is not None, "node is not installed"
        url = f"mqtt://127.0.0.1:{port}"
        argv = [node, str(INTEROP / "publish.mjs"), url, topic, "5" if version == "5" else "4"]
        argv.append(client_id)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(b"\n".join(lines) + b"\n"), 60)
    assert proc.returncode == 0, f"{publisher} failed ({proc.returncode}): {out.decode()}"
