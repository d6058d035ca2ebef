"""The command line as a user runs it."""

from __future__ import annotations

import pytest

from reliabilityd.cli import main


def test_example_prints_the_seed_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["example"]) == 0
    out = capsys.readouterr().out
    assert "pass@5 = 100% [84%, 100%]" in out
    assert "pass^5 = 10% [0%, 25%]" in out
    assert "UNKNOWN" in out
    assert "'deploy service 0' (4/5 runs)" in out


def test_demo_shows_numbers_and_alert() -> None:
    """`make demo`: private servers, the daemon, the seed suite in, numbers and an alert out."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "reliabilityd", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "pass@5 = 100% [84%, 100%]" in out
    assert "pass^5 = 10% [0%, 25%]" in out
    assert "lottery case: 'deploy service 0' (4/5 runs)" in out
    assert '"state":"firing"' in out
    assert '"below":0.75' in out
