"""`reliabilityd run --embedded -c FILE` reloads FILE on SIGHUP, as `run -c` does.

The daemon starts without a token; the file then gets one and the process a
SIGHUP: writes need the token from then on, the servers' URLs and port (put in
by `--embedded`) are not taken for changes, and SIGTERM still stops everything.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import msgspec

from tests.support.embedded import HTTP, processes_in
from tests.support.helpers import wait_until


async def _post(url: str, token: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = msgspec.json.encode([{"suite": "web", "task": "t", "trial": "1", "outcome": "pass"}])
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{url}/v1/trials", data=body, headers=headers) as resp,
    ):
        return resp.status


def test_run_embedded_reloads_its_config_file_on_sighup(tmp_path: Path) -> None:
    config = tmp_path / "reliabilityd.toml"
    config.write_text("[stats]\nci_interval = 0.5\n")
    log = tmp_path / "daemon.log"
    datadir = tmp_path / "data"
    with log.open("w") as errors:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reliabilityd",
                "run",
                "--embedded",
                "-c",
                str(config),
                "--data-dir",
                str(datadir),
            ],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=dict(os.environ),
        )
    try:
        assert proc.stdout is not None
        url = None
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            found = HTTP.search(line)
            url = found[1] if found else None
        assert url is not None, log.read_text()
        assert asyncio.run(_post(url, None)) == 200

        config.write_text('[stats]\nci_interval = 0.5\n\n[http]\ntoken = "embedded-token"\n')
        proc.send_signal(signal.SIGHUP)

        async def reloaded() -> bool:
            assert proc.poll() is None, log.read_text()
            return "event=reloaded" in log.read_text()

        asyncio.run(wait_until(reloaded, 30))
        text = log.read_text()
        assert "changed=http.token" in text, text
        assert "reload_ignored" not in text, text
        assert asyncio.run(_post(url, None)) == 401
        assert asyncio.run(_post(url, "embedded-token")) == 200
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0, log.read_text()
    assert processes_in(datadir) == []
