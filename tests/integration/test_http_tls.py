"""The HTTP port over TLS, against a real daemon and redis-server: a certificate
made with openssl, trials posted with that certificate pinned, plain HTTP to the
TLS port refused without harm, and unusable certificate settings as config errors."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import msgspec
import pytest

from reliabilityd.config import Config, load
from reliabilityd.errors import ConfigError
from tests.support.certs import NEW_KEY
from tests.support.daemon import store_for
from tests.support.http import event, http_config, serving
from tests.support.servers import RedisServer

TOKEN = "tls-test-token"


def _self_signed(where: Path, name: str) -> tuple[Path, Path]:
    cert, key = where / f"{name}.crt", where / f"{name}.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", *NEW_KEY, "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=reliabilityd test"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def _tls(cfg: Config, cert: Path, key: Path) -> Config:
    http = msgspec.structs.replace(cfg.http, tls_cert=str(cert), tls_key=str(key))
    return msgspec.structs.replace(cfg, http=http)


async def _post(base: str, body: object, pinned: ssl.SSLContext) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{base}/v1/trials",
            data=msgspec.json.encode(body),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
            ssl=pinned,
        ) as resp,
    ):
        await resp.read()
        return resp.status


async def test_trials_posted_over_https_are_counted_and_plain_http_is_refused_cleanly(
    redis_server: RedisServer, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = _self_signed(tmp_path, "server")
    cfg = _tls(http_config(redis_server, prefix, token=TOKEN), cert, key)
    pinned = ssl.create_default_context(cafile=str(cert))
    caplog.set_level(logging.DEBUG)
    async with serving(cfg) as (_, plain_base), store_for(cfg) as store:
        base = plain_base.replace("http://", "https://")
        assert await _post(base, [event("t1", "1"), event("t2", "1", "fail")], pinned) == 200
        # Plain HTTP to the TLS port: the handshake fails, the connection closes.
        with pytest.raises(aiohttp.ClientError):
            async with aiohttp.ClientSession() as http, http.get(plain_base + "/healthz") as r:
                await r.read()
        reader, writer = await asyncio.open_connection("127.0.0.1", cfg.http.port)
        writer.write(b"POST /v1/trials HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        async with asyncio.timeout(10):
            answer = await reader.read()
        writer.close()
        assert not answer.startswith(b"HTTP/1.1 200")
        # An unpinned client does not trust the certificate.
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await _post(base, [event("t3", "1")], ssl.create_default_context())
        # The daemon keeps serving over TLS.
        assert await _post(base, [event("t3", "1")], pinned) == 200
        async with aiohttp.ClientSession() as http, http.get(base + "/healthz", ssl=pinned) as r:
            assert r.status == 200
        state = await store.reads.read_state("web")
        assert state.counters.trials == 3
    assert not [r for r in caplog.records if r.exc_info is not None and r.levelno >= logging.ERROR]


def _config_file(tmp_path: Path, cert: Path | str, key: Path | str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f"[http]\nport = 8080\ntls_cert = {str(cert)!r}\ntls_key = {str(key)!r}\n",
    )
    return path


def test_unusable_tls_files_are_config_errors_naming_the_field(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path, "a")
    _, other_key = _self_signed(tmp_path, "b")
    assert load(_config_file(tmp_path, cert, key), environ={}).http.tls_cert == str(cert)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases: list[tuple[Path | str, Path | str, str, str]] = [
        (tmp_path / "missing.crt", key, "$.http.tls_cert", "no such file"),
        (cert, tmp_path / "missing.key", "$.http.tls_key", "no such file"),
        (tmp_path, key, "$.http.tls_cert", "not a readable file"),
        (cert, other_key, "$.http.tls_key", "is not the key of tls_cert"),
        (garbage, key, "$.http.tls_cert", "not a PEM certificate"),
        (cert, garbage, "$.http.tls_key", "not a PEM private key"),
        (cert, "", "$.http.tls_key", "set both or neither"),
        ("", key, "$.http.tls_cert", "set both or neither"),
    ]
    for c, k, field, words in cases:
        path = _config_file(tmp_path, c, k)
        with pytest.raises(ConfigError) as info:
            load(path, environ={})
        assert info.value.field == field, (c, k, info.value)
        assert words in info.value.message, (c, k, info.value)
        assert str(path) in str(info.value)


def test_run_with_a_mismatched_key_exits_2_naming_the_file_and_field(tmp_path: Path) -> None:
    cert, _ = _self_signed(tmp_path, "a")
    _, other_key = _self_signed(tmp_path, "b")
    path = _config_file(tmp_path, cert, other_key)
    proc = subprocess.run(
        [sys.executable, "-m", "reliabilityd", "run", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: $.http.tls_key" in proc.stderr
    assert "Traceback" not in proc.stderr
