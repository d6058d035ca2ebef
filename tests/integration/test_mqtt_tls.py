"""TLS from ``[mqtt.tls]`` against mosquitto: a CA file, a client certificate, a server
name, an unverified test broker; no SSL_CERT_FILE anywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from reliabilityd.client.emitter import Emitter
from reliabilityd.config import MqttConfig, TlsConfig, load
from reliabilityd.errors import ConfigError
from reliabilityd.mqtt_connector import MqttError, connect
from tests.support.certs import Certificates, make_certificates
from tests.support.servers import Mosquitto, free_port


class Broker(msgspec.Struct):
    url: str
    certs: Certificates


@pytest.fixture
def cert_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    """mosquitto with a TLS listener whose certificate names only ``broker.test``, and
    that takes only clients with a certificate signed by the test CA."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    certs = make_certificates(tmp_path, "DNS:broker.test")
    port = free_port()
    broker = Mosquitto(
        "mosquitto",
        tmp_path,
        free_port(),
        extra=(
            "allow_anonymous true",
            f"listener {port} 127.0.0.1",
            f"cafile {certs.ca}",
            f"certfile {certs.server_cert}",
            f"keyfile {certs.server_key}",
            "require_certificate true",
        ),
    )
    broker.start()
    yield Broker(f"mqtts://127.0.0.1:{port}", certs)
    broker.stop()


def tls(broker: Broker, **fields: object) -> TlsConfig:
    base = TlsConfig(
        ca_file=str(broker.certs.ca),
        cert_file=str(broker.certs.client_cert),
        key_file=str(broker.certs.client_key),
        server_name="broker.test",
    )
    return msgspec.structs.replace(base, **fields)


async def round_trip(cfg: MqttConfig, topic: str) -> bytes:
    sub = await connect(cfg, identifier=f"{topic}-sub", persistent=False)
    await sub.subscribe(topic)
    pub = await connect(cfg, identifier=f"{topic}-pub", persistent=False)
    await pub.publish(topic, b"over TLS", retain=False)
    (message,) = await asyncio.wait_for(sub.take(10), 10)
    await pub.close()
    await sub.close()
    return message.payload


async def test_a_ca_file_a_client_certificate_and_a_server_name(cert_broker: Broker) -> None:
    cfg = MqttConfig(url=cert_broker.url, tls=tls(cert_broker))
    assert await round_trip(cfg, "tls/full") == b"over TLS"


@pytest.mark.parametrize(
    ("change", "fault"),
    [
        ({"server_name": ""}, "CERTIFICATE_VERIFY_FAILED"),  # the certificate names broker.test
        ({"ca_file": ""}, "CERTIFICATE_VERIFY_FAILED"),  # the system CAs do not know ours
        ({"cert_file": "", "key_file": ""}, "cannot reach|lost|closed|certificate"),
    ],
    ids=["no-server-name", "no-ca-file", "no-client-certificate"],
)
async def test_each_part_is_needed(cert_broker: Broker, change: dict[str, str], fault: str) -> None:
    cfg = MqttConfig(url=cert_broker.url, tls=tls(cert_broker, **change))

    async def connect_and_subscribe() -> None:
        conn = await connect(cfg, identifier="x", persistent=False)
        await conn.subscribe("t")  # a refused client certificate may show only now

    with pytest.raises(MqttError, match=fault):
        await connect_and_subscribe()


async def test_insecure_accepts_an_unverified_test_broker(cert_broker: Broker) -> None:
    cfg = MqttConfig(
        url=cert_broker.url, tls=tls(cert_broker, ca_file="", server_name="", insecure=True)
    )
    assert await round_trip(cfg, "tls/insecure") == b"over TLS"


async def test_the_emitter_takes_the_same_tls_settings(cert_broker: Broker) -> None:
    cfg = MqttConfig(url=cert_broker.url, tls=tls(cert_broker))
    sub = await connect(cfg, identifier="tls-emitter-sub", persistent=False)
    await sub.subscribe("tls/emitter")
    emitter = Emitter(cert_broker.url, topic="tls/emitter", tls=tls(cert_broker))
    async with emitter:
        await emitter.aemit("s", "t", "pass")
        await emitter.aflush(10)
    (message,) = await asyncio.wait_for(sub.take(10), 10)
    assert b'"suite":"s"' in message.payload
    await sub.close()


def test_the_emitter_refuses_tls_settings_it_cannot_use(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mqtts://"):
        Emitter("mqtt://127.0.0.1:1883", tls=TlsConfig(ca_file="x"))
    with pytest.raises(ValueError, match=r"mqtt.tls.ca_file: cannot read"):
        Emitter("mqtts://127.0.0.1:8883", tls=TlsConfig(ca_file=str(tmp_path / "missing.pem")))


@pytest.mark.parametrize(
    ("table", "field", "message"),
    [
        ('ca_file = "{missing}"', "$.mqtt.tls.ca_file", "cannot read"),
        ('ca_file = "{junk}"', "$.mqtt.tls.ca_file", "not a PEM file"),
        ('cert_file = "{cert}"\nkey_file = "{other_key}"', "$.mqtt.tls", "matching key"),
        ('key_file = "{key}"', "$.mqtt.tls.key_file", "without cert_file"),
        ('insecure = true\nca_file = "{ca}"', "$.mqtt.tls.insecure", "verifies nothing"),
    ],
)
def test_config_errors_name_the_file_and_the_field(
    tmp_path: Path, table: str, field: str, message: str
) -> None:
    certs = make_certificates(tmp_path)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    values = {
        "missing": tmp_path / "missing.pem",
        "junk": junk,
        "cert": certs.client_cert,
        "other_key": certs.server_key,
        "key": certs.client_key,
        "ca": certs.ca,
    }
    path = tmp_path / "config.toml"
    path.write_text(
        '[mqtt]\nurl = "mqtts://broker.example:8883"\n[mqtt.tls]\n' + table.format(**values) + "\n"
    )
    with pytest.raises(ConfigError) as caught:
        load(path)
    text = str(caught.value)
    assert str(path) in text
    assert field in text
    assert message in text


def test_tls_settings_on_a_plain_url_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[mqtt]\nurl = "mqtt://broker:1883"\n[mqtt.tls]\ninsecure = true\n')
    with pytest.raises(ConfigError, match=r"\$\.mqtt\.tls.*mqtts://"):
        load(path)


def test_a_good_tls_table_loads(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    path = tmp_path / "config.toml"
    path.write_text(
        '[mqtt]\nurl = "mqtts://broker:8883"\n[mqtt.tls]\n'
        f'ca_file = "{certs.ca}"\ncert_file = "{certs.client_cert}"\n'
        f'key_file = "{certs.client_key}"\nserver_name = "broker.test"\n'
    )
    assert load(path).mqtt.tls.server_name == "broker.test"
