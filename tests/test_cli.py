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
