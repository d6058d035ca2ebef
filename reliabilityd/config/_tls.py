"""The HTTP port's TLS from ``[http] tls_cert`` / ``tls_key``: the server's SSL context."""

from __future__ import annotations

import os
import ssl

from reliabilityd.config._http import HttpConfig


class HttpTlsProblem(ValueError):
    """An ``[http]`` TLS setting that cannot be used; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"http.{field}: {message}")
        self.field = field
        self.message = message


def http_tls_context(config: HttpConfig) -> ssl.SSLContext | None:
    """The server context the HTTP port serves TLS with; None for plain HTTP.

    HttpTlsProblem names the field when a file is missing or unreadable, is
    not a PEM certificate or key, or the key is not the certificate's.
    """
    if not config.tls_cert and not config.tls_key:
        return None
    if not config.tls_cert:
        raise HttpTlsProblem("tls_cert", "tls_key is set without it: set both or neither")
    if not config.tls_key:
        raise HttpTlsProblem("tls_key", "tls_cert is set without it: set both or neither")
    for field in ("tls_cert", "tls_key"):
        name = getattr(config, field)
        if not os.path.isfile(name) or not os.access(name, os.R_OK):
            why = "no such file" if not os.path.exists(name) else "not a readable file"
            raise HttpTlsProblem(field, f"cannot read {name!r}: {why}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        # Parses the certificate alone, so its errors are told apart from the key's.
        ssl.create_default_context(cafile=config.tls_cert)
    except (ssl.SSLError, OSError) as exc:
        raise HttpTlsProblem("tls_cert", f"not a PEM certificate: {exc}") from None
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except (ssl.SSLError, OSError) as exc:
        if "mismatch" in str(exc).lower():
            message = f"is not the key of tls_cert {config.tls_cert!r}: {exc}"
        else:
            message = f"not a PEM private key: {exc}"
        raise HttpTlsProblem("tls_key", message) from None
    return context
