"""The interval setting: a stats default, per-suite overrides, names checked at load."""

from __future__ import annotations

from pathlib import Path

import msgspec
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
    # A rule that names no interval judges its suite's (rules.views computes no own estimate).
    assert all(rule.interval is None for rule in cfg.rules())


def test_the_demo_rule_is_the_default_detector_on_a_windowed_suite() -> None:
    from reliabilityd.config._load import _check
    from reliabilityd.embedded.demo import RULE, demo_config
    from reliabilityd.embedded.liveview import Note, note_line, rule_line

    cfg = demo_config()
    assert RULE.trigger == "detector"
    assert cfg.suite_settings("support-bot")[0] > 0
    _check(cfg, "demo", {})  # the demo passes the checks a config file gets
    note = Note(
        rule=RULE.name,
        suite="support-bot",
        state="firing",
        metric="pass^k",
        k=5,
        trigger=RULE.trigger,
        value=0.2,
        ci_low=0.12,
        ci_high=0.29,
        below=0.5,
        resolve_above=0.6,
        tasks=12,
        runs=10,
    )
    assert "the detector says under 50%" in note_line(note)
    gate = msgspec.structs.replace(note, trigger="ci-low")
    assert "lower bound 12% < 50%" in note_line(gate)
    assert "the detector says pass^5 < 50%" in rule_line(RULE)
