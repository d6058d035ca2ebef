"""The interval setting: a stats default, per-suite overrides, names checked at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliabilityd import INTERVALS
from reliabilityd.config import load
from reliabilityd.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_default_is_gaffke_and_suites_override(tmp_path: Path) -> None:
    assert load(write(tmp_path, ""), environ={}).suite_interval("any") == "gaffke"
    cfg = load(
        write(
            tmp_path,
            "[stats]\ninterval = 'gaffke'\n"
            "[[suites]]\nmatch = 'legacy-*'\ninterval = 'percentile'\n"
            "[[suites]]\nmatch = 'win-*'\nwindow = 50\n",
        ),
        environ={},
    )
    assert cfg.suite_interval("legacy-a") == "percentile"
    # An entry that does not name an interval inherits stats.interval.
    assert cfg.suite_interval("win-a") == "gaffke"
    assert cfg.suite_interval("other") == "gaffke"
    assert {cfg.suite_interval(s) for s in ("legacy-a", "other")} == set(INTERVALS)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[stats]\ninterval = 'bca'\n", "$.stats.interval"),
        ("[[suites]]\nmatch = 'a'\ninterval = 'wald'\n", "$.suites[0].interval"),
    ],
)
def test_unknown_interval_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text), environ={})
    assert info.value.field == field
    assert "Invalid enum value" in str(info.value)


def test_the_demo_and_its_rule_judge_gaffke() -> None:
    from reliabilityd.embedded.demo import demo_config

    cfg = demo_config()
    assert cfg.suite_interval("support-bot") == "gaffke"
    # A rule that names no interval judges its suite's (rulestate computes no own estimate).
    assert all(rule.interval is None for rule in cfg.rules())
