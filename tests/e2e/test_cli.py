"""The command line as a user runs it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.embedded import check_demo_output, processes_in


def test_demo_fires_resolves_and_leaves_no_process(tmp_path: Path) -> None:
    """`reliabilityd demo --duration 45`: live fleet, a regression alert and its recovery."""
    datadir = tmp_path / "data"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "reliabilityd",
            "demo",
            "--duration",
            "45",
            "--no-live",
            "--data-dir",
            str(datadir),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_demo_output(proc.stdout)
    assert processes_in(datadir) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_demo_stops_cleanly_on_a_signal(tmp_path: Path, sig: int) -> None:
    """Ctrl-C or SIGTERM mid-run: everything published is counted, then nothing is left."""
    datadir = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "reliabilityd", "demo", "--no-live", "--data-dir", str(datadir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # a suite's line comes after the agents' first round
        if "alert[support-reliability]" in line:
            break
    assert processes_in(datadir) != []
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    published = re.search(r"published (\d+) trial events; Redis counted (\d+)", out)
    assert published is not None, out + err
    assert int(published[1]) > 0
    assert published[1] == published[2]
    assert processes_in(datadir) == []
