"""Throwaway certificates made with openssl: a CA, a broker certificate, a client one.

Keys are P-256: generating one takes a millisecond where an RSA key takes a
sizeable fraction of a second, and the TLS tests make three per test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import msgspec


class Certificates(msgspec.Struct, frozen=True):
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _signed(where: Path, name: str, subject: str, ext: str, *, ca: Path, ca_key: Path) -> Path:
    key, csr, cert = where / f"{name}.key", where / f"{name}.csr", where / f"{name}.crt"
    extfile = where / f"{name}.cnf"
    extfile.write_text(ext + "\n")
    _openssl(
        *("req", *NEW_KEY, "-nodes", "-keyout", str(key)),
        *("-out", str(csr), "-subj", subject),
    )
    _openssl(
        *("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key)),
        *("-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(extfile)),
    )
    return cert


def make_certificates(where: Path, server_names: str = "IP:127.0.0.1") -> Certificates:
    """A CA, a broker certificate for ``server_names`` (a subjectAltName list) and a
    client certificate (CN ``agent-1``), each signed by the CA."""
    ca, ca_key = where / "ca.crt", where / "ca.key"
    _openssl(
        *("req", "-x509", *NEW_KEY, "-nodes", "-days", "1"),
        *("-keyout", str(ca_key), "-out", str(ca), "-subj", "/CN=reliabilityd test CA"),
    )
    server = _signed(
        where, "server", "/CN=broker", f"subjectAltName={server_names}", ca=ca, ca_key=ca_key
    )
    client = _signed(
        where, "client", "/CN=agent-1", "extendedKeyUsage=clientAuth", ca=ca, ca_key=ca_key
    )
    return Certificates(
        ca=ca,
        server_cert=server,
        server_key=where / "server.key",
        client_cert=client,
        client_key=where / "client.key",
    )
