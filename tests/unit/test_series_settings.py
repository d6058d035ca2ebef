"""A series' settings, fingerprint and rules, kept once a suite: what the functions give."""

from __future__ import annotations

from reliabilityd.config import Config, StatsConfig
from reliabilityd.config._model import SuiteOverride
from reliabilityd.daemon import _series_settings
from reliabilityd.daemon._series_settings import Known
from reliabilityd.rules import Rule
from reliabilityd.store import Series


def _config(window: int) -> tuple[Config, list[Rule]]:
    rules = [
        Rule(name="low", suite="a-*", k=5, below=0.8, trigger="ci-low", slices=True),
        Rule(name="other", suite="b", k=1, below=0.5),
    ]
    cfg = Config(
        stats=StatsConfig(k=[1, 3]),
        suites=[SuiteOverride(match="a-*", window=window, min_coverage=0.5)],
    )
    return cfg, rules


def test_kept_answers_are_the_functions_answers_and_a_new_config_makes_new_ones() -> None:
    cfg, rules = _config(window=20)
    known = Known(cfg, rules)
    for suite in ("a-1", "b", "c", "a-1"):
        assert known.settings(suite) == _series_settings.settings(cfg, rules, suite)
        assert known.fingerprint(suite) == _series_settings.fingerprint(cfg, rules, suite)
        for series in (Series(suite), Series(suite, "s1")):
            assert known.series_rules(series) == _series_settings.series_rules(rules, series)
    assert known.settings("a-1").window == 20
    assert known.settings("a-1").ks == (1, 3, 5)
    # A caller's list is its own.
    known.series_rules(Series("a-1")).clear()
    assert [r.name for r in known.series_rules(Series("a-1"))] == ["low"]

    cfg2, rules2 = _config(window=40)
    again = Known(cfg2, rules2)
    assert again.settings("a-1").window == 40
    assert again.fingerprint("a-1") != known.fingerprint("a-1")
