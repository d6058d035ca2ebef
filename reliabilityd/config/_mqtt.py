"""The broker's address and TLS from the configuration: URL parsing and the SSL context."""

from __future__ import annotations

import os
import ssl
from urllib.parse import unquote, urlsplit

import msgspec

from reliabilityd.config._model import MqttConfig


class MqttEndpoint(msgspec.Struct, frozen=True):
    host: str
    port: int
    tls: bool
    username: str | None
    password: str | None


def parse_mqtt_url(url: str) -> MqttEndpoint:
    """mqtt://[user[:password]@]host[:port] or mqtts:// for TLS."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts"):
        raise ValueError(f"scheme must be mqtt:// or mqtts://, got {url.split(':', 1)[0]!r}")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    tls = parts.scheme == "mqtts"
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError as exc:
        raise ValueError(f"bad port: {exc}") from None
    return MqttEndpoint(
        host=parts.hostname,
        port=port,
        tls=tls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


class TlsProblem(ValueError):
    """A ``[mqtt.tls]`` setting that cannot be used; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"mqtt.tls.{field}: {message}")
        self.field = field
        self.message = message


def tls_context(config: MqttConfig) -> ssl.SSLContext:
    """The TLS context of an mqtts:// connection from ``[mqtt.tls]``; TlsProblem if unusable."""
    tls = config.tls
    for field in ("ca_file", "cert_file", "key_file"):
        name = getattr(tls, field)
        if name and not os.access(name, os.R_OK):
            raise TlsProblem(field, f"cannot read {name!r}")
    if tls.key_file and not tls.cert_file:
        raise TlsProblem("key_file", "set without cert_file")
    if tls.insecure and tls.ca_file:
        raise TlsProblem("insecure", "verifies nothing, so ca_file would not be used")
    try:
        context = ssl.create_default_context(cafile=tls.ca_file or None)
    except (ssl.SSLError, OSError) as exc:
        raise TlsProblem("ca_file", f"not a PEM file of CA certificates: {exc}") from None
    if tls.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert_file:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file or None, tls.key_password or None)
        except (ssl.SSLError, OSError) as exc:
            field = "key_file" if tls.key_file and "KEY" in str(exc).upper() else "cert_file"
            raise TlsProblem(field, f"no certificate and matching key: {exc}") from None
    return context
