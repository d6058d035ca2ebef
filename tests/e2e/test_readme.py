"""The README's first screen works as printed against `reliabilityd run --embedded`.

The shell lines and the Python examples of "One event in" are read from
README.md itself and run as a reader runs them, with no address copied from
the banner: each event is counted, and the Client example prints what its
comment says.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.embedded import counts, embedded_run, private_env

README = Path(__file__).resolve().parents[2] / "README.md"


def first_screen() -> tuple[str, str, str]:
    """(the shell block, the Emitter example, the Client example) of "One event in"."""
    text = README.read_text()
    section = text[text.index("## One event in") : text.index("## Numbers and an alert out")]
    (shell,) = re.findall(r"```sh\n(.*?)```", section, re.S)
    emitter, client = re.findall(r"```python\n(.*?)```", section, re.S)
    assert "Emitter()" in emitter
    assert "Client()" in client
    return shell, emitter, client


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.mark.timeout(180)
def test_the_first_screen_counts_every_event_it_sends(tmp_path: Path) -> None:
    shell, emitter, client = first_screen()
    env, datadir = private_env(tmp_path)
    # `reliabilityd` on PATH, as `pip install` puts it there.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"

    with embedded_run(datadir, env) as ends:
        done = run(env, "bash", "-euo", "pipefail", "-c", shell)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "run-42\n"  # what `emit` prints, once the broker acknowledged it
        assert asyncio.run(counts(ends.redis_url, 2, 0, suite="deploy-bot")) == (2, 0)

        done = run(env, sys.executable, "-c", emitter)
        assert done.returncode == 0, done.stderr
        assert asyncio.run(counts(ends.redis_url, 3, 0, suite="deploy-bot")) == (3, 0)

        done = run(env, sys.executable, "-c", client)
        assert done.returncode == 0, done.stderr
        promised = re.search(r"# (\{.*\}):", client)
        assert promised is not None
        assert done.stdout == f"{promised[1]}\n"
